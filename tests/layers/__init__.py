"""Tests of the layers a learner builds (the top of attn/)."""
