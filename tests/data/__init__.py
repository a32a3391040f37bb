"""Tests of what is fetched and read (attn.data: the corpus, the tokenizer, the model fetch; and the file readers' fuzzing)."""
