"""Models the course trains: Part 3's corpus, tokenizer and language model (lesson 13)."""
