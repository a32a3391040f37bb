"""Code that lessons 7 to 12 print fits the book's output block (78 characters)."""

import inspect

import pytest

from attn.block import TransformerBlock
from attn.flash import Tiling, _FlashAttention, backward_tiles, forward_tiles
from attn.measure.memory import _StorageCounter, peak_bytes
from attn.models.decoder import Decoder
from attn.models.induction import AttentionOnlyTransformer
from attn.models.recall import RecallModel, train
from attn.triton_kernels import kernel_source, launch_source

WIDTH = 78  # the longest printed line of lesson 6's MultiHeadAttention.forward: fits at 1280 px


@pytest.mark.parametrize(
    "printed",
    [
        TransformerBlock, Decoder.forward, AttentionOnlyTransformer.forward, forward_tiles, backward_tiles,
        Tiling.key_tiles, Tiling.mask, peak_bytes, _StorageCounter.__torch_dispatch__, kernel_source,
        RecallModel.__init__, RecallModel.forward, train, _FlashAttention, launch_source,
    ],
    ids=[
        "TransformerBlock", "Decoder.forward", "AttentionOnlyTransformer.forward", "forward_tiles", "backward_tiles",
        "Tiling.key_tiles", "Tiling.mask", "peak_bytes", "_StorageCounter.__torch_dispatch__", "the Triton kernel",
        "RecallModel.__init__", "RecallModel.forward", "train", "_FlashAttention", "the kernel's launch",
    ],
)
def test_printed_source_fits_the_column(printed):
    lines = (printed() if printed in (kernel_source, launch_source) else inspect.getsource(printed)).splitlines()
    too_long = [line for line in lines if len(line) > WIDTH]
    assert not too_long, too_long
