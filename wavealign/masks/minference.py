"""MInference (Jiang et al., 2024): per-head vertical-slash, A-shape or block-sparse patterns, searched
per head against dense attention.

- *vertical_slash*: softmax(q_last k^T / sqrt(d)) of the last ``last_q`` query tokens estimates which key
  columns (verticals) and which diagonals (slashes) hold attention; the top ``vertical_size`` columns and
  top ``slash_size`` diagonals are kept, the first ``n_init`` tokens and the nearest ``n_local`` diagonals
  always. A kv block is on for a query block if it holds a chosen column or a chosen diagonal crosses it.
- *a_shape*: the first ``n_init`` tokens (sink) plus a local band of ``n_local`` tokens.
- *block_sparse*: the ``top_k`` kv blocks per query block by mean-pooled q . k.

Bidirectional port: the last query rows see every key, so the estimate uses no causal mask; a diagonal is
scored by its distance |i - j| from the main diagonal (the last rows only see keys behind them), and each
chosen distance is kept on both sides of the diagonal; the A-shape band is symmetric too.

The paper runs MInference with a pre-searched config. ``search_head`` is MInference's offline search
(``search_pattern``): each candidate of ``CANDIDATES`` (upstream's list: a stream-LLM A-shape, four
vertical-slash sizes, block-sparse keeping 1/8 of the kv blocks) is scored by the dense attention mass it
recalls on sampled query blocks and the best recall wins; as upstream, an A-shape winner then runs as
vertical-slash with the same sizes and a block-sparse winner as vertical-slash (1000, 6096). A density
``budget`` (a FLOPs cap, off by default) restricts the choice to candidates that fit it.
With ``search`` (the default) ``build`` searches every head it has no config for, so any caller (a sweep
cell, ``lab/mask_fidelity.py``) gets the searched mask; ``search=False`` applies the fixed pattern params. Results
can be cached per (model, layer, head) in a JSON file (``tuned_config``), read first and extended, or kept in a
``masks.TunedConfigs`` store across builds (what the integrations do: a live layer searches once, then predicts).
``docs/methods.md`` compares every step with upstream.

The last rows' column and diagonal scores are computed once per head and shared by every candidate of the search.
On a GPU they are computed for all heads at once (the tensor cores for the last rows' logits, a Triton kernel for
the per-diagonal sums: ``masks._kernels``); the per-head torch code here is their reference and the CPU path.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import torch

from wavealign import masks
from wavealign.blockmask import check_int
from wavealign.masks import _kernels, _tuned
from wavealign.masks._common import (
    block_mass,
    block_rows,
    check_flag,
    check_fraction,
    check_number,
    check_qkv,
    diagonal_mass,
    logits_f32,
    num_blocks,
    one_of,
    optional,
    pool_blocks,
    sample_query_blocks,
)

PATTERNS = ("vertical_slash", "a_shape", "block_sparse")
CHECKS: dict[str, Any] = {
    "pattern": one_of(PATTERNS), "last_q": partial(check_int, lo=1), "search": check_flag,
    **dict.fromkeys(("vertical_size", "slash_size", "n_init", "n_local", "a_shape_init", "a_shape_local", "top_k"),
                    partial(check_int, lo=0)),
    "budget": optional(check_fraction),  # a density cap: None or in (0, 1]
    "recall_target": partial(check_number, lo=0.0, hi=1.0), "sample_blocks": partial(check_int, lo=1)}
PARAMS: dict[str, Any] = {"pattern": "vertical_slash", "vertical_size": 1000, "slash_size": 6096, "last_q": 64,
                          "n_init": 30, "n_local": 100, "a_shape_init": 128, "a_shape_local": 3968, "top_k": 100,
                          "search": True, "budget": None, "recall_target": 0.95, "sample_blocks": 8,
                          "tuned_config": None, "model": "", "layer": 0, "heads": None}
# the search space and what each winner runs as (upstream minference_forward.search_pattern); the block-sparse
# candidate keeps 1/8 of the kv blocks of each row ("top_k": None is resolved to NB // 8)
CANDIDATES: tuple[tuple[dict[str, Any], dict[str, Any]], ...] = (
    ({"pattern": "a_shape", "a_shape_init": 100, "a_shape_local": 800},
     {"pattern": "vertical_slash", "vertical_size": 100, "slash_size": 800}),
    *(({"pattern": "vertical_slash", "vertical_size": v, "slash_size": s},) * 2
      for v, s in ((30, 800), (100, 750), (500, 700), (3500, 100))),
    ({"pattern": "block_sparse", "top_k": None}, {"pattern": "vertical_slash", "vertical_size": 1000,
                                                  "slash_size": 6096}),
)


def _diagonal_mask(signed_offsets: torch.Tensor, n: int, block_size: int) -> torch.Tensor:
    """(..., MB, NB) blocks crossed by any diagonal i - j = o for o in ``signed_offsets`` (bool (..., 2n - 1), at
    o + n - 1)."""
    nb = num_blocks(n, block_size)
    device = signed_offsets.device
    # block (r, c) holds offsets i - j in [(r - c) bs - (bs - 1), (r - c) bs + (bs - 1)]
    prefix = torch.nn.functional.pad(torch.cumsum(signed_offsets.long(), -1), (1, 0))
    delta = torch.arange(-(nb - 1), nb, device=device)
    lo = (delta * block_size - (block_size - 1) + n - 1).clamp(0, 2 * n - 1)
    hi = (delta * block_size + block_size + n - 1).clamp(0, 2 * n - 1)
    hit = (prefix[..., hi] - prefix[..., lo]) > 0
    r = torch.arange(nb, device=device)
    return hit[..., (r.unsqueeze(1) - r.unsqueeze(0)) + nb - 1]


def _column_mask(columns: torch.Tensor, n: int, block_size: int) -> torch.Tensor:
    """(..., MB, NB): every kv block holding one of the token ``columns`` (..., K), for every query block."""
    nb = num_blocks(n, block_size)
    on = torch.zeros(*columns.shape[:-1], nb, dtype=torch.bool, device=columns.device)
    on.scatter_(-1, columns // block_size, True)
    return on.unsqueeze(-2).expand(*on.shape[:-1], nb, nb)


def _mirrored(distances: torch.Tensor, n: int) -> torch.Tensor:
    """The signed offsets (..., 2n - 1) of ``distances`` (..., K) on both sides of the diagonal."""
    offsets = torch.zeros(*distances.shape[:-1], 2 * n - 1, dtype=torch.bool, device=distances.device)
    offsets.scatter_(-1, n - 1 + distances, True)
    return offsets.scatter_(-1, n - 1 - distances, True)


def last_rows_scores(q: torch.Tensor, k: torch.Tensor, last_q: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The estimate vertical-slash selects from, for one head (q, k each (N, D)): softmax(q_last k^T / sqrt(d)) of
    the last ``last_q`` query tokens summed per key (verticals) and per diagonal distance |i - j| (slashes), (N,)
    each, float32."""
    n, d = k.shape
    probs = torch.softmax(logits_f32(q[-last_q:], k) / math.sqrt(d), dim=-1)
    return probs.sum(0), diagonal_mass(probs, n)


