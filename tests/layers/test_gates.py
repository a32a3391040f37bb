"""attn.gates (lesson 22): forgetting and differential attention, loops equal to the vectorised forms and to plain
attention where they should be; the gated layer's switches; QK-clip's identities; a sentence for hostile input."""

import math

import pytest
import torch

from attn import MultiHeadAttention
from attn.gates import (
    DifferentialAttention,
    GatedAttention,
    differential_attention,
    differential_attention_loop,
    forgetting_attention,
    forgetting_attention_loop,
    largest_logits,
    qk_clip_,
    stick_breaking_attention,
    stick_breaking_attention_loop,
)
from attn.multihead import explicit_attention


def heads(seed=0, batch=2, num_heads=4, num_kv_heads=2, length=6, dim=8):
    generator = torch.Generator().manual_seed(seed)
    make = lambda h: torch.randn(batch, h, length, dim, generator=generator, dtype=torch.float64)  # noqa: E731
    return make(num_heads), make(num_kv_heads), make(num_kv_heads)


def plain_causal(query, key, value):
    """Causal softmax attention written directly: scores scaled by 1 / sqrt(d), key/value heads shared in groups."""
    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(groups, 1), value.repeat_interleave(groups, 1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    length = query.shape[2]
    scores = scores.masked_fill(torch.ones(length, length, dtype=torch.bool).triu(1), -math.inf)
    return torch.softmax(scores, dim=-1) @ value


def test_the_plain_reference_here_is_lesson_6s_attention():
    query, key, value = heads()
    assert (plain_causal(query, key, value) - explicit_attention(query, key, value, is_causal=True)[0]).abs().max() < 1e-14


def test_forgetting_loop_equals_the_vectorised_form():
    query, key, value = heads()
    log_forget = torch.nn.functional.logsigmoid(torch.randn(2, 4, 6, dtype=torch.float64))
    fast = forgetting_attention(query, key, value, log_forget)
    assert (fast - forgetting_attention_loop(query, key, value, log_forget)).abs().max() < 1e-14


def test_gates_that_never_forget_are_plain_causal_attention():
    query, key, value = heads()
    never = torch.zeros(2, 4, 6, dtype=torch.float64)
    assert (forgetting_attention(query, key, value, never) - plain_causal(query, key, value)).abs().max() < 1e-14


def test_a_closed_gate_cuts_off_everything_before_it():
    """log f = -50 at position 3: queries from 3 on read keys 3 onward only (earlier keys fade by e^-50)."""
    query, key, value = heads()
    log_forget = torch.zeros(2, 4, 6, dtype=torch.float64)
    log_forget[..., 3] = -50.0
    output = forgetting_attention(query, key, value, log_forget)
    late = plain_causal(query[:, :, 3:], key[:, :, 3:], value[:, :, 3:])
    assert (output[:, :, 3:] - late).abs().max() < 1e-12
    assert (output[:, :, :3] - plain_causal(query, key, value)[:, :, :3]).abs().max() < 1e-14


def test_differential_loop_equals_the_vectorised_form_and_lambda_zero_is_plain():
    query, key, value = heads(dim=8)
    fast = differential_attention(query, key, value, 0.6)
    assert (fast - differential_attention_loop(query, key, value, 0.6)).abs().max() < 1e-14
    first = plain_causal(query[..., :4], key[..., :4], value)  # the first map alone, scaled by 1 / sqrt(4)
    assert (differential_attention(query, key, value, 0.0) - first).abs().max() < 1e-14


def test_differential_rows_sum_to_one_minus_lambda_and_a_shared_sink_cancels():
    """Values of ones read each row's sum, 1 - lambda. Two maps that agree (Q1 = Q2, K1 = K2) leave (1 - lambda) A."""
    query, key, _ = heads(dim=8)
    ones = torch.ones(2, 2, 6, 8, dtype=torch.float64)
    assert (differential_attention(query, key, ones, 0.3) - 0.7).abs().max() < 1e-14
    same_q, same_k = torch.cat([query[..., :4]] * 2, -1), torch.cat([key[..., :4]] * 2, -1)
    _, _, value = heads(dim=8)
    expected = 0.7 * plain_causal(query[..., :4], key[..., :4], value)
    assert (differential_attention(same_q, same_k, value, 0.3) - expected).abs().max() < 1e-14


def test_the_gated_layer_with_every_switch_off_is_multihead_attention():
    """gate=False, qk_norm=False, softmax: the same numbers as lesson 6's layer with its weights."""
    torch.manual_seed(0)
    plain = MultiHeadAttention(16, 4, bias=True, rotary_base=10000.0).double()
    layer = GatedAttention(16, 4, bias=True, gate=False, qk_norm=False).double()
    with torch.no_grad():
        for name in ("query_proj", "key_proj", "value_proj", "out_proj"):
            getattr(layer, name).load_state_dict(getattr(plain, name).state_dict())
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    assert (layer(x) - plain(x, x, x, is_causal=True)).abs().max() < 1e-14


def test_the_gate_scales_each_head_feature_by_the_sigmoid_of_its_logit():
    torch.manual_seed(0)
    layer = GatedAttention(16, 4, bias=True).double()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    with torch.no_grad():
        gate_rows = torch.arange(4)[:, None] * 8 + torch.arange(4, 8)  # the second half of each head's 2 d rows
        layer.query_proj.weight[gate_rows.flatten()] = 0.0
        layer.query_proj.bias[gate_rows.flatten()] = 30.0  # sigmoid(30) = 1 to float64's rounding: the gate is open
        open_output = layer(x)
        layer.gate = False  # the same attention read without a gate
        q_rows = (torch.arange(4)[:, None] * 8 + torch.arange(4)).flatten()
        ungated = GatedAttention(16, 4, bias=True, gate=False).double()
        ungated.load_state_dict({**layer.state_dict(), "query_proj.weight": layer.query_proj.weight[q_rows],
                                 "query_proj.bias": layer.query_proj.bias[q_rows]})
        assert (open_output - ungated(x)).abs().max() < 1e-12
        layer.gate = True
        layer.query_proj.bias[gate_rows.flatten()] = -40.0  # closed: every head says nothing, only out_proj's bias is left
        assert (layer(x) - layer.out_proj.bias).abs().max() < 1e-12


@pytest.mark.parametrize("normalize", ["softmax", "sink", "off_by_one", "softpick"])
def test_each_normalisation_gives_rows_of_at_most_one(normalize):
    torch.manual_seed(0)
    layer = GatedAttention(16, 4, normalize=normalize).double()
    if normalize == "sink":
        with torch.no_grad():
            layer.sink_logits.copy_(torch.tensor([-2.0, 0.0, 1.0, 5.0]))
    output, weights = layer(torch.randn(2, 5, 16, dtype=torch.float64), need_weights=True)
    sums = weights.sum(-1)
    assert output.shape == (2, 5, 16) and (weights >= 0).all() and (sums <= 1 + 1e-12).all()
    assert ((sums - 1).abs().max() < 1e-12) == (normalize == "softmax")
    if normalize == "sink":
        assert (sums[:, 3] < sums[:, 0]).all()  # a larger sink keeps more of every row


def test_differential_layer_pairs_heads_and_refuses_a_learned_lambda_of_one():
    torch.manual_seed(0)
    layer = DifferentialAttention(16, 4, num_kv_heads=2).double()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    assert layer(x).shape == (2, 5, 16)
    with torch.no_grad():
        layer.lambda_q1.fill_(1.0)
        layer.lambda_k1.fill_(1.0)  # exp(4) - exp(...) + 0.8: far above 1
    with pytest.raises(ValueError, match="is 1 or more: each row's weights A1 - lam A2 then sum to 1 - lam"):
        layer(x)


def mha(num_kv_heads=4, seed=0):
    torch.manual_seed(seed)
    return MultiHeadAttention(16, 4, num_kv_heads=num_kv_heads, rotary_base=10000.0).double()


@pytest.mark.parametrize("num_kv_heads", [4, 2])
def test_qk_clip_brings_the_heads_over_the_threshold_to_it_and_leaves_the_others(num_kv_heads):
    layer = mha(num_kv_heads)
    x = torch.randn(2, 7, 16, dtype=torch.float64) * 4
    before = largest_logits(layer, x)
    threshold = float(before.sort().values[1:3].mean())  # two heads over it, two under
    _, weights_before = layer(x, x, x, is_causal=True, need_weights=True)
    gamma = qk_clip_(layer, before, threshold)
    after = largest_logits(layer, x)
    over = before > threshold
    assert over.sum() == 2 and (gamma[~over] == 1).all() and (gamma[over] < 1).all()
    assert (after[over] - threshold).abs().max() < 1e-12  # logits are linear in each of q and k: exactly tau
    assert (after[~over] - before[~over]).abs().max() < 1e-12
    _, weights_after = layer(x, x, x, is_causal=True, need_weights=True)
    assert (weights_after[:, ~over] - weights_before[:, ~over]).abs().max() < 1e-12  # other heads untouched
    assert (weights_after[:, over] - weights_before[:, over]).abs().max() > 1e-3


def test_qk_clip_on_a_gated_layer_scales_only_the_query_rows_not_the_gate():
    torch.manual_seed(0)
    layer = GatedAttention(16, 4, qk_norm=False).double()
    x = torch.randn(2, 7, 16, dtype=torch.float64) * 4
    before = largest_logits(layer, x)
    gate_rows = (torch.arange(4)[:, None] * 8 + torch.arange(4, 8)).flatten()
    gates = layer.query_proj.weight[gate_rows].clone()
    qk_clip_(layer, before, float(before.min()) * 0.5)
    assert ((largest_logits(layer, x) - float(before.min()) * 0.5).abs() < 1e-12).all()
    assert torch.equal(layer.query_proj.weight[gate_rows], gates)


@pytest.mark.parametrize(("call", "error", "words"), [
    (lambda q, k, v: forgetting_attention(q, k, v, torch.full((2, 4, 6), 0.1, dtype=torch.float64)), ValueError,
     "a forget gate above 1"),
    (lambda q, k, v: forgetting_attention(q, k, v, torch.full((2, 4, 6), -math.inf, dtype=torch.float64)), ValueError,
     "log 0 = -inf"),
    (lambda q, k, v: forgetting_attention(q.float(), k.float(), v.float(), torch.full((2, 4, 6), -3e38)), ValueError,
     "running sum overflows"),
    (lambda q, k, v: forgetting_attention(q, k, v, torch.zeros(2, 4, 5, dtype=torch.float64)), ValueError,
     "log_forget must be \\(B, H, T\\) = \\(2, 4, 6\\)"),
    (lambda q, k, v: forgetting_attention(q, k, v, torch.zeros(2, 4, 6)), TypeError, "log_forget.to\\(query\\)"),
    (lambda q, k, v: forgetting_attention(q, k[:, :, :5], v[:, :, :5], torch.zeros(2, 4, 6, dtype=torch.float64)),
     ValueError, "same, non-zero number of positions"),
    (lambda q, k, v: forgetting_attention(q, k[:, :1].expand(2, 3, 6, 8), v[:, :1].expand(2, 3, 6, 8),
                                          torch.zeros(2, 4, 6, dtype=torch.float64)), ValueError, "must divide"),
    (lambda q, k, v: differential_attention(q, k, v, 1.0), ValueError, "every weight is negative"),
    (lambda q, k, v: differential_attention(q, k, v, 3.0), ValueError, "sum to 1 - lam <= 0"),
    (lambda q, k, v: differential_attention(q, k, v, math.nan), ValueError, "finite"),
    (lambda q, k, v: differential_attention(q, k, v, "0.5"), TypeError, "lam must be a number"),
    (lambda q, k, v: differential_attention(q[..., :7], k[..., :7], v[..., :7], 0.5), ValueError, "must be even"),
    (lambda q, k, v: differential_attention(q, k, v[..., :4], 0.5), ValueError, "key and value must both be"),
    (lambda q, k, v: forgetting_attention(q, k, v, torch.zeros(2, 4, 6, dtype=torch.float64), scale=0.0), ValueError,
     "scale must be a positive number"),
    (lambda q, k, v: stick_breaking_attention(q, k, v, attend_current="yes"), TypeError, "attend_current must be True"),
    (lambda q, k, v: forgetting_attention(*(torch.ones(1, 1, 4, 4) * 1e18,) * 3, torch.zeros(1, 1, 4), scale=1e3),
     ValueError, "the scores overflowed torch.float32"),
    (lambda q, k, v: stick_breaking_attention(q, k[..., :4], v, True), ValueError, "key and value must both be"),
])
def test_hostile_functional_input_gets_a_sentence(call, error, words):
    with pytest.raises(error, match=words):
        call(*heads())


@pytest.mark.parametrize(("make", "args", "error", "words"), [
    (mha, (torch.ones(4), 0.0), ValueError, "threshold must be a finite number above 0, got 0.0: at 0 every head"),
    (mha, (torch.ones(4), -1.0), ValueError, "above 0"),
    (mha, (torch.ones(4), math.nan), ValueError, "above 0"),
    (mha, (torch.ones(4), True), TypeError, "threshold must be a positive number"),
    (mha, (torch.ones(3), 1.0), ValueError, "one number per head, shape \\(4,\\)"),
    (mha, (torch.tensor([1.0, math.nan, 2.0, 3.0]), 1.0), ValueError, "max_logits contains NaN"),
    (mha, (torch.ones(4, dtype=torch.int64), 1.0), TypeError, "floating-point"),
    (lambda: GatedAttention(16, 4).double(), (torch.ones(4), 1.0), ValueError, "qk_norm=True"),
    (lambda: torch.nn.Linear(2, 2), (torch.ones(4), 1.0), TypeError, "layer must be an attn.MultiHeadAttention"),
])
def test_a_refused_qk_clip_leaves_the_layer_as_it_was(make, args, error, words):
    layer = make()
    state = {name: tensor.clone() for name, tensor in layer.state_dict().items()}
    with pytest.raises(error, match=words):
        qk_clip_(layer, *args)
    assert all(torch.equal(state[name], tensor) for name, tensor in layer.state_dict().items())


@pytest.mark.parametrize(("arguments", "error", "words"), [
    ({"embed_dim": 16, "num_heads": 4, "normalize": "sigmoid"}, ValueError, "normalize must be one of"),
    ({"embed_dim": 16, "num_heads": 3}, ValueError, "cannot be split into 3 equal heads"),
    ({"embed_dim": 16, "num_heads": 4, "num_kv_heads": 3}, ValueError, "must divide"),
    ({"embed_dim": 16, "num_heads": 4, "gate": 1}, TypeError, "gate must be True or False"),
    ({"embed_dim": 16, "num_heads": 4, "rotary_base": 1.0}, ValueError, "above 1"),
])
def test_gated_layer_arguments(arguments, error, words):
    with pytest.raises(error, match=words):
        GatedAttention(**arguments)


def test_layer_inputs_get_sentences():
    layer = GatedAttention(16, 4)
    with pytest.raises(ValueError, match="x must have shape \\(B, T, 16\\)"):
        layer(torch.zeros(2, 5, 8))
    with pytest.raises(ValueError, match="x contains NaN or inf"):
        layer(torch.full((2, 5, 16), math.nan))
    with pytest.raises(ValueError, match="overflowed"):
        layer(torch.full((1, 3, 16), 3e38))
    with pytest.raises(ValueError, match="num_heads=3 and num_kv_heads=3 must be even"):
        DifferentialAttention(12, 3)
    with pytest.raises(ValueError, match="lam = 1 is 1 or more"):
        DifferentialAttention(16, 4, lambda_init=1.0)


def test_gradients_reach_a_learned_lambda_and_the_forget_gates():
    """Trainable inputs pass the door checks without a warning (pytest makes warnings errors) and get gradients."""
    query, key, value = heads()
    lam = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    differential_attention(query, key, value, lam).square().sum().backward()
    assert lam.grad is not None and lam.grad != 0
    logits = torch.randn(2, 4, 6, dtype=torch.float64, requires_grad=True)
    forgetting_attention(query, key, value, torch.nn.functional.logsigmoid(logits)).square().sum().backward()
    assert logits.grad is not None and torch.isfinite(logits.grad).all() and logits.grad.abs().sum() > 0
    torch.manual_seed(0)
    for normalize in ("sink", "softpick"):
        layer = GatedAttention(16, 4, normalize=normalize)
        layer(torch.randn(2, 5, 16)).square().sum().backward()
        assert all(torch.isfinite(p.grad).all() for p in layer.parameters())
    assert layer.query_proj.weight.grad.abs().sum() > 0


def test_the_loops_give_the_same_gradients():
    query, key, value = heads(length=4)
    gradients = []
    for attend in (forgetting_attention, forgetting_attention_loop):
        logits = torch.randn(2, 4, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(3)).requires_grad_()
        attend(query, key, value, torch.nn.functional.logsigmoid(logits)).sum().backward()
        gradients.append(logits.grad)
    assert (gradients[0] - gradients[1]).abs().max() < 1e-14 and gradients[0].abs().sum() > 0


@pytest.mark.parametrize("attend_current", [False, True])
def test_stick_breaking_loop_equals_the_vectorised_form_and_the_stick_adds_up(attend_current):
    query, key, value = heads()
    output, left = stick_breaking_attention(query, key, value, attend_current)
    looped, looped_left = stick_breaking_attention_loop(query, key, value, attend_current)
    assert (output - looped).abs().max() < 1e-14 and (left - looped_left).abs().max() < 1e-14
    ones = torch.ones_like(value)
    taken, _ = stick_breaking_attention(query, key, ones, attend_current)  # values of ones read the weights' sum
    assert (taken[..., 0] + left - 1).abs().max() < 1e-14
    if not attend_current:  # the first query sees no key: it reads nothing and keeps the whole stick
        assert (output[:, :, 0] == 0).all() and (left[:, :, 0] == 1).all()


def test_stick_breaking_with_keys_that_all_score_low_reads_almost_nothing():
    query, _, value = heads(num_kv_heads=4)
    output, left = stick_breaking_attention(query, -40 * query, value, attend_current=True,
                                            scale=1.0)  # each query's own key scores -40 |q|^2
    assert left[:, :, 0].min() > 1 - 1e-12 and output[:, :, 0].abs().max() < 1e-12


def test_the_gated_layers_sink_is_lesson_14s_learned_sink():
    """normalize='sink' with gate and QK-norm off: the numbers of MultiHeadAttention(learned_sinks=True)."""
    torch.manual_seed(0)
    plain = MultiHeadAttention(16, 4, bias=True, rotary_base=10000.0, learned_sinks=True).double()
    layer = GatedAttention(16, 4, bias=True, gate=False, qk_norm=False, normalize="sink").double()
    with torch.no_grad():
        plain.sink_logits.copy_(torch.tensor([-1.0, 0.5, 2.0, 4.0]))
        layer.load_state_dict(plain.state_dict())
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    expected, expected_weights = plain(x, x, x, is_causal=True, need_weights=True)
    output, weights = layer(x, need_weights=True)
    assert (output - expected).abs().max() < 1e-14 and (weights - expected_weights).abs().max() < 1e-15
