"""Trained models and the experiments that train them (Part 3: lesson 15's recall comparisons)."""