def _vertical_slash_from_scores(vertical: torch.Tensor, slash: torch.Tensor, block_size: int, vertical_size: int,
                                slash_size: int, n_init: int, n_local: int) -> torch.Tensor:
    """Vertical-slash block masks (..., MB, NB) from heads' ``last_rows_scores`` (..., N): the top columns and
    diagonals, the first ``n_init`` tokens and the nearest ``n_local`` diagonals always."""
    n = vertical.shape[-1]
    vertical, slash = vertical.clone(), slash.clone()
    vertical[..., :n_init] = float("inf")
    columns = torch.topk(vertical, min(vertical_size, n), dim=-1).indices
    slash[..., :n_local] = float("inf")
    distances = torch.topk(slash, min(slash_size, n), dim=-1).indices
    return _column_mask(columns, n, block_size) | _diagonal_mask(_mirrored(distances, n), n, block_size)


def vertical_slash(q: torch.Tensor, k: torch.Tensor, block_size: int, vertical_size: int, slash_size: int,
                   last_q: int, n_init: int, n_local: int,
                   scores: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """Vertical-slash block mask (MB, NB) of one head (q, k each (N, D)), from ``scores`` (``last_rows_scores``)
    when given."""
    vertical, slash = last_rows_scores(q, k, last_q) if scores is None else scores
    return _vertical_slash_from_scores(vertical, slash, block_size, vertical_size, slash_size, n_init, n_local)


def a_shape(n: int, block_size: int, init: int, local: int, device: torch.device) -> torch.Tensor:
    """Sink columns (first ``init`` tokens) plus a symmetric band of ``local`` tokens, (MB, NB)."""
    sink = _column_mask(torch.arange(min(init, n), device=device), n, block_size)
    band = _mirrored(torch.arange(min(local, n), device=device), n)
    return sink | _diagonal_mask(band, n, block_size)


def block_sparse(q: torch.Tensor, k: torch.Tensor, block_size: int, top_k: int) -> torch.Tensor:
    """The ``top_k`` kv blocks of each query block by pooled q . k, (MB, NB); nothing is forced, as upstream."""
    scores = pool_blocks(q, block_size) @ pool_blocks(k, block_size).T
    nb = scores.shape[0]
    top = torch.topk(scores, min(max(top_k, 1), nb), dim=-1).indices
    return torch.zeros(nb, nb, dtype=torch.bool, device=q.device).scatter_(-1, top, True)


def head_mask(q: torch.Tensor, k: torch.Tensor, block_size: int, cfg: dict[str, Any],
              scores: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """The block mask (MB, NB) of one head under a full config (``PARAMS`` keys); a vertical-slash pattern takes
    its ``last_rows_scores`` from ``scores`` when given (at the config's ``last_q``)."""
    pattern = cfg["pattern"]
    if pattern == "vertical_slash":
        return vertical_slash(q, k, block_size, cfg["vertical_size"], cfg["slash_size"], cfg["last_q"],
                              cfg["n_init"], cfg["n_local"], scores)
    if pattern == "a_shape":
        return a_shape(k.shape[0], block_size, cfg["a_shape_init"], cfg["a_shape_local"], k.device)
    if pattern == "block_sparse":
        return block_sparse(q, k, block_size, cfg["top_k"])
    raise ValueError(f"pattern must be one of {PATTERNS}, got {pattern!r}")


def build(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int = 128, **params: Any) -> torch.Tensor:
    """MInference block mask (B, H, MB, NB): each head with its searched config (from ``tuned_config``, a file or a
    ``masks.TunedConfigs`` store, else searched now when ``search``), else the fixed pattern params; the last rows'
    scores of every head computed at once on a GPU (``reference``: head by head).

    ``heads`` names the model heads that q's H heads are (default 0..H-1), to key searched configs.
    """
    check_qkv(q, k, v, block_size)
    b, h, n, d = q.shape
    scores = _kernels.last_rows_mass(q.reshape(b * h, n, d), k.reshape(b * h, n, d), params["last_q"]) \
        if _kernels.enabled(q) else None
    return _build(q, k, block_size, params, scores)


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int = 128,
              **params: Any) -> torch.Tensor:
    """``build`` by this module's torch code, head by head, on any device."""
    check_qkv(q, k, v, block_size)
    return _build(q, k, block_size, params, None)


def _build(q: torch.Tensor, k: torch.Tensor, block_size: int, params: dict[str, Any],
           scores: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
    """Each head's mask, its last rows' scores (at ``params["last_q"]``) taken from ``scores`` (B*H, N) when given:
    then the heads of one vertical-slash config are selected together."""
    budget, heads = params["budget"], q.shape[1]
    configs = _tuned.HeadConfigs("minference", params["tuned_config"], params["model"], params["layer"],
                                 params["heads"], heads)
    chosen = []
    for i in range(q.shape[0] * heads):
        qh, kh = q[i // heads, i % heads], k[i // heads, i % heads]
        own = None if scores is None else (scores[0][i], scores[1][i])
        searched = own if params["last_q"] == PARAMS["last_q"] else None  # the search scores at upstream's last_q
        search = (lambda qh=qh, kh=kh, searched=searched: search_head(
            qh, kh, block_size, budget=budget, recall_target=params["recall_target"],
            sample_blocks=params["sample_blocks"], scores=searched)) if params["search"] else None
        chosen.append({**params, **(configs.get(i % heads, search) or {})})
    out = torch.empty(q.shape[0] * heads, num_blocks(q.shape[2], block_size), num_blocks(k.shape[2], block_size),
                      dtype=torch.bool, device=q.device)
    batched: dict[tuple, list[int]] = {}
    for i, cfg in enumerate(chosen):
        if scores is not None and cfg["pattern"] == "vertical_slash" and cfg["last_q"] == params["last_q"]:
            batched.setdefault(tuple(cfg[key] for key in VERTICAL_SLASH_KEYS), []).append(i)
        else:
            out[i] = head_mask(q[i // heads, i % heads], k[i // heads, i % heads], block_size, cfg)
    for sizes, group in batched.items():
        out[group] = _vertical_slash_from_scores(scores[0][group], scores[1][group], block_size, *sizes)
    return out.view(*q.shape[:2], *out.shape[-2:])


# what selects a vertical-slash mask from a head's last-rows scores, in _vertical_slash_from_scores' order
VERTICAL_SLASH_KEYS = ("vertical_size", "slash_size", "n_init", "n_local")


def _check_search(budget: float | None, recall_target: float, sample_blocks: int) -> None:
    """The search's params, for ``search`` run on its own (``build`` has them through the registry)."""
    for name, value in (("budget", budget), ("recall_target", recall_target), ("sample_blocks", sample_blocks)):
        CHECKS[name](name, value)


def search_head(q: torch.Tensor, k: torch.Tensor, block_size: int = 128, *, budget: float | None = None,
                recall_target: float = 0.95, sample_blocks: int = 8,
                scores: tuple[torch.Tensor, torch.Tensor] | None = None) -> dict[str, Any]:
    """One head's config by MInference's search: the candidate of ``CANDIDATES`` recalling the most dense
    attention mass on sampled query blocks, as the pattern it runs as, with its recall and that mask's density.

    With a ``budget`` (a density, i.e. a FLOPs cap) only candidates whose run mask fits it compete (the
    sparsest if none does). ``recall_target`` is reported against (``meets_target``), not searched for. The
    vertical-slash candidates share one ``last_rows_scores`` at ``PARAMS["last_q"]`` (``scores``, computed here
    when not given).
    """
    nb = num_blocks(k.shape[0], block_size)
    blocks = sample_query_blocks(nb, sample_blocks).to(q.device)
    q_rows, owner = block_rows(q, blocks, block_size)
    mass = block_mass(q_rows, k, block_size)
    scores = last_rows_scores(q, k, PARAMS["last_q"]) if scores is None else scores
    results = []
    for scored, runs_as in CANDIDATES:
        scored = {**scored, "top_k": max(nb // 8, 1)} if scored.get("top_k", 0) is None else scored
        scored_mask = head_mask(q, k, block_size, {**PARAMS, **scored}, scores)
        run_mask = scored_mask if scored == runs_as else head_mask(q, k, block_size, {**PARAMS, **runs_as},
                                                                   scores)
        recall = float((mass * scored_mask[blocks][owner]).sum(-1).mean())
        density = float(run_mask.float().mean())
        results.append({**runs_as, "scored_as": scored["pattern"], "recall": recall, "density": density})
    if budget is not None:
        results = [r for r in results if r["density"] <= budget] or [min(results, key=lambda r: r["density"])]
    best = max(results, key=lambda r: (r["recall"], -r["density"]))
    return {**best, "meets_target": best["recall"] >= recall_target}


def search(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int = 128, *, model: str, layer: int,
           heads: list[int] | None = None, cache: str | None = None, budget: float | None = None,
           recall_target: float = 0.95, sample_blocks: int = 8) -> dict[str, dict[str, Any]]:
    """Search every head of q (1, H, N, D); return {"model/layer/head": config} and merge it into ``cache``."""
    check_qkv(q, k, v, block_size)
    _check_search(budget, recall_target, sample_blocks)
    return _tuned.tune_heads("minference", q, lambda i: search_head(
        q[0, i], k[0, i], block_size, budget=budget, recall_target=recall_target, sample_blocks=sample_blocks),
        model=model, layer=layer, heads=heads, cache=cache)


masks.register("minference", build, PARAMS, "vertical-slash / A-shape / block-sparse, searched per head (MInference)",
               checks=CHECKS, reference=reference, types={"budget": float | None, "tuned_config": str | None})

if __name__ == "__main__":
    from wavealign.masks._draw import main

    raise SystemExit(main("minference"))
