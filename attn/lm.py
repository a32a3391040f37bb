"""The public path of the course's Austen language model (lesson 13): ``attn.lm.load()`` and
``python -m attn.lm train --out DIR``.

The code lives in ``attn/models/lm.py``; this module re-exports its public names.
"""

from attn.models.lm import HELD_OUT, AustenLM, load, main

__all__ = ["HELD_OUT", "AustenLM", "load", "main"]

if __name__ == "__main__":
    main()
