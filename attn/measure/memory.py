"""Peak memory of a PyTorch function, measured by watching every tensor its operations create.

PyTorch reports peak memory only for GPUs. ``peak_bytes`` runs a function under a dispatch mode, a hook
that sees every operation PyTorch runs and the tensors it returns. Each newly allocated storage is
added to a running total when an operation returns it and taken off when PyTorch frees it; the largest
total is the peak. Views and in-place results share a storage that is already counted (or belongs to
the inputs) and add nothing. Scratch memory used inside one operation's own C++ code is not seen, and
neither is the allocator's bookkeeping: the count is the tensors a function holds, exactly and the same
on every machine, CPU or GPU.
"""

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from attn.common.validate import require_dense


class _StorageCounter(TorchDispatchMode):
    """Counts the bytes of storages created by operations while it is active, and their peak."""

    def __init__(self):
        super().__init__()
        self.sizes = {}  # id of a live storage -> its bytes
        self.current = self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        inputs = _tensors((args, kwargs))
        before = {id(t.untyped_storage()): t.untyped_storage().nbytes()
                  for t in inputs}  # in-place ops (resize_) may grow these
        output = func(*args, **kwargs)
        starts = {_storage_key(t) for t in inputs}
        for tensor in _tensors(output):
            storage = tensor.untyped_storage()
            if id(storage) in before:  # in place: count only what it grew
                self._count(storage, storage.nbytes() - before[id(storage)])
            elif _storage_key(tensor) not in starts:  # not a view
                self._count(storage, storage.nbytes())
        return output

    def _count(self, storage, nbytes):
        key = id(storage)  # PyTorch keeps one Python object per storage while it lives
        if nbytes <= 0 or (key in self.sizes and nbytes == storage.nbytes()):
            return
        if key not in self.sizes:
            weakref.finalize(storage, self._free, key)
        self.sizes[key] = self.sizes.get(key, 0) + nbytes
        self.current += nbytes
        self.peak = max(self.peak, self.current)

    def _free(self, key):
        self.current -= self.sizes.pop(key, 0)


def _tensors(tree):
    """The tensors that hold memory among the leaves of nested lists, tuples and dicts (meta tensors hold none).

    A sparse (or other non-strided) tensor made by an operation is refused: its memory is not one storage that can
    be counted, so a function that makes one (or returns one) cannot be measured."""
    leaves = [leaf for leaf in tree_leaves(tree) if isinstance(leaf, torch.Tensor)]
    other = next((leaf for leaf in leaves if leaf.layout != torch.strided), None)
    if other is not None:
        raise TypeError(f"the function measured made a tensor of layout {other.layout}, whose memory is not one storage "
                        "that peak_bytes can count; measure a function of dense tensors (.to_dense())")
    return [leaf for leaf in leaves if leaf.device.type != "meta"]


def _storage_key(tensor):
    """Where a tensor's memory starts: views and in-place results share it with their input."""
    return tensor.untyped_storage().data_ptr()


def peak_bytes(function, *arguments):
    """The most bytes of tensors that ``function(*arguments)`` held at once.

    Counts every tensor that any of its PyTorch operations creates, input
    checks included, while it lives (the inputs are not counted); the result
    is dropped before returning. Meta tensors hold no memory: they count 0.
    To measure an algorithm alone, check its inputs before and pass the
    function that does only the arithmetic.
    """
    _check_arguments(function, arguments)
    with _StorageCounter() as counter:
        result = function(*arguments)
        del result
    return counter.peak


def _check_arguments(function, arguments):
    """A function to call, and no sparse tensor among its arguments (its memory is not one storage)."""
    if not callable(function):
        name = type(function).__name__
        raise TypeError(f"peak_bytes measures a function, got {name}; pass the function itself")
    for index, argument in enumerate(arguments):
        if isinstance(argument, torch.Tensor):
            require_dense(f"argument {index}", argument)
