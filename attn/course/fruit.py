"""The course's running example: a tiny shop of three items.

Lesson 1 looks prices up by exact name; lesson 2 describes each item by
attributes so that a query can match every key to a degree; lessons 3 and 4
score, weight and combine them.
"""

import numpy as np

NAMES = ("apple", "banana", "chair")

# Lesson 1: the plain dictionary (item -> price).
PRICES = {"apple": 9, "banana": 6, "chair": 3}

# Lesson 2 on: keys are attribute vectors, one row per item.
KEY_ATTRIBUTES = ("sweetness", "durability", "texture")
KEYS = np.array(
    [
        [0.9, 0.1, 0.2],  # apple: the sweetest
        [0.7, 0.1, 0.6],  # banana: the richest texture
        [0.1, 0.9, 0.1],  # chair: the most durable
    ]
)  # (3, d_k=3)

# Values are vectors too: what we get back about each item.
VALUE_ATTRIBUTES = ("price", "liking", "use")
VALUES = np.array(
    [
        [9.0, 0.8, 0.3],  # apple
        [6.0, 0.6, 0.2],  # banana
        [3.0, 0.2, 0.9],  # chair
    ]
)  # (3, d_v=3)

# "Something sweet, not very durable, a little texture": a fruit.
QUERY = np.array([0.8, 0.2, 0.1])  # (d_k=3,)
