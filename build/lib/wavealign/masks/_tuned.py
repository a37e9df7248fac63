"""Per-(model, layer, head) tuned configs of the autotuned methods, cached in one JSON file per method.

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


def lookup(path: str | Path | None, method: str, model: str, layer: int, heads: list[int]) -> list[dict | None]:
    """The cached config of each head, or None where the file has none."""
    if path is None:
        return [None] * len(heads)
    configs = load(path, method)
    return [configs.get(key(model, layer, h)) for h in heads]


def model_heads(heads: list[int] | None, num_heads: int) -> list[int]:
    """The model heads that q's ``num_heads`` heads are (``heads``, default 0..H-1), one per head of q."""
    head_ids = list(range(num_heads)) if heads is None else list(heads)
    if len(head_ids) != num_heads:
        raise ValueError(f"heads must name one model head per head of q ({num_heads}), got {heads}")
    return [check_int(f"heads[{i}]", h, lo=0) for i, h in enumerate(head_ids)]


class HeadConfigs:
    """The per-head configs of one build: those ``cache`` holds, else tuned on demand and merged into it."""

    def __init__(self, method: str, cache: str | Path | None, model: str, layer: int, heads: list[int] | None,
                 num_heads: int) -> None:
        self.method, self.cache, self.model, self.layer = method, cache, model, check_int("layer", layer, lo=0)
        self.head_ids = model_heads(heads, num_heads)
        self._found = lookup(cache, method, model, layer, self.head_ids)

    def get(self, i: int, tune: Callable[[], dict[str, Any]] | None) -> dict[str, Any] | None:
        """Head i's cached config; if none, ``tune()``'s (saved to the cache when there is one), or None."""
        cfg = self._found[i]
        if cfg is None and tune is not None:
            cfg = tune()
            if self.cache is not None:
                save(self.cache, self.method, {key(self.model, self.layer, self.head_ids[i]): cfg})
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
