"""Tests of serving many requests (attn.serving, lesson 19)."""
