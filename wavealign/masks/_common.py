"""Shared pieces of the mask methods: input checks, block pooling, head-by-head and chunked evaluation,
and the dense-reference measures (attention mass recall, output error) that the autotuners use."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any

import torch

from wavealign.blockmask import check_int


def check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int, *, finite: bool = True) -> None:
    """q, k, v must be floating (B, H, N, D) of one shape on one device; block_size a positive integer; with
    ``finite`` (methods that score Q/K) every value finite: a NaN or Inf would poison every score it meets,
    and the mask would come out quietly wrong."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4 or not t.is_floating_point() or t.numel() == 0:
            shape = f"{t.dtype} {tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{name} must be a non-empty floating tensor (B, H, N, D), got {shape}")
    if not q.shape == k.shape == v.shape:
        raise ValueError(f"q, k, v must have one shape (B, H, N, D), got {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    if not q.device == k.device == v.device:
        raise ValueError(f"q, k, v must be on one device, got q on {q.device}, k on {k.device}, v on {v.device}")
    if q.device.type == "meta":  # shapes without values: a mask scores Q and K, so there is nothing to build it from
        raise ValueError(f"q, k, v must hold values, got tensors on the meta device (shape {tuple(q.shape)}); "
                         "expected them on cpu or cuda (a model loaded on meta has its weights loaded first)")
    check_int("block_size", block_size, lo=1)
    if finite:
        for name, t in (("q", q), ("k", k), ("v", v)):
            if not all_finite(t):
                raise ValueError(f"{name} must hold only finite values, got NaN or Inf in {name} of shape "
                                 f"{tuple(t.shape)}")


def all_finite(x: torch.Tensor) -> bool:
    """Whether ``x`` holds no NaN or Inf: its minimum and maximum are finite (a NaN propagates into both), found in
    one read with no bool copy of a 364K-token tensor, and one wait for the device."""
    return bool(torch.isfinite(torch.stack(torch.aminmax(x))).all())


def check_number(name: str, value: Any, lo: float, hi: float, *, lo_open: bool = False,
                 hi_open: bool = False) -> float:
    """A real number (not a bool, not a string) in [lo, hi]; ``lo_open`` / ``hi_open`` leave out an end."""
    interval = f"{'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number in {interval}, got {value!r} ({type(value).__name__})")
    above = lo < value if lo_open else lo <= value
    below = value < hi if hi_open else value <= hi
    if not (above and below):  # NaN fails both
        raise ValueError(f"{name} must be a number in {interval}, got {value!r}")
    return float(value)


def check_fraction(name: str, value: Any) -> float:
    """A threshold or coverage must be a number in (0, 1]."""
    return check_number(name, value, 0.0, 1.0, lo_open=True)


def check_flag(name: str, value: Any) -> bool:
    """A switch must be a bool: a string such as "false" would be truthy."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be a bool (True or False), got {value!r} ({type(value).__name__})")
    return value


def optional(check: Callable[[str, Any], Any]) -> Callable[[str, Any], Any]:
    """``check`` for a param whose None means "none" (e.g. no budget): None passes as it is."""
    def check_or_none(name: str, value: Any) -> Any:
        return None if value is None else check(name, value)

    return check_or_none


def one_of(choices: tuple[str, ...]) -> Callable[[str, Any], str]:
    """A check that the value is one of ``choices``."""
    def check_choice(name: str, value: Any) -> str:
        if value not in choices:
            raise ValueError(f"{name} must be one of {choices}, got {value!r}")
        return value

    return check_choice


# a latent video's bounds, checked before any work: each side at most 16,384 tokens (Wan2.1-14B 720p is 21 x 45 x 80;
# Radial's mask is O((MB + T)^2), so T = 1e7 ran for minutes) and 2^22 tokens in all (11x the paper's 364K: a
# 1 GB block mask at 128-token blocks)
MAX_LATENT_SIDE, MAX_LATENT_TOKENS = 2 ** 14, 2 ** 22


def check_latent(name: str, value: Any) -> tuple[int, int, int] | None:
    """A latent video shape: None (a bare shape: none known) or (T, H, W), three positive integers, in tokens, each
    at most ``MAX_LATENT_SIDE`` and ``MAX_LATENT_TOKENS`` in all."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != 3:
        raise ValueError(f"{name} must be None or (T, H, W), three positive integers (the latent video's frames, "
                         f"height and width in tokens), got {value!r}")
    latent = tuple(check_int(f"{name}[{i}]", size, lo=1, hi=MAX_LATENT_SIDE) for i, size in enumerate(value))
    if latent[0] * latent[1] * latent[2] > MAX_LATENT_TOKENS:
        raise ValueError(f"{name} must cover at most {MAX_LATENT_TOKENS:,} tokens (T * H * W), got {latent} "
                         f"({latent[0] * latent[1] * latent[2]:,})")
    return latent  # type: ignore[return-value]


