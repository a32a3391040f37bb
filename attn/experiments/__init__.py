"""The experiments: one module per record a lesson reads, each a seeded ``python -m`` command with progress that
writes its JSON record (with provenance, through ``records``) into ``lessons/records/``.

Lesson 11: induction_runs. Lesson 13: austen_heads. Lesson 14: window_runs, window_induction, window_austen.
Lesson 15: compressed_recall. Lesson 16: smollm2_reading (its argument checks in smollm2_reading_checks).
Lesson 17: long_context, smollm2_length, position_runs. Lesson 18: smollm2_sparse (its measures in topk_reading),
sparse_runs. Lesson 19: serving_runs, serving_smollm2. Each module's docstring gives its command and how long it runs.

Imports: these may import ``attn.common``, the layers, ``attn.data``, ``attn.models`` and ``attn.serving``; only
the course's machinery (``attn.course``) imports them.
"""
