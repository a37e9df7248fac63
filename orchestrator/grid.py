"""Grid expansion: a validated sweep config -> resolved ``records.Cell``s with stable ids.

Combinations that cannot run (a backend that does not support a GPU type: ``wavealign.placement``; a Q/K method on
a bare shape, ...) are not silently dropped: each is counted under its reason in ``Grid.filtered``. A backend
named in a grid that can run nowhere in it is a config error instead (``config_validate``), naming the pair.
``count_cells`` sizes a sweep from its axes without making a cell.

A grid's list that names a cell's column and needs no resolving (``PLAIN_AXES``: ``seed``) is an axis by that alone:
a new one is a ``GridConfig`` list (``config_schema``) and the field of the ``Cell`` part it lands in
(``wavealign.records``), two files. A parameter of a method, backend, measurer or reorderer is an axis of its entry
(``grid.<kind>_params.<name>.<param>: [...]``), one file: the entry's module, a plugin's too.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import typing
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from orchestrator.config_entries import group_entry, search_dirs
from orchestrator.config_schema import CONF_DIR, GridConfig
from orchestrator.grid_axes import (
    axis_product,
    block_size_for,
    grids,
    param_axes,
    param_combinations,
    profile_hardware,
)
from wavealign import attention, fingerprint, kernels, masks, placement, variants
from wavealign.records import NO_REORDERER, Cell

# the grid's lists that pick the blocks of cells and their launch orders (``_blocks``, ``_orders``), and the two a cell
# takes resolved: seq_k (its nearest valid shape) and wave_size (None: its backend's wave on its GPU)
RESOLVED_AXES = ("hardware", "backend", "measure", "method", "workload", "variant", "reorderer", "seq_k", "wave_size")
# every other list of the grid that names a cell's column: one value of it per cell, as it is
PLAIN_AXES = tuple(name for name, hint in typing.get_type_hints(GridConfig).items()
                   if typing.get_origin(hint) is list and name in Cell.columns() and name not in RESOLVED_AXES)

# Bumped when the meaning of a cell's fields changes; part of every cell id.
CELL_SCHEMA = 4  # 2: cells carry the requested seq_k; 3: and their reorderer; 4: and their measurer (measure,
#                  measure_params): a simulated cell names the backend it models, none is of backend sim, and
#                  ncu is a measurer instead of a flag


@dataclass
class Grid:
    """The cells of a sweep, and what was filtered out, by reason."""

    cells: list[Cell]
    filtered: Counter = field(default_factory=Counter)

    def by_hardware(self) -> Counter:
        return Counter(c.hardware for c in self.cells)


def stable_hash(payload: dict[str, Any]) -> str:
    """16 hex digits of sha256 over canonical JSON: stable across processes and machines."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cell_identity(values: dict[str, Any]) -> dict[str, Any]:
    """What a cell id hashes: a cell's flat view (``Cell.flat``, ids excluded), the code's fingerprint and the
    hardware type. The values are read as they are (plain values, hashed as JSON), not deep-copied: ``expand`` hashes
    every cell."""
    fields = {k: v for k, v in values.items() if k not in ("cell_id", "group_id")}
    return {"cell": fields, "code_version": fingerprint.code_version(), "cell_schema": CELL_SCHEMA,
            "hardware": values["hardware"]}


def expand(cfg: DictConfig, conf_dir: Path = CONF_DIR) -> Grid:
    """Every valid cell of every grid of ``cfg`` (duplicates across grids appear once)."""
    grid = Grid(cells=[])
    seen: set[str] = set()
    dirs = search_dirs(cfg, conf_dir)
    for g in grids(cfg).values():
        sub = _expand_one(g, cfg, dirs)
        grid.filtered.update(sub.filtered)
        for cell in sub.cells:
            if cell.cell_id not in seen:
                seen.add(cell.cell_id)
                grid.cells.append(cell)
    return grid


def count_cells(cfg: DictConfig, conf_dir: Path = CONF_DIR) -> int:
    """How many cells ``expand`` would make, from the axes' lengths, making none (a cell that two grids both
    name counts twice): a sweep too large to enumerate is refused by its count."""
    dirs = search_dirs(cfg, conf_dir)
    return sum(block.size for g in grids(cfg).values()
               for block in _blocks(g, _orders(g, cfg), dirs) if block.filtered is None)


