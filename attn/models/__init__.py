"""Trained models and the experiments that train them (Part 3 and on)."""
