"""Tests of the seeded commands that write the lessons' records (attn.experiments)."""
