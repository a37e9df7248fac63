"""Per-(model, layer, head) tuned configs of the autotuned methods, cached in one JSON file per method.

File layout: ``{"method": "spargeattn", "configs": {"wan2.1-14b/3/17": {...params...}, ...}}``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


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
