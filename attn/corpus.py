"""The public path of the Austen corpus (lesson 13): ``attn.corpus.austen()`` and ``python -m attn.corpus``.

The code lives in ``attn/data/corpus.py``; this module re-exports its public names.
"""

from attn.data.corpus import TITLES, austen, main

__all__ = ["TITLES", "austen", "main"]

if __name__ == "__main__":
    main()
