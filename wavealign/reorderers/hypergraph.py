"""``hypergraph``: rows partitioned into wave-sized parts by Mt-KaHyPar, minimising the K/V blocks shared across parts.

The hypergraph of a head has one vertex per query row and one hyperedge per K/V block, pinning the rows that read
it. A k-way partition (k = ceil(MB / wave_size)) that minimises connectivity - 1 (``km1``) minimises the number of
times a K/V block is loaded by a wave beyond the first: the redundant HBM traffic a reorder is after. Each part is
given exactly one wave's rows (the last part the remainder), so laid out part by part (parts by their first row,
the remainder last; rows in their original order) every part is one wave.

Hyperedges of one pin or of every row cannot be cut or are cut in every partition: they are dropped. Identical
hyperedges are merged into one of summed weight. Mt-KaHyPar (Gottesbueren et al., "Scalable High-Quality Hypergraph
Partitioning", ACM TOPC 2024) runs on the host's cores; the "deterministic" preset gives the same parts for a seed.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import numpy as np
import torch

from wavealign import reorderers
from wavealign.blockmask import check_int

PRESETS = {"deterministic": "DETERMINISTIC", "default": "DEFAULT", "quality": "QUALITY"}
OBJECTIVES = ("km1", "cut", "soed")


@functools.cache
def _initializer(threads: int) -> Any:
    """Mt-KaHyPar's thread pool, started once per process and thread count."""
    try:
        import mtkahypar
    except ImportError as exc:
        raise ImportError("reorderer 'hypergraph' needs Mt-KaHyPar: pip install 'wavealign[baselines]'") from exc
    return mtkahypar.initialize(threads, False)


def _choice(options: tuple[str, ...] | dict[str, str]) -> Any:
    def check(name: str, value: Any) -> str:
        if value not in options:
            raise ValueError(f"{name} must be one of {sorted(options)}, got {value!r}")
        return value
    return check


def _threads(name: str, value: Any) -> int | None:
    return None if value is None else check_int(name, value, lo=1)


def hyperedges(rows: np.ndarray) -> tuple[list[list[int]], list[int]]:
    """The hyperedges (pinned rows) and their weights of one head's (MB, NB) bool mask: one per distinct K/V column
    that pins at least two rows but not all of them, weighted by how many columns share it."""
    mb = rows.shape[0]
    counts = rows.sum(0)
    cols = rows[:, (counts >= 2) & (counts < mb)].T
    if cols.shape[0] == 0:
        return [], []
    packed, weights = np.unique(np.packbits(cols, axis=1), axis=0, return_counts=True)
    pins = np.unpackbits(packed, axis=1, count=mb).astype(bool)
    return [np.flatnonzero(p).tolist() for p in pins], weights.tolist()


def wave_targets(mb: int, wave_size: int) -> list[int]:
    """Part sizes that make each part one wave: ``wave_size`` rows each, the last the remainder."""
    k = reorderers.blocks_per_wave(mb, wave_size)
    return [wave_size] * (k - 1) + [mb - (k - 1) * wave_size]


def layout(labels: torch.Tensor, wave_size: int) -> torch.Tensor:
    """(G, MB) order laying out rows part by part: full parts by their first row, a short (remainder) part last, so
    part boundaries fall on wave boundaries; rows within a part in their original order."""
    sizes = torch.zeros_like(labels).scatter_add_(-1, labels, torch.ones_like(labels))
    return reorderers.order_by_group(labels, last=sizes < wave_size)


def group(mask: torch.Tensor, *, wave_size: int, seed: int, objective: str, preset: str,
          threads: int | None) -> torch.Tensor:
    """Each head's rows, part by part, of its Mt-KaHyPar partition into ceil(MB / wave_size) parts."""
    import mtkahypar

    g, mb, _ = mask.shape
    k = reorderers.blocks_per_wave(mb, wave_size)
    labels = torch.zeros(g, mb, dtype=torch.long)
    if k >= 2:
        init = _initializer(threads or len(os.sched_getaffinity(0)))
        heads = mask.cpu().numpy()
        for h in range(g):
            edges, weights = hyperedges(heads[h])
            if not edges:
                continue  # nothing to cut: every order loads the same blocks
            context = init.context_from_preset(getattr(mtkahypar.PresetType, PRESETS[preset]))
            context.logging = False
            context.set_partitioning_parameters(k, 0.0, getattr(mtkahypar.Objective, objective.upper()))
            context.set_individual_target_block_weights(wave_targets(mb, wave_size))
            mtkahypar.set_seed(seed)
            hg = init.create_hypergraph(context, mb, len(edges), edges, [1] * mb, weights)
            labels[h] = torch.from_numpy(np.asarray(hg.partition(context).get_partition(), dtype=np.int64))
    return layout(labels, wave_size).to(mask.device)


reorderers.register(
    # objective km1: connectivity - 1, K/V blocks loaded by a wave beyond the first (or cut, soed); preset
    # deterministic: the same parts for a seed (default / quality trade that for speed / quality); threads None:
    # every core this process may use
    "hypergraph", group, {"objective": "km1", "preset": "deterministic", "threads": None},
    "k-way hypergraph partition of rows (vertices) by shared K/V blocks (hyperedges) into one part per wave",
    reference="Mt-KaHyPar (Gottesbueren et al., ACM TOPC 2024); km1 (connectivity - 1), KaHyPar's default objective",
    checks={"objective": _choice(OBJECTIVES),
            "preset": _choice(PRESETS), "threads": _threads},
    needs_warmup=False, label="Hypergraph", color="tab:purple", types={"threads": int | None})
