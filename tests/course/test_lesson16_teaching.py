"""Lesson 16's teaching versions (written out in the lesson) agree with attn.gguf, attn.quantization, attn.norms,
attn.swiglu and the course's rotary: the GGUF reader by hand on a crafted file, the block loops on random blocks,
RMSNorm and SwiGLU on random inputs, and transformers' rotary layout against the course's after reordering."""

import gguf
import numpy as np
import pytest
import torch

from attn import apply_rotary, quantization
from attn import gguf as reader
from attn.models.llama import pairs_to_rotate_half
from attn.norms import RMSNorm
from attn.swiglu import SwiGLU
from tests.gguf_files import write_gguf
from tests.notebooks import ROOT, teaching_namespace


@pytest.fixture(scope="module")
def lesson16():
    return teaching_namespace(ROOT / "lessons" / "16_real_model.ipynb")


@pytest.fixture(scope="module")
def crafted(tmp_path_factory):
    generator = np.random.default_rng(0)
    tensors = {"embedding": (generator.normal(size=(6, 64)).astype(np.float32), "Q8_0"),
               "weight": (generator.normal(size=(3, 4, 96)).astype(np.float32), "Q4_1"),
               "norm": (generator.normal(size=(40,)).astype(np.float32), "F32")}
    kinds = gguf.GGUFValueType
    metadata = {"test.u32": (70000, kinds.UINT32), "test.f32": (0.5, kinds.FLOAT32), "test.bool": (True, kinds.BOOL),
                "test.text": ("Bill is going to the théâtre", kinds.STRING),
                "test.words": (["a", "", "ĠBill"], kinds.ARRAY), "test.i64": (-(2**40), kinds.INT64)}
    return write_gguf(tmp_path_factory.mktemp("gguf") / "crafted.gguf", tensors, metadata)


def test_the_gguf_reader_by_hand_equals_attn_gguf(lesson16, crafted):
    raw = np.memmap(crafted, dtype=np.uint8, mode="r")
    metadata, offset = lesson16["read_metadata"](raw)
    table, data_start = lesson16["read_table"](raw, offset, metadata.get("general.alignment", 32))
    header = reader.read_header(crafted)
    assert metadata == header.metadata
    assert data_start == header.data_offset
    assert {name: (shape, kind, data_start + start) for name, (shape, kind, start) in table.items()} == {
        name: (info.shape, info.ggml_type, info.offset) for name, info in header.tensors.items()}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_block_loops_equal_attn_quantization(lesson16, seed):
    generator = np.random.default_rng(seed)
    weights = generator.normal(size=(1, 32)).astype(np.float32)
    q4_1 = bytes(quantization.quantize_q4_1(weights)[0])
    q8_0 = bytes(gguf.quants.quantize(weights, gguf.GGMLQuantizationType.Q8_0)[0])
    assert [float(x) for x in lesson16["q4_1_block_loop"](q4_1)] == quantization.dequantize_q4_1_block(q4_1)
    assert [float(x) for x in lesson16["q8_0_block_loop"](q8_0)] == quantization.dequantize_q8_0_block(q8_0)


def test_rms_norm_and_swiglu_by_hand_equal_the_modules(lesson16):
    torch.manual_seed(0)
    x = torch.randn(2, 5, 24, dtype=torch.float64)
    norm, mlp = RMSNorm(24, eps=1e-5).double(), SwiGLU(24, 40).double()
    torch.nn.init.normal_(norm.weight)
    with torch.no_grad():
        torch.testing.assert_close(lesson16["rms_norm"](x, norm.weight), norm(x), rtol=0, atol=1e-12)
        by_hand = lesson16["swiglu"](x, mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight)
        torch.testing.assert_close(by_hand, mlp(x), rtol=0, atol=1e-12)


def test_the_rotate_half_layout_by_hand_equals_the_course_s_after_reordering(lesson16):
    torch.manual_seed(1)
    w_q, w_k = torch.randn(4 * 8, 16, dtype=torch.float64), torch.randn(2 * 8, 16, dtype=torch.float64)
    x, positions = torch.randn(7, 16, dtype=torch.float64), torch.arange(7)
    ours = apply_rotary(x @ w_q[:8].T, positions, 500.0) @ apply_rotary(x @ w_k[:8].T, positions, 500.0).T
    rotate_half = lesson16["rotate_half_rotary"]
    q, k = x @ pairs_to_rotate_half(w_q, 4)[:8].T, x @ pairs_to_rotate_half(w_k, 2)[:8].T
    torch.testing.assert_close(rotate_half(q, positions, 500.0) @ rotate_half(k, positions, 500.0).T, ours,
                               rtol=0, atol=1e-10)
