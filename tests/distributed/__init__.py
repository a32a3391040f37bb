"""Tests of attention across processes (attn.distributed, lesson 20)."""
