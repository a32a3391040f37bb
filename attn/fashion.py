"""The public path of Fashion-MNIST (lesson 23): ``attn.fashion.fashion_mnist(split)`` and ``python -m attn.fashion``.

The code lives in ``attn/data/fashion.py``; this module re-exports its public names.
"""

from attn.data.fashion import CLASS_NAMES, fashion_mnist, main, read_idx

__all__ = ["CLASS_NAMES", "fashion_mnist", "main", "read_idx"]

if __name__ == "__main__":
    main()
