"""Tests of the course's machinery: self-checks, teaching versions against the package, notebook standards (attn.course)."""