def require_latent(method: str, latent: tuple[int, int, int] | None,
                   tokens: int | None = None) -> tuple[int, int, int]:
    """``latent`` (T, H, W) of a method that reads token positions, which must cover the ``tokens`` it is built
    on where they are known; None is the one error of a workload without a latent shape. (``latent`` is filled from
    the workload, as the identity params are, so it is checked here rather than among a sweep's params.)"""
    latent = check_latent("latent", latent)
    if latent is None:
        counted = "" if tokens is None else f" (T * H * W = {tokens})"
        raise ValueError(f"method {method!r} needs latent=(T, H, W), the latent video's frames, height and width in "
                         f"tokens{counted}; this workload has none (a bare shape): pass latent=, or run it on a "
                         "model preset or a captured file")
    t, h, w = latent
    if tokens is not None and t * h * w != tokens:
        raise ValueError(f"latent must cover the {tokens} tokens of q (T * H * W = {tokens}), got latent={latent} "
                         f"({t * h * w} tokens)")
    return latent


def num_blocks(n: int, block_size: int) -> int:
    return math.ceil(n / block_size)


def logits_f32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a (..., R, D) @ b (..., C, D)^T in float32 (2-D, or 3-D batched). On a GPU, bf16/fp16 operands go through the
    tensor cores with float32 products and sums (as the methods' upstream kernels do) rather than being copied to
    float32 first."""
    if a.is_cuda and a.dtype in (torch.bfloat16, torch.float16) and b.dtype == a.dtype:
        product = torch.mm if a.dim() == 2 else torch.bmm
        return product(a, b.transpose(-1, -2), out_dtype=torch.float32)
    return a.float() @ b.float().transpose(-1, -2)


def diagonal_mass(probs: torch.Tensor, n: int) -> torch.Tensor:
    """Per distance d, the mass of ``probs`` (the last rows' attention, (rows, n)) on the keys d tokens before
    or after each row's query, summed over rows: (n,). Gathered per side and summed in a fixed order, so the
    mask is the same on every run (a scatter-add on a GPU sums in whatever order its atomics land)."""
    rows = torch.arange(n - probs.shape[0], n, device=probs.device).unsqueeze(1)
    d = torch.arange(n, device=probs.device).unsqueeze(0)
    after, before = rows + d, rows - d
    mass_after = probs.gather(1, after.clamp(max=n - 1)) * (after < n)
    mass_before = probs.gather(1, before.clamp(min=0)) * ((before >= 0) & (d > 0))  # d = 0 counted once
    return (mass_after + mass_before).sum(0)


def per_head(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int,
             head_mask: Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """Stack ``head_mask(head_index, q_h, k_h, v_h)`` (each (N, D) -> (MB, NB)) into (B, H, MB, NB)."""
    b, h, n, _ = q.shape
    nb = num_blocks(n, block_size)
    out = torch.zeros(b, h, nb, nb, dtype=torch.bool, device=q.device)
    for bi in range(b):
        for hi in range(h):
            out[bi, hi] = head_mask(hi, q[bi, hi], k[bi, hi], v[bi, hi])
    return out


def rows_per_chunk(cols: int, device: torch.device, multiple: int = 1) -> int:
    """How many score rows of ``cols`` fp32 columns to hold at once: ~1 GiB on a GPU, ~64 MiB on a CPU."""
    budget = 2**28 if device.type == "cuda" else 2**24
    rows = max(budget // max(cols, 1), 1)
    return max(rows // multiple, 1) * multiple


def pool_blocks(x: torch.Tensor, block_size: int) -> torch.Tensor:
    """Mean over each block of ``block_size`` rows of x (N, D) -> (ceil(N/bs), D); the ragged last block
    averages only its real rows."""
    n, d = x.shape
    nb = num_blocks(n, block_size)
    pad = nb * block_size - n
    xf = torch.nn.functional.pad(x.float(), (0, 0, 0, pad)).view(nb, block_size, d).sum(1)
    counts = torch.full((nb, 1), float(block_size), device=x.device)
    counts[-1] = block_size - pad
    return xf / counts


def block_mass(q_rows: torch.Tensor, k: torch.Tensor, block_size: int) -> torch.Tensor:
    """Dense softmax(q_rows k^T / sqrt(D)) summed over kv blocks: (n_rows, NB) fp32, each row sums to 1."""
    n, d = k.shape
    nb = num_blocks(n, block_size)
    out = torch.empty(q_rows.shape[0], nb, device=k.device)
    step = rows_per_chunk(n, k.device)
    kf = k.float()
    for s in range(0, q_rows.shape[0], step):
        p = torch.softmax((q_rows[s:s + step].float() @ kf.T) / math.sqrt(d), dim=-1)
        out[s:s + step] = torch.nn.functional.pad(p, (0, nb * block_size - n)).view(-1, nb, block_size).sum(-1)
    return out


def sample_query_blocks(num_q_blocks: int, count: int) -> torch.Tensor:
    """``count`` query-block indices spread evenly over the sequence (all of them if there are fewer)."""
    if count >= num_q_blocks:
        return torch.arange(num_q_blocks)
    return torch.linspace(0, num_q_blocks - 1, count).round().long().unique()


def block_rows(x: torch.Tensor, blocks: torch.Tensor, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The token rows of x (N, D) in query ``blocks``, and for each row its block's position in ``blocks``."""
    n = x.shape[0]
    idx = (blocks.to(x.device).unsqueeze(1) * block_size + torch.arange(block_size, device=x.device)).flatten()
    owner = torch.arange(len(blocks), device=x.device).repeat_interleave(block_size)
    keep = idx < n
    return x[idx[keep]], owner[keep]


class BlockPartials:
    """Per (row, kv block) softmax partial sums of q_rows (n, D) against k, v (N, D), so the attention output
    under any block mask is a cheap weighted sum: out = sum_b m_b num_b / sum_b m_b den_b. Exponents are taken
    against each row's dense maximum, so rows whose kept blocks all underflow come out as zeros."""

    def __init__(self, q_rows: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int) -> None:
        n, d = k.shape
        nb = num_blocks(n, block_size)
        pad = nb * block_size - n
        self.num = torch.empty(q_rows.shape[0], nb, v.shape[1], device=k.device)
        self.den = torch.empty(q_rows.shape[0], nb, device=k.device)
        vb = torch.nn.functional.pad(v.float(), (0, 0, 0, pad)).view(nb, block_size, -1)
        step = rows_per_chunk(n, k.device)
        kf = k.float()
        for s in range(0, q_rows.shape[0], step):
            scores = (q_rows[s:s + step].float() @ kf.T) / math.sqrt(d)
            e = torch.exp(scores - scores.amax(-1, keepdim=True))
            e = torch.nn.functional.pad(e, (0, pad)).view(-1, nb, block_size)
            self.den[s:s + step] = e.sum(-1)
            self.num[s:s + step] = torch.einsum("rbt,btd->rbd", e, vb)

    def output(self, row_mask: torch.Tensor) -> torch.Tensor:
        """Attention output (..., n, Dv) keeping, per row, the kv blocks where ``row_mask`` (..., n, NB) is True;
        leading dimensions are masks evaluated together, in one pass over the partials."""
        m = row_mask.to(self.den.dtype)
        den = (m * self.den).sum(-1, keepdim=True)
        return torch.einsum("...rb,rbd->...rd", m, self.num) / den.clamp_min(1e-30) * (den > 0)
