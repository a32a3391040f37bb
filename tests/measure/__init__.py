"""Tests of timing, memory and the GPU suite (attn.measure)."""
