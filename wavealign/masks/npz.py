"""A block mask saved as packed bits (``.npz``): how a measured cell's exact mask reaches the simulator, and a mask
captured elsewhere a sweep (mask method ``file``).

Format: ``bits`` = ``np.packbits(mask, axis=-1)`` (uint8) and ``shape`` = the mask's shape (int64), so a
(40, 2840, 2840) mask takes 40 MB instead of 322 MB.
"""

from __future__ import annotations

import math
import zipfile
from pathlib import Path

import numpy as np
import torch

from wavealign.blockmask import check_mask


def save(path: str | Path, mask: torch.Tensor) -> None:
    """Write ``mask`` (bool (H, MB, NB) or (B, H, MB, NB)) to ``path`` as packed bits."""
    dense = check_mask(mask).detach().to("cpu").numpy()
    np.savez_compressed(path, bits=np.packbits(dense, axis=-1), shape=np.asarray(dense.shape, dtype=np.int64))


def load(path: str | Path) -> torch.Tensor:
    """Read a mask written by ``save``. Nothing is unpacked before the file's claimed shape is checked
    (``read_shape``); a file that is no such mask is a ``ValueError`` naming it."""
    path = Path(path)
    shape = read_shape(path)
    with _archive(path) as archive:
        bits = _array(archive, path, "bits", _bits_shape(shape), np.uint8)
    return torch.from_numpy(np.unpackbits(bits, axis=-1, count=shape[-1]).astype(bool).reshape(shape))


def read_shape(path: str | Path) -> tuple[int, ...]:
    """The shape of the mask saved at ``path``, from the headers of its arrays alone: ``shape`` holds 3 or 4
    positive sizes of at most ``MAX_MASK_ENTRIES`` entries in all, and ``bits`` is declared as exactly their packed
    bytes (uint8, the last axis in bytes of 8 bits), in the archive's own sizes too, so neither a crafted shape nor
    a zip bomb can ask for more memory than the mask it claims."""
    path = Path(path)
    with _archive(path) as archive:
        shape = tuple(int(d) for d in _array(archive, path, "shape", None, np.int64))
        if min(shape) < 1:
            raise ValueError(f"mask file {path}: shape {shape}; expected positive sizes ((B,) H, MB, NB)")
        if math.prod(shape) > MAX_MASK_ENTRIES:
            raise ValueError(f"mask file {path}: shape {shape} has {math.prod(shape):,} entries, more than "
                             f"MAX_MASK_ENTRIES={MAX_MASK_ENTRIES:,}")
        _header(archive, path, "bits", _bits_shape(shape), np.uint8)
    return shape


# 4 GiB as bools; a Wan 14B 720p head at 436K tokens and 128-token blocks has 3407² = 11.6M, 40 heads 464M
MAX_MASK_ENTRIES = 2**32
_NOT_A_MASK = "expected a .npz written by wavealign.masks.npz.save (arrays 'bits' and 'shape')"


def _bits_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    return (*shape[:-1], -(-shape[-1] // 8))


def _archive(path: Path) -> zipfile.ZipFile:
    if path.is_dir():
        raise ValueError(f"mask file {path} is a folder; {_NOT_A_MASK}")
    try:
        return zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise ValueError(f"mask file {path} is not a .npz archive ({exc}); {_NOT_A_MASK}") from None


def _header(archive: zipfile.ZipFile, path: Path, name: str, shape: tuple[int, ...] | None,
            dtype: type) -> tuple[int, ...]:
    """The shape in the ``.npy`` header of array ``name``, checked to be ``shape`` (for None: 3 or 4 sizes) of
    ``dtype``, and the archive's declared size of the member to be the header plus exactly that data."""
    try:
        info = archive.getinfo(f"{name}.npy")
        with archive.open(info) as fh:
            version = np.lib.format.read_magic(fh)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            got, fortran, got_dtype = read(fh)
            header_bytes = fh.tell()
    except KeyError:
        raise ValueError(f"mask file {path} has no array {name!r} (it holds {sorted(archive.namelist())}); "
                         f"{_NOT_A_MASK}") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(f"mask file {path}: array {name!r} is not a readable .npy ({exc}); {_NOT_A_MASK}") from None
    fits = tuple(got) == shape if shape is not None else (len(got) == 1 and 3 <= got[0] <= 4)
    if got_dtype != np.dtype(dtype) or fortran or not fits:
        want = f"{shape}" if shape is not None else "(3,) or (4,)"
        raise ValueError(f"mask file {path}: array {name!r} is {got_dtype} {tuple(got)}; expected {np.dtype(dtype)} "
                         f"{want}")
    if info.file_size != header_bytes + math.prod(got) * np.dtype(dtype).itemsize:
        raise ValueError(f"mask file {path}: array {name!r} is declared as {info.file_size} bytes; its header says "
                         f"{header_bytes + math.prod(got) * np.dtype(dtype).itemsize}")
    return tuple(got)


def _array(archive: zipfile.ZipFile, path: Path, name: str, shape: tuple[int, ...] | None,
           dtype: type) -> np.ndarray:
    """Array ``name`` once its header passed ``_header``."""
    _header(archive, path, name, shape, dtype)
    try:
        with archive.open(f"{name}.npy") as fh:
            return np.lib.format.read_array(fh, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(f"mask file {path}: array {name!r} cannot be read ({exc})") from None
