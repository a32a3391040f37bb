"""Tests of what is trained or loaded (attn.models)."""
