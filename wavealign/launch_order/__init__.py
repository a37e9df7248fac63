"""WaveAlign's row reordering: plan a per-head launch order of query blocks, apply it, undo it.

A plan is a spatial step (a ``wavealign.reorderers`` entry: WaveAlign's Stage 1, paper Alg. 1, in
``reorderers/wavealign``, or a Table II baseline), then Stage 2 (Alg. 2, ``launch_order.stage2``), which sorts each
wave-sized bucket by descending NNZ, so a wave's short rows hand over to the next wave's long ones. Only the order
changes: every backend computes the same blocks. Beside it: ``plan_graphs`` (a CUDA plan as one graph replay),
``block_gather`` (whole query blocks moved into launch order and back, for backends that reorder from outside their
kernel), and the order chooser (``choose``, ``rank``: ``launch_order.chooser`` over ``launch_order.candidates``).
"""

from __future__ import annotations

from typing import Any

import torch

from wavealign import nvrtc, reorderers
from wavealign.blockmask import MaskLike, as_dense, check_int, check_seed, kv_pair, row_nnz
from wavealign.launch_order import block_gather, plan_graphs
from wavealign.launch_order.candidates import candidate_name
from wavealign.launch_order.row_order import RowOrder as RowOrder
from wavealign.launch_order.row_order import check_launch_order as check_launch_order
from wavealign.launch_order.stage2 import temporal_order
from wavealign.records import MAX_WAVE_SIZE as MAX_WAVE_SIZE
from wavealign.records import SPATIAL_STAGES, TEMPORAL_STAGES
from wavealign.records import STAGES as STAGES


def plan(mask: MaskLike, wave_size: int = 132, stages: str = "both", seed: int = 0, reorderer: str = "wavealign",
         **params: Any) -> RowOrder:
    """Compute the launch order of ``mask`` (bool (H, MB, NB), (B, H, MB, NB), or kv indices).

    ``stages`` picks the paper's ablation variant: "none" (Original), "spatial" (O+S1), "temporal" (O+S2) or
    "both" (O+S1+S2). ``reorderer`` names the spatial step (``wavealign.reorderers``: WaveAlign's Stage 1 or a
    Table II baseline such as "minhash"), ``params`` its parameters (Stage 1's ``iters`` and ``rayleigh_ritz``);
    Stage 2 is the same for all. The result is deterministic for a given seed and device. On a GPU, a plan whose
    steps all run there (Stage 2 alone, or a reorderer with ``cuda_graph``) is one replay of a CUDA graph per mask
    shape and options (``wavealign.launch_order.plan_graphs``).
    """
    if stages not in STAGES:
        raise ValueError(f"stages must be one of {STAGES}, got {stages!r}")
    wave_size = check_int("wave_size", wave_size, lo=1, hi=MAX_WAVE_SIZE)
    seed = check_seed("seed", seed)
    grouping = reorderers.get(reorderer)
    params = grouping.resolve(params)
    dense = as_dense(mask)
    lead = dense.shape[:-2] if not (dense.dim() == 4 and dense.shape[0] == 1) else dense.shape[1:-2]
    mb, nb = dense.shape[-2:]
    rows = dense.reshape(-1, mb, nb)

    def order_of(rows: torch.Tensor) -> torch.Tensor:
        order = torch.arange(mb, device=rows.device).expand(rows.shape[0], mb)
        if stages in SPATIAL_STAGES and rows.shape[0]:
            order = grouping.group(rows, wave_size=wave_size, seed=seed, **params).to(rows.device)
        if stages in TEMPORAL_STAGES:
            order = temporal_order(row_nnz(rows), order, wave_size)  # the row lengths Stage 2 sorts by
        return order

    if (stages != "none" and rows.numel() and nvrtc.usable(rows) and not torch.cuda.is_current_stream_capturing()
            and (grouping.cuda_graph or stages == "temporal")):
        order = plan_graphs.replay(rows, (wave_size, stages, seed, reorderer, tuple(sorted(params.items()))), order_of)
    else:
        order = order_of(rows)
    return RowOrder._of(order.reshape(*lead, mb), wave_size=wave_size, stages=stages, reorderer=reorderer,
                        candidate=candidate_name(stages, reorderer, params))


