"""Code that lessons 8, 9 and 10 print with inspect.getsource fits the book's output block (78 characters)."""

import inspect

import pytest

from attn.block import TransformerBlock
from attn.decoder import Decoder
from attn.induction import AttentionOnlyTransformer

WIDTH = 78  # the longest printed line of lesson 6's MultiHeadAttention.forward: fits at 1280 px


@pytest.mark.parametrize(
    "printed",
    [TransformerBlock, Decoder.forward, AttentionOnlyTransformer.forward],
    ids=["TransformerBlock", "Decoder.forward", "AttentionOnlyTransformer.forward"],
)
def test_printed_source_fits_the_column(printed):
    lines = inspect.getsource(printed).splitlines()
    too_long = [line for line in lines if len(line) > WIDTH]
    assert not too_long, too_long
