"""Aggregation as one stacked reduction (issue 27 item 2): :func:`bnfl.fl.weighted_sum` equals,
bit for bit, the client-after-client sum it computed before, and the channel hands out views."""

from __future__ import annotations

import torch

from bnfl.fl import Channel, weighted_sum


def _client_after_client(states, weights):
    """The previous weighted_sum: acc <- acc + w_i * s_i, one _foreach op per client; integers in float64."""
    keys = list(states[0])
    floats = [k for k in keys if states[0][k].is_floating_point()]
    out = {}
    acc = [torch.zeros_like(states[0][k]) for k in floats]
    for s, w in zip(states, weights, strict=True):
        torch._foreach_add_(acc, torch._foreach_mul([s[k] for k in floats], float(w)))
    out.update(zip(floats, acc, strict=True))
    for k in keys:
        if k not in out:
            acc64 = sum(float(w) * s[k].double() for s, w in zip(states, weights, strict=True))
            out[k] = torch.as_tensor(acc64).round().to(states[0][k].dtype)
    return {k: out[k] for k in keys}


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int64 if t.dtype == torch.float64 else torch.int32) if t.is_floating_point() else t


def test_weighted_sum_is_bitwise_the_client_after_client_sum():
    g = torch.Generator().manual_seed(0)
    for trial in range(40):
        k = int(torch.randint(1, 120, (), generator=g))
        dtype = (torch.float32, torch.float64)[trial % 2]
        states = [{"w": torch.randn(7, 5, generator=g, dtype=dtype) * 10 ** float(torch.randn((), generator=g)),
                   "b": torch.randn(5, generator=g, dtype=dtype), "s": torch.randn((), generator=g, dtype=dtype),
                   "n": torch.randint(0, 1000, (), generator=g)} for _ in range(k)]
        raw = torch.rand(k, generator=g, dtype=torch.float64)
        weights = (raw / raw.sum()).tolist()  # Python floats, as the engine passes them
        got, ref = weighted_sum(states, weights), _client_after_client(states, weights)
        assert list(got) == list(ref)
        for key in ref:
            assert got[key].dtype == ref[key].dtype and got[key].shape == ref[key].shape
            assert torch.equal(_bits(got[key]), _bits(ref[key])), (trial, key)


def test_weighted_sum_errors_name_the_problem():
    import pytest

    with pytest.raises(ValueError, match="at least one"):
        weighted_sum([], [])
    with pytest.raises(ValueError, match="2 states but 1 weights"):
        weighted_sum([{"a": torch.ones(1)}] * 2, [1.0])
    with pytest.raises(ValueError, match="client state 1 has different keys"):
        weighted_sum([{"a": torch.ones(1)}, {"b": torch.ones(1)}], [0.5, 0.5])


def test_broadcast_and_gather_hand_out_views_and_count_bytes():
    ch = Channel()
    state = {"w": torch.ones(3, requires_grad=True), "n": torch.tensor(2)}
    got = ch.broadcast(state, 4)
    assert len(got) == 4 and all(g is not got[0] for g in got[1:])  # a dict per client
    assert all(g["w"].data_ptr() == state["w"].data_ptr() and not g["w"].requires_grad for g in got)
    ups = ch.gather([{"w": torch.full((3,), float(i))} for i in range(4)])
    assert [u["w"][0].item() for u in ups] == [0.0, 1.0, 2.0, 3.0]
    assert ch.bytes_down == 3 * 4 + 8 and ch.bytes_up == 4 * 3 * 4 and ch.rounds == 1