def _launch_order(order: Any) -> RowOrder:
    """``order`` as ``check_launch_order`` takes it, over whatever (H, MB) it covers."""
    if not isinstance(order, RowOrder):
        raise ValueError(f"order must be a launch_order.RowOrder, got {type(order).__name__}")
    return check_launch_order(order, *order.perm.shape[-2:])


def permute_rows(q: torch.Tensor, order: RowOrder, block_size: int = 128) -> torch.Tensor:
    """The query blocks of ``q`` (B, H, N, D) in launch order, as whole blocks: (B, H, MB * block_size, D).

    A ragged last block is zero-padded where it lands, so no block after it shifts: a kernel that cuts Q into
    fixed ``block_size`` rows then computes every block on its own rows, whatever N is. The padded rows' outputs
    are dropped by ``restore_rows``. (The same copy as ``block_gather.gather_blocks``, which the backends use.)
    """
    return block_gather.gather_blocks(q, _launch_order(order), block_size)


def restore_rows(out: torch.Tensor, order: RowOrder, block_size: int = 128, seq_len: int | None = None
                 ) -> torch.Tensor:
    """Undo ``permute_rows`` on an output (B, H, MB * block_size, D) computed in launch order: the output in the
    original order, (B, H, seq_len, D). ``seq_len`` is q's N; None means MB * block_size (N a multiple of it)."""
    order = _launch_order(order)
    rows = check_int("block_size", block_size, lo=1) * order.num_q_blocks
    return block_gather.scatter_blocks(out, order, block_size, rows if seq_len is None else seq_len)


def permute_mask(mask: MaskLike, order: RowOrder) -> MaskLike:
    """Reorder a mask's rows into launch order, in the form it came in: a bool (H, MB, NB) or (B, H, MB, NB)
    mask, or the kv-index form (whose lists are gathered as they are, without a round trip through dense)."""
    if isinstance(mask, tuple):
        kv_num, kv_idx = kv_pair(mask)
        _check_mask_rows(tuple(kv_num.shape), order)
        perm = _perm_like(order, kv_num)
        return (torch.gather(kv_num, -1, perm), torch.gather(kv_idx, -2, perm.unsqueeze(-1).expand_as(kv_idx)))
    mask = as_dense(mask)
    _check_mask_rows(tuple(mask.shape[:-1]), order)
    return torch.gather(mask, -2, _perm_like(order, mask[..., 0]).unsqueeze(-1).expand_as(mask))


def _check_mask_rows(rows: tuple[int, ...], order: RowOrder) -> None:
    """``rows`` is a mask's (H, MB) or (B, H, MB): it must be the rows ``order`` was planned for."""
    if rows[-1] != order.num_q_blocks or rows[-2] != order.perm.shape[-2]:
        raise ValueError(f"mask has (H, MB)={rows[-2:]}, but the order has {tuple(order.perm.shape[-2:])}")
    if order.perm.dim() == 3 and (len(rows) != 3 or rows[0] != order.perm.shape[0]):
        raise ValueError(f"order is batched with B={order.perm.shape[0]}, but mask has rows {rows}")


def _perm_like(order: RowOrder, rows: torch.Tensor) -> torch.Tensor:
    """``order.perm`` on ``rows``' device, broadcast over its batch dimension."""
    perm = order.perm.to(rows.device)
    return perm.expand(*rows.shape) if perm.dim() < rows.dim() else perm


def __getattr__(name: str) -> Any:
    """``choose`` and ``rank`` (``launch_order.chooser``) load the simulator only when first asked for."""
    if name in ("choose", "rank"):
        import importlib

        return getattr(importlib.import_module("wavealign.launch_order.chooser"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
