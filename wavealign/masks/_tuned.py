"""Per-(model, layer, head) tuned configs of the autotuned methods (SpargeAttn, MInference): held in memory by a
``TunedConfigs`` store across builds, and cached in one JSON file per method when a path is given.

Upstream tunes each (layer, head) once, offline, and runs only the cheap prediction at inference; a live pipeline
(``wavealign.integrations``) keeps one store per method, so a layer pays the tuning on its first call only. A sweep
cell passes no store: it tunes the heads it builds, as the paper's per-head tuned config prescribes.

File layout: ``{"method": "spargeattn", "configs": {"wan2.1-14b/3/17": {...params...}, ...}}``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from wavealign.blockmask import check_int


def key(model: str, layer: int, head: int) -> str:
    return f"{model}/{int(layer)}/{int(head)}"


def load(path: str | Path, method: str) -> dict[str, dict[str, Any]]:
    """The cached configs of ``method`` in ``path`` (empty if the file does not exist yet)."""
    path = Path(path)
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"tuned config file {str(path)!r} is not valid JSON: {err}") from err
    if data.get("method") != method or not isinstance(data.get("configs"), dict):
        raise ValueError(f"tuned config file {str(path)!r} must hold {{'method': {method!r}, 'configs': {{...}}}}, "
                         f"got method {data.get('method')!r}")
    return data["configs"]


def save(path: str | Path, method: str, configs: dict[str, dict[str, Any]]) -> Path:
    """Merge ``configs`` into the file (creating it), keeping entries for other heads."""
    path = Path(path)
    merged = {**load(path, method), **configs}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"method": method, "configs": dict(sorted(merged.items()))}, indent=1))
    return path


class TunedConfigs:
    """One method's tuned configs keyed by ``key(model, layer, head)``, in memory, read from ``path`` once (when
    given and present) and written back there as heads are tuned. ``tuned`` counts the heads tuned through it."""

    def __init__(self, method: str, path: str | Path | None = None) -> None:
        self.method, self.path = method, None if path is None else Path(path)
        self._configs: dict[str, dict[str, Any]] = {} if self.path is None else load(self.path, method)
        self.tuned = 0

    def __len__(self) -> int:
        return len(self._configs)

    def get(self, model: str, layer: int, head: int) -> dict[str, Any] | None:
        return self._configs.get(key(model, layer, head))

    def add(self, model: str, layer: int, head: int, config: dict[str, Any]) -> None:
        """Keep ``config`` for the head (and save it to the file, if the store has one)."""
        name = key(model, layer, head)
        self._configs[name] = config
        self.tuned += 1
        if self.path is not None:
            save(self.path, self.method, {name: config})


def store(method: str, cache: str | Path | TunedConfigs | None) -> TunedConfigs:
    """The store a build reads and extends: ``cache`` itself, or one over the file it names (empty for None)."""
    if isinstance(cache, TunedConfigs):
        if cache.method != method:
            raise ValueError(f"tuned_config must be a store of {method!r} configs, got one of {cache.method!r}")
        return cache
    if cache is not None and not isinstance(cache, str | Path):
        raise ValueError(f"tuned_config must be a JSON file path, a masks.TunedConfigs store or None, got "
                         f"{cache!r} ({type(cache).__name__})")
    return TunedConfigs(method, cache)


def model_heads(heads: list[int] | None, num_heads: int) -> list[int]:
    """The model heads that q's ``num_heads`` heads are (``heads``, default 0..H-1), one per head of q."""
    head_ids = list(range(num_heads)) if heads is None else list(heads)
    if len(head_ids) != num_heads:
        raise ValueError(f"heads must name one model head per head of q ({num_heads}), got {heads}")
    return [check_int(f"heads[{i}]", h, lo=0) for i, h in enumerate(head_ids)]


class HeadConfigs:
    """The per-head configs of one build: those the store (``cache``: a ``TunedConfigs``, a file path, or None)
    holds, else tuned on demand and added to it."""

    def __init__(self, method: str, cache: str | Path | TunedConfigs | None, model: str, layer: int,
                 heads: list[int] | None, num_heads: int) -> None:
        self.store, self.model, self.layer = store(method, cache), model, check_int("layer", layer, lo=0)
        self.head_ids = model_heads(heads, num_heads)

    def get(self, i: int, tune: Callable[[], dict[str, Any]] | None) -> dict[str, Any] | None:
        """Head i's stored config; if none, ``tune()``'s (added to the store), or None."""
        cfg = self.store.get(self.model, self.layer, self.head_ids[i])
        if cfg is None and tune is not None:
            cfg = tune()
            self.store.add(self.model, self.layer, self.head_ids[i], cfg)
        return cfg


def tune_heads(method: str, q: torch.Tensor, tune_head: Callable[[int], dict[str, Any]], *, model: str, layer: int,
               heads: list[int] | None, cache: str | Path | None) -> dict[str, dict[str, Any]]:
    """Run ``tune_head(i)`` for every head i of q (1, H, N, D), key the configs by (model, layer, model head) and
    merge them into ``cache``: the per-head "pre-autotuned config" step SpargeAttn and MInference share."""
    if q.shape[0] != 1:
        raise ValueError(f"{method} tuning takes one batch element, got q of shape {tuple(q.shape)}")
    head_ids = model_heads(heads, q.shape[1])
    layer = check_int("layer", layer, lo=0)
    configs = {key(model, layer, hid): tune_head(i) for i, hid in enumerate(head_ids)}
    if cache is not None:
        save(cache, method, configs)
    return configs
