"""The course's own machinery: the self-checks (exercises), the fruit table of lessons 1-4 (fruit), lesson 4's
explorer (explorer), running notebooks (execute) and the reading-time rule (reading_time).

These may import the layers, the models and ``attn.common``; nothing outside the course imports them except
``attn.check``.
"""
