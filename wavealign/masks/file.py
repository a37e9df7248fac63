"""``file``: a block mask saved earlier (``wavealign.masks.npz`` .npz), ignoring Q/K.

How a measured cell's exact mask reaches the simulator, or a mask captured from a real pipeline reaches a
sweep: ``method=file`` with ``path=...``. The file's (H, MB, NB) must match the cell's heads and blocks.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import torch

from wavealign import masks
from wavealign.masks import npz


def load(heads: int, q_blocks: int, kv_blocks: int, *, path: str, device: torch.device | str = "cpu") -> torch.Tensor:
    """The mask saved at ``path``, checked to be (heads, q_blocks, kv_blocks)."""
    if not path:
        raise ValueError("method file needs path=<a wavealign.masks.npz .npz>, got an empty path")
    try:
        stat = Path(path).stat()
    except OSError as exc:
        raise ValueError(f"method file: cannot read path={path!r}: {exc.strerror}") from exc
    version = (stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    shape = npz.read_shape(path)  # its headers only: a file of the wrong shape is refused before it is unpacked
    if (math.prod(shape[:-2]), *shape[-2:]) != (heads, q_blocks, kv_blocks):
        raise ValueError(f"mask file {path} holds a {shape} mask; the cell needs (H, MB, NB) = "
                         f"{(heads, q_blocks, kv_blocks)}")
    mask = _read(str(Path(path).resolve()), version, torch.device(device)).clone()
    return mask.reshape(-1, *mask.shape[-2:])


@functools.lru_cache(maxsize=4)
def _read(path: str, version: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """The file's mask on ``device``, read once per version of the file (inode, size, modification and change
    times): a pipeline replays it in every layer and step, where reading and unpacking it again would cost more than
    the attention it stands for. At most four masks stay cached on their devices."""
    return npz.load(path).to(device)


def check_path(name: str, value: object) -> str:
    """A non-empty path string. Whether the file exists is checked where the mask is read (a cluster's workers may
    see files the machine validating the sweep does not)."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must name a mask file (a wavealign.masks.npz .npz), got {value!r}")
    return value


masks.register("file", None, {"path": ""}, "a block mask saved as packed bits (wavealign.masks.npz .npz)",
               from_shape=load, checks={"path": check_path})
