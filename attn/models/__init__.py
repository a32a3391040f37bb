"""Models the course trains with its own layers: lesson 7's recall model (recall), lesson 10's decoder (decoder),
lesson 11's attention-only transformers and their seeds' runs (induction, induction_runs), lesson 13's language model
with its corpus and tokenizer (corpus, tokenizer, lm, lm_heads), and the experiments of lessons 14 and 15 that train;
and lesson 16's pretrained SmolLM2-135M, fetched, converted and loaded into the course's Llama (pretrained_fetch,
pretrained).

These import the layers (the top of ``attn``) and ``attn.common``; never ``attn.measure`` or ``attn.course``.
"""
