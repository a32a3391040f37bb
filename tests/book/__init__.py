"""Tests of the built book: its pages, references, guide and what a browser shows."""
