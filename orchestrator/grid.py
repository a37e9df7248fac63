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

from orchestrator.config import CONF_DIR, ConfigError, grids, group_entry, search_dirs
from wavealign import fingerprint, kernels, masks
from wavealign import hardware as hardware_registry
from wavealign.records import CPU, Cell

# Bumped when the meaning of a cell's fields changes; part of every cell id.
CELL_SCHEMA = 2  # 2: cells carry the requested seq_k


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
    dirs = search_dirs(cfg, conf_dir)
    for where, g in grids(cfg).items():
        sub = _expand_one(where, g, cfg, dirs)
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


def _base_params(group: str, name: str, dirs: list[Path]) -> dict[str, Any]:
    return OmegaConf.to_container(group_entry(group, name, dirs).params)  # type: ignore[return-value]


def _placement_reason(hw: str, backend: kernels.Backend, options: dict[str, Any]) -> str | None:
    """Why ``backend`` with ``options`` cannot run on (or model) ``hw``, or None if it can."""
    if hw == CPU:
        if backend.simulated:
            return f"backend {backend.name} simulates a GPU type; hardware cpu has none"
        return f"backend {backend.name} needs a GPU; hardware cpu" if backend.needs_gpu else None
    modelled = backend.modelled(options)
    if not modelled.supports(hw):
        what = f"backend {backend.name}" if modelled is backend else f"{backend.name} of {modelled.name}"
        return f"{what} does not run on {hw} (supports {list(modelled.supported_hardware)})"
    return None


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


def _expand_one(where: str, g: DictConfig, cfg: DictConfig, dirs: list[Path]) -> Grid:
    out = Grid(cells=[])
    runnable_backends: set[str] = set()
    why_not: dict[str, str] = {}
    workloads_cfg = {name: group_entry("workload", name, dirs) for name in g.workload}
    combos = len(g.workload) * len(g.seq_k) * len(g.method) * len(g.variant) * len(g.wave_size) * len(g.seed)
    for hw, backend_name in itertools.product(g.hardware, g.backend):
        backend = kernels.get(backend_name)
        profile = g.cpu_profile if hw == CPU else hw
        hw_spec = hardware_registry.get(profile)
        for backend_params in _axes(_merged(_base_params("backend", backend_name, dirs), g.backend_params,
                                            backend_name)):
            modelled = _modelled(where, backend, backend_params)
            reason = _placement_reason(hw, backend, backend_params)
            if reason:
                out.filtered[reason] += combos
                why_not.setdefault(backend_name, reason)
                continue
            runnable_backends.add(backend_name)
            block_size = int(g.block_size or hw_spec.default_block_size)
            for wl_name, method in itertools.product(g.workload, g.method):
                wl = workloads_cfg[wl_name]
                if wl.model is None and masks.get(method).needs_qk:
                    out.filtered[f"method {method} needs a model's Q/K; workload {wl_name} is a bare shape"] += (
                        len(g.seq_k) * len(g.variant) * len(g.wave_size) * len(g.seed))
                    continue
                method_axes = _axes(_merged(_base_params("method", method, dirs), g.method_params, method))
                for seq_k, method_params, wave, seed in itertools.product(g.seq_k, method_axes, g.wave_size,
                                                                          g.seed):
                    tokens, frames = _shape(wl, float(seq_k))
                    base = dict(
                        hardware=hw, profile_hardware=profile, backend=backend_name, method=method,
                        workload=wl_name, seq_len_tokens=tokens, seq_k=float(seq_k),
                        num_heads=len(wl.heads) if wl.model is not None else int(wl.num_heads),
                        head_dim=int(wl.head_dim), block_size=block_size,
                        wave_size=int(wave or modelled.wave_size(hw_spec)), seed=int(seed), model=wl.model,
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
    for backend_name in g.backend:
        if backend_name not in runnable_backends:
            raise ConfigError(f"{where}.backend {backend_name!r} cannot run on any of {where}.hardware "
                              f"{list(g.hardware)}: {why_not[backend_name]}")
    return out


def _modelled(where: str, backend: kernels.Backend, options: dict[str, Any]) -> kernels.Backend:
    """The backend ``backend`` runs or models with ``options``; a simulator naming no real backend is an error."""
    if backend.models_option is None:
        return backend
    try:
        modelled = backend.modelled(options)
    except (KeyError, ValueError):
        option = backend.models_option
        raise ConfigError(f"{where}.backend_params.{backend.name}.{option}={options.get(option)!r}; expected one of "
                          f"{[n for n in kernels.names() if kernels.get(n).execution is not None]}") from None
    if modelled.execution is None:
        raise ConfigError(f"{where}.backend_params.{backend.name}.{backend.models_option}={modelled.name!r} has no "
                          "execution facts to model")
    return modelled


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