@dataclass(frozen=True)
class _Order:
    """One launch order a grid asks of every mask: a variant, and the reorderer (with params) of its spatial stage."""

    variant: str
    reorderer: str
    reorderer_params: dict[str, Any]


@dataclass(frozen=True)
class _Block:
    """The cells of a grid that share hardware, backend options, measurer, workload and method; they vary seq_k,
    the method's parameters, wave size, seed and launch order (variant and reorderer). ``filtered`` says why none of
    them can run, if so."""

    hardware: str
    backend: str
    backend_params: dict[str, Any]
    measure: str
    measure_params: dict[str, Any]
    workload: str
    method: str
    method_axes: dict[str, list[Any]]
    orders: list[_Order]  # the grid's launch orders this method's masks take
    refused_orders: Counter  # why the others cannot order them (reason -> cells of this block)
    size: int
    filtered: str | None


def _orders(g: DictConfig, cfg: DictConfig) -> list[_Order]:
    """Each variant with each of the grid's reorderers and their parameter combinations; a variant without a
    spatial stage, or one that chooses its order (whose candidates name their own reorderers), once, with
    ``NO_REORDERER``."""
    orders = []
    for variant in g.variant:
        v = cfg.variants[variant]
        if variants.Variant(variant, v.stages, v.skip).spatial and v.skip != "choose":
            orders += [_Order(variant, name, params) for name in g.reorderer
                       for params in param_combinations(param_axes("reorderer", name, g))]
        else:
            orders.append(_Order(variant, NO_REORDERER, {}))
    return orders


def _blocks(g: DictConfig, orders: list[_Order], dirs: list[Path]) -> Iterator[_Block]:
    workloads_cfg = {name: group_entry("workload", name, dirs) for name in g.workload}
    method_axes = {m: param_axes("method", m, g) for m in g.method}
    per_order = len(g.seq_k) * len(g.wave_size) * axis_product({axis: g[axis] for axis in PLAIN_AXES})
    taken = {m: _orders_taken(m, orders) for m in g.method}
    measure_options = {m: param_combinations(param_axes("measure", m, g)) for m in g.measure}
    for hw, backend_name, measure in itertools.product(g.hardware, g.backend, g.measure):
        for backend_params in param_combinations(param_axes("backend", backend_name, g)):
            for measure_params in measure_options[measure]:
                refused = placement.hardware_refused(hw, backend_name, measure)
                for wl_name, method in itertools.product(g.workload, g.method):
                    reason = refused
                    wl = workloads_cfg[wl_name]
                    if reason is None and wl.model is None and wl.captured is None:
                        if masks.get(method).needs_qk:
                            reason = f"method {method} needs a model's Q/K; workload {wl_name} is a bare shape"
                        elif masks.get(method).needs_latent:
                            reason = (f"method {method} needs the latent video (T, H, W); workload {wl_name} is a "
                                      "bare shape")
                    reason = reason or placement.method_refused(backend_name, method)
                    kept, refused_orders = taken[method]
                    cells = axis_product(method_axes[method]) * per_order
                    yield _Block(hw, backend_name, backend_params, measure, measure_params, wl_name, method,
                                 method_axes[method], kept, Counter({r: n * cells for r, n in refused_orders.items()}),
                                 cells * len(kept), reason)


def _orders_taken(method: str, orders: list[_Order]) -> tuple[list[_Order], Counter]:
    """The orders a method's masks take, and why the others are refused (``attention.order_refused``: ``curve`` on
    VSA's cubes), with how many of ``orders`` each reason refuses."""
    token_ordered = masks.get(method).token_order is not None
    kept, refused = [], Counter()
    for order in orders:
        spatial = order.reorderer != NO_REORDERER
        reason = spatial and attention.order_refused(order.reorderer, token_ordered)
        if reason:
            refused[f"{reason} (method {method})"] += 1
        else:
            kept.append(order)
    return kept, refused


