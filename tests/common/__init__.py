"""Tests of the helpers under everything (attn.common)."""
