"""Grid expansion: a validated sweep config -> resolved ``pipeline.Cell``s with stable ids.

Combinations that cannot run (a backend that does not support a GPU type, a Q/K method on a bare
shape, ...) are not silently dropped: each is counted under its reason in ``Grid.filtered``. A backend
named in a grid that can run nowhere in it is a config error instead, naming the pair.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from orchestrator.config import CONF_DIR, ConfigError, grids, group_entry
from wavealign import fingerprint, kernels
from wavealign import hardware as hardware_registry
from wavealign.pipeline import CPU, SIM_BACKEND, SYNTHETIC_METHODS, Cell
from wavealign.sim import facts as sim_facts

# Bumped when the meaning of a cell's fields changes; part of every cell id.
CELL_SCHEMA = 1


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


def cell_identity(cell: Cell) -> dict[str, Any]:
    """What a cell id hashes: its resolved config (ids excluded), the code's fingerprint and the hardware type."""
    fields = asdict(cell)
    fields.pop("cell_id")
    fields.pop("group_id")
    return {"cell": fields, "code_version": fingerprint.code_version(), "cell_schema": CELL_SCHEMA,
            "hardware": cell.hardware}


def expand(cfg: DictConfig, conf_dir: Path = CONF_DIR) -> Grid:
    """Every valid cell of every grid of ``cfg`` (duplicates across grids appear once)."""
    grid = Grid(cells=[])
    seen: set[str] = set()
    for where, g in grids(cfg).items():
        sub = _expand_one(where, g, cfg, conf_dir)
        grid.filtered.update(sub.filtered)
        for cell in sub.cells:
            if cell.cell_id not in seen:
                seen.add(cell.cell_id)
                grid.cells.append(cell)
    return grid


def _axes(axes: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """{a: [1, 2], b: [3]} -> [{a: 1, b: 3}, {a: 2, b: 3}]."""
    keys = sorted(axes)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(axes[k] for k in keys))]


def _base_params(group: str, name: str, conf_dir: Path) -> dict[str, Any]:
    if group == "method" and name in SYNTHETIC_METHODS:
        return dict(SYNTHETIC_METHODS[name])
    return OmegaConf.to_container(group_entry(group, name, conf_dir).params)  # type: ignore[return-value]


def _placement_reason(hw: str, backend: str) -> str | None:
    """Why ``backend`` cannot run on ``hw``, or None if it can."""
    if backend == SIM_BACKEND:
        return None if hw != CPU else "backend sim simulates a GPU type; hardware cpu has none"
    spec = kernels.get(backend)
    if hw == CPU:
        return None if spec.supported_hardware is None else f"backend {backend} needs a GPU; hardware cpu"
    return None if spec.supports(hw) else (
        f"backend {backend} does not run on {hw} (supports {list(spec.supported_hardware or [])})")


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


def _expand_one(where: str, g: DictConfig, cfg: DictConfig, conf_dir: Path) -> Grid:
    out = Grid(cells=[])
    runnable_backends: set[str] = set()
    workloads_cfg = {name: group_entry("workload", name, conf_dir) for name in g.workload}
    for hw, backend in itertools.product(g.hardware, g.backend):
        reason = _placement_reason(hw, backend)
        combos = len(g.workload) * len(g.seq_k) * len(g.method) * len(g.variant) * len(g.wave_size) * len(g.seed)
        if reason:
            out.filtered[reason] += combos
            continue
        runnable_backends.add(backend)
        profile = g.cpu_profile if hw == CPU else hw
        hw_spec = hardware_registry.get(profile)
        for backend_params in _axes(_merged(_base_params("backend", backend, conf_dir), g.backend_params, backend)):
            kernel = backend_params.get("kernel", "flex") if backend == SIM_BACKEND else backend
            if backend == SIM_BACKEND:
                if kernel not in sim_facts.names():
                    raise ConfigError(f"{where}.backend_params.sim.kernel={kernel!r}; expected one of "
                                      f"{sim_facts.names()}")
                reason = _placement_reason(hw, kernel) if kernel in kernels.names() else None
                if reason:  # simulating a kernel on a GPU it cannot run on (e.g. fa4 on a40) is meaningless too
                    out.filtered[f"simulated {reason}"] += combos
                    continue
            block_size = int(g.block_size or hw_spec.default_block_size)
            for wl_name, method in itertools.product(g.workload, g.method):
                wl = workloads_cfg[wl_name]
                if wl.model is None and method not in SYNTHETIC_METHODS:
                    out.filtered[f"method {method} needs a model's Q/K; workload {wl_name} is a bare shape"] += (
                        len(g.seq_k) * len(g.variant) * len(g.wave_size) * len(g.seed))
                    continue
                method_axes = _axes(_merged(_base_params("method", method, conf_dir), g.method_params, method))
                for seq_k, method_params, wave, seed in itertools.product(g.seq_k, method_axes, g.wave_size,
                                                                          g.seed):
                    tokens, frames = _shape(wl, float(seq_k))
                    base = dict(
                        hardware=hw, profile_hardware=profile, backend=backend, method=method,
                        workload=wl_name, seq_len_tokens=tokens,
                        num_heads=len(wl.heads) if wl.model is not None else int(wl.num_heads),
                        head_dim=int(wl.head_dim), block_size=block_size,
                        wave_size=int(wave or hw_spec.wave_size(kernel)), seed=int(seed), model=wl.model,
                        resolution=wl.resolution, frames=frames,
                        heads=list(wl.heads) if wl.model is not None else [], layer=int(wl.layer), step=int(wl.step),
                        method_params=method_params, backend_params=backend_params, reps=int(g.reps),
                        warmup=int(g.warmup), ncu=bool(g.ncu))
                    group_id = stable_hash({**base, "code_version": fingerprint.code_version()})
                    for variant in g.variant:
                        v = cfg.variants[variant]
                        cell = Cell(cell_id="", group_id=group_id, variant=variant, stages=v.stages,
                                    skip_mode=v.skip, **base)
                        cell.cell_id = stable_hash(cell_identity(cell))
                        out.cells.append(cell)
    for backend in g.backend:
        if backend not in runnable_backends:
            raise ConfigError(f"{where}.backend {backend!r} cannot run on any of {where}.hardware "
                              f"{list(g.hardware)}: {_placement_reason(g.hardware[0], backend)}")
    return out


def _merged(base: dict[str, Any], axes: DictConfig, name: str) -> dict[str, list[Any]]:
    """The YAML's parameters (one value each) overridden by the grid's axes for ``name`` (a list is an
    axis, a scalar one value); unknown parameter names fail."""
    override = OmegaConf.to_container(axes[name]) if name in axes else {}
    if base:
        unknown = sorted(set(override) - set(base))
        if unknown:
            raise ConfigError(f"parameter(s) {unknown} of {name!r} are not among its known parameters "
                              f"{sorted(base)}")
    return {**{k: [v] for k, v in base.items()},
            **{k: v if isinstance(v, list) else [v] for k, v in override.items()}}