def _shape(wl: DictConfig, seq_k: float) -> tuple[int, int | None]:
    """(tokens, frames) nearest to ``seq_k`` thousand tokens: whole latent frames for a model preset."""
    if wl.model is None:
        return max(1, round(seq_k * 1000)), None
    from wavealign import workloads

    spec = workloads.MODELS[wl.model]
    per_frame = workloads.preset(wl.model, frames=1, resolution=wl.resolution).tokens_per_frame
    latent = max(1, round(seq_k * 1000 / per_frame))
    frames = 1 + (latent - 1) * spec.vae_stride[0] * spec.patch[0]
    return workloads.preset(wl.model, frames=frames, resolution=wl.resolution).seq_len, frames


def _workload_fields(wl: DictConfig, seq_k: float) -> dict[str, Any]:
    """A cell's workload fields: its shape, heads and origin, from a captured file, a model preset or a bare shape."""
    if wl.captured is not None:
        from wavealign.workloads import read_header

        path = Path(wl.captured).resolve()
        header = read_header(path)
        return dict(seq_len_tokens=header.shape[2], seq_k=header.shape[2] / 1000, num_heads=len(wl.heads),
                    head_dim=header.shape[3], model=header.model, resolution=None, frames=None, heads=list(wl.heads),
                    layer=header.layer, step=header.step, captured=str(path), generator=None)
    tokens, frames = _shape(wl, seq_k)
    preset = wl.model is not None
    generator = None
    if preset:
        from wavealign.workloads import generator_name

        generator = generator_name(wl.generator)
    return dict(seq_len_tokens=tokens, seq_k=seq_k, num_heads=len(wl.heads) if preset else int(wl.num_heads),
                head_dim=int(wl.head_dim), model=wl.model, resolution=wl.resolution, frames=frames,
                heads=list(wl.heads) if preset else [], layer=int(wl.layer), step=int(wl.step), generator=generator)


def _expand_one(g: DictConfig, cfg: DictConfig, dirs: list[Path]) -> Grid:
    """The cells of one grid; ``config_validate`` has made sure each of its backends runs somewhere in it."""
    out = Grid(cells=[])
    workloads_cfg = {name: group_entry("workload", name, dirs) for name in g.workload}
    orders = _orders(g, cfg)
    # each workload's fields per length, once (a captured file's header is read once, not per cell)
    shapes = {(name, seq_k): _workload_fields(workloads_cfg[name], float(seq_k)) for name in g.workload
              for seq_k in g.seq_k}
    # the config's values read once, as plain ones: OmegaConf's lookups would cost more than the cells themselves
    axes = {axis: list(g[axis]) for axis in ("seq_k", "wave_size", *PLAIN_AXES)}
    plain = [dict(zip(PLAIN_AXES, values, strict=True)) for values in itertools.product(*(axes[a] for a in PLAIN_AXES))]
    reps, warmup = int(g.reps), int(g.warmup)
    launch_variants = {name: variants.Variant(name, v.stages, v.skip) for name, v in cfg.variants.items()}
    for block in _blocks(g, orders, dirs):
        if block.filtered is not None:
            out.filtered[block.filtered] += block.size + sum(block.refused_orders.values())
            continue
        out.filtered.update(block.refused_orders)
        hw = block.hardware
        backend = kernels.get(block.backend)
        method_options = param_combinations(block.method_axes)
        profile, block_size = profile_hardware(g, hw), block_size_for(g, hw)
        geometries = [dataclasses.asdict(backend.geometry(profile, block_size, wave)) for wave in axes["wave_size"]]
        for seq_k, method_params, geometry, values in itertools.product(axes["seq_k"], method_options, geometries,
                                                                        plain):
            base = dict(
                hardware=hw, backend=block.backend, method=block.method, workload=block.workload,
                **geometry, method_params=method_params, backend_params=block.backend_params,
                measure=block.measure, measure_params=block.measure_params, reps=reps, warmup=warmup,
                **values, **shapes[block.workload, seq_k])
            group_id = stable_hash({**base, "code_version": fingerprint.code_version()})
            for order in block.orders:
                values = dict(**launch_variants[order.variant].columns(), reorderer=order.reorderer,
                              reorderer_params=order.reorderer_params, **base)
                cell = Cell.from_flat({**values, "cell_id": "", "group_id": group_id})
                out.cells.append(dataclasses.replace(cell, cell_id=stable_hash(cell_identity(cell.flat()))))
    return out
