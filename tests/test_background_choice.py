"""reorder="auto" in a live layer (issue 47): the order chooser runs on a host thread of its own, the layer runs the
original order until its pick lands and then the pick, the output bitwise the same throughout."""

from __future__ import annotations

import re
import threading

import pytest
import torch

from wavealign.attention import AttentionStep
from wavealign.integrations.attention import BlockSparseAttention, host_copy

pytest.importorskip("numba")

CPU = {"backend": "reference", "hardware": "h100", "block_size": 16, "wave_size": 4}
TOKENS = 24 * 16 - 5  # 24 blocks, the last ragged


def _qkv(heads: int = 2, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(1, heads, TOKENS, 16, generator=g) for _ in range(3))


def test_a_layer_runs_the_original_until_its_pick_lands_then_the_pick_the_waiting_call_would_have_made():
    q, k, v = _qkv()
    attend = BlockSparseAttention(method="xattention", reorder="auto", **CPU)
    first = attend(q, k, v, layer=0)
    pending = attend.calls[-1]
    assert (pending.candidate, pending.reordered, pending.choose_ms) == ("original", False, 0.0)
    assert "on its thread" in pending.reason and attend.unchosen() == 1
    attend.wait_for_choices()
    assert attend.unchosen() == 1  # landed, applied from the layer's next call
    second = attend(q, k, v, layer=0)
    applied = attend.calls[-1]
    waiting = BlockSparseAttention(method="xattention", reorder="auto", background_choice=False, **CPU)
    waited = waiting(q, k, v, layer=0)
    assert applied.candidate == waiting.calls[-1].candidate and applied.choose_ms > 0
    assert attend.unchosen() == 0
    third = attend(q, k, v, layer=0)
    assert (attend.calls[-1].candidate, attend.calls[-1].choose_ms) == (applied.candidate, 0.0)
    assert torch.equal(first, second) and torch.equal(second, third) and torch.equal(first, waited)


def test_each_layer_is_chosen_once_and_the_thread_queues_them():
    q, k, v = _qkv(seed=1)
    attend = BlockSparseAttention(method="xattention", reorder="auto", **CPU)
    for layer in (0, 1, 0, 1):  # the second round: both still pending or landed, none handed over twice
        attend(q, k, v, layer=layer)
    attend.wait_for_choices()
    for layer in (0, 1, 0, 1):
        attend(q, k, v, layer=layer)
    assert attend.unchosen() == 0
    assert sum(c.choose_ms > 0 for c in attend.calls) == 2


@pytest.fixture
def gate(monkeypatch) -> threading.Event:
    """Holds the chooser's thread until set: what the layers do while a choice is being made, without a race."""
    opened = threading.Event()
    choose = AttentionStep.choose

    def held(self, *args, **kwargs):
        assert opened.wait(timeout=60), "the test never opened the gate"
        return choose(self, *args, **kwargs)

    monkeypatch.setattr(AttentionStep, "choose", held)
    return opened


def test_a_static_method_keeps_no_plan_of_the_original_while_its_pick_is_made_then_every_layer_reuses_the_pick(gate):
    latent = (3, 4, 7)  # 84 tokens: 6 blocks of 16, the last ragged
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, 84, 16, generator=g) for _ in range(3))
    attend = BlockSparseAttention(method="radial", reorder="auto", latent=latent, **CPU)
    outs = [attend(q, k, v, layer=layer) for layer in (0, 1)]
    assert [c.plan_reused for c in attend.calls] == [False, False]  # nothing kept of the original order's plan
    assert attend.unchosen() == 1  # one mask for every layer: one choice
    gate.set()
    attend.wait_for_choices()
    outs += [attend(q, k, v, layer=layer) for layer in (1, 0)]
    applied, reused = attend.calls[-2:]
    assert not applied.plan_reused and reused.plan_reused and reused.candidate == applied.candidate
    assert attend.unchosen() == 0
    assert all(torch.equal(outs[0], out) for out in outs)


def test_a_failed_choice_raises_its_error_at_the_layer_s_next_call(monkeypatch):
    q, k, v = _qkv()
    attend = BlockSparseAttention(method="xattention", reorder="auto", **CPU)

    def broken(*args, **kwargs):
        raise RuntimeError("the simulator broke")

    monkeypatch.setattr(type(attend.step), "choose", broken)
    attend(q, k, v, layer=0)
    with pytest.raises(RuntimeError, match="the simulator broke"):
        attend.wait_for_choices()


@pytest.mark.parametrize("nb", [8, 13])
def test_the_host_copy_is_the_mask_bit_for_bit(nb):
    mask = torch.rand(3, 5, nb, generator=torch.Generator().manual_seed(nb)) < 0.4
    assert torch.equal(host_copy(mask)(), mask)


def test_background_choice_must_be_a_bool():
    with pytest.raises(ValueError, match=re.escape("background_choice must be a bool, got 'yes'")):
        BlockSparseAttention(method="xattention", reorder="auto", background_choice="yes", **CPU)


@pytest.mark.gpu
def test_on_the_gpu_the_pinned_copy_is_the_mask_and_the_pick_is_the_one_a_waiting_call_makes():
    mask = torch.rand(4, 40, 37, device="cuda") < 0.3
    assert torch.equal(host_copy(mask)(), mask.cpu())
    q, k, v = (t.cuda().to(torch.bfloat16) for t in _qkv())
    attend = BlockSparseAttention(method="xattention", reorder="auto", **CPU)
    first = attend(q, k, v, layer=0)
    attend.wait_for_choices()
    second = attend(q, k, v, layer=0)
    waiting = BlockSparseAttention(method="xattention", reorder="auto", background_choice=False, **CPU)
    waited = waiting(q, k, v, layer=0)
    assert attend.calls[-1].candidate == waiting.calls[-1].candidate and attend.calls[-1].choose_ms > 0
    assert torch.equal(first, second) and torch.equal(first, waited)
