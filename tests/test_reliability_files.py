"""Input files a user points a sweep at (issue 32): a saved mask (``.npz``) and captured Q/K/V (``safetensors``) are
checked from their headers (names, shapes, dtypes, sizes) before anything big is read or allocated, and anything
else is one ValueError naming the file."""

from __future__ import annotations

import io
import json
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from wavealign import masks, workloads
from wavealign.masks import npz, synthetic


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array)
    return buffer.getvalue()


def _npz(path: Path, **members: bytes) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(f"{name}.npy", data)
    return path


def _written(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _saved(path: Path, **arrays: np.ndarray) -> Path:
    np.savez(path, **arrays)
    return path


NOT_MASKS = {
    "text": lambda p: _written(p, b"my notes"),
    "empty": lambda p: _written(p, b""),
    "a folder": lambda p: p.mkdir() or p,
    "a password file": lambda p: _written(p, b"root:x:0:0:root:/root:/bin/bash\n"),
    "a zip of other arrays": lambda p: _npz(p, weights=_npy(np.zeros(3))),
    "pickled objects": lambda p: _saved(p, bits=np.array([{}], dtype=object), shape=np.array([1, 1, 8])),
    "float bits": lambda p: _npz(p, bits=_npy(np.zeros((1, 2, 1), np.float32)), shape=_npy(np.array([1, 2, 8]))),
    "a shape of two sizes": lambda p: _npz(p, bits=_npy(np.zeros((2, 1), np.uint8)), shape=_npy(np.array([2, 8]))),
    "a negative size": lambda p: _npz(p, bits=_npy(np.zeros((1, 1, 1), np.uint8)), shape=_npy(np.array([1, -1, 8]))),
    "bits of another shape": lambda p: _npz(p, bits=_npy(np.zeros((1, 3, 1), np.uint8)),
                                            shape=_npy(np.array([1, 2, 8]))),
}


@pytest.mark.parametrize("kind", NOT_MASKS)
def test_a_file_that_is_not_a_saved_mask_is_one_error_naming_it(tmp_path, kind):
    path = NOT_MASKS[kind](tmp_path / "mask.npz")
    with pytest.raises(ValueError, match=rf"^mask file {path}"):
        npz.load(path)


def _refused_within_a_mebibyte(path: Path, message: str) -> None:
    """Loading ``path`` raises a ValueError matching ``message`` having allocated under 1 MiB (numpy's allocations
    are traced) on the way."""
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=message):
            npz.load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20


def test_a_tiny_file_claiming_a_huge_mask_is_refused_before_any_allocation(tmp_path):
    path = _npz(tmp_path / "claims.npz", bits=_npy(np.zeros((1, 1, 1), np.uint8)),
                shape=_npy(np.array([1, 4096, 2_000_000])))  # 8.2e9 entries (7.6 GiB) in a few hundred bytes
    assert path.stat().st_size < 1000
    _refused_within_a_mebibyte(path, r"has 8,192,000,000 entries, more than MAX_MASK_ENTRIES")


def test_a_zip_bomb_s_bits_are_never_decompressed_past_what_its_shape_claims(tmp_path):
    """bits.npy declared as 16 MiB of zeros (it compresses to a few KB) for a shape of one byte: refused from the
    headers, the 16 MiB never inflated."""
    bomb = _npy(np.zeros((1, 1, 16 * 2**20), np.uint8))
    path = _npz(tmp_path / "bomb.npz", bits=bomb, shape=_npy(np.array([1, 1, 8])))
    assert path.stat().st_size < 100_000
    _refused_within_a_mebibyte(path, r"array 'bits' is uint8 \(1, 1, 16777216\); expected uint8 \(1, 1, 1\)")


def test_a_member_longer_than_its_header_says_is_refused(tmp_path):
    header_and_data = _npy(np.zeros((1, 2, 1), np.uint8))
    path = _npz(tmp_path / "long.npz", bits=header_and_data + b"\0" * 1000, shape=_npy(np.array([1, 2, 8])))
    with pytest.raises(ValueError, match=r"array 'bits' is declared as \d+ bytes; its header says \d+"):
        npz.load(path)


def test_a_saved_mask_of_another_shape_is_refused_from_its_header_before_it_is_unpacked(tmp_path, monkeypatch):
    from wavealign.masks import file

    path = tmp_path / "big.npz"
    npz.save(path, synthetic.random_mask(1, 64, 64, 0.5, seed=0))
    file._read.cache_clear()

    def unpacked(_):
        raise AssertionError("the mask was unpacked")

    monkeypatch.setattr(npz, "load", unpacked)
    with pytest.raises(ValueError, match=r"holds a \(1, 64, 64\) mask; the cell needs \(H, MB, NB\) = \(2, 4, 4\)"):
        masks.get("file").for_shape(2, 4, 4, path=str(path))


def test_a_saved_mask_reads_back_as_it_was_saved(tmp_path):
    mask = synthetic.random_mask(2, 5, 13, 0.5, seed=1)
    npz.save(tmp_path / "m.npz", mask)
    assert npz.read_shape(tmp_path / "m.npz") == (2, 5, 13)
    assert torch.equal(npz.load(tmp_path / "m.npz"), mask)


# --- captured Q/K/V ---

META = {"format": workloads.FORMAT, "layout": "BHND", "model": "m", "layer": "0", "step": "0", "grid": "2,3,4"}


def _captured(path: Path, shapes: dict[str, tuple[int, ...]], meta: dict[str, str] | None = None,
              dtype: torch.dtype = torch.float32) -> Path:
    save_file({name: torch.zeros(shape, dtype=dtype) for name, shape in shapes.items()}, str(path),
              metadata=meta or META)
    return path


def _truncated(path: Path) -> Path:
    _captured(path, {n: (1, 1, 24, 8) for n in "qkv"})
    path.write_bytes(path.read_bytes()[:-100])
    return path


def _lying_header(path: Path) -> Path:
    header = json.dumps({"__metadata__": META, **{n: {"dtype": "F32", "shape": [1, 1, 24, 8],
                                                       "data_offsets": [0, 10**12]} for n in "qkv"}}).encode()
    path.write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 64)
    return path


NOT_CAPTURES = {
    "a text file": (lambda p: _written(p, b"q,k,v\n"), "is not a safetensors file"),
    "a header longer than the file": (lambda p: _written(p, (10**6).to_bytes(8, "little") + b"{}"),
                                      "is not a safetensors file"),
    "a rank-1 q": (lambda p: _captured(p, {"q": (24,), "k": (24,), "v": (24,)}), r"q must be \(B, H, N, D\)"),
    "a rank-2 q": (lambda p: _captured(p, {"q": (24, 8), "k": (24, 8), "v": (24, 8)}), r"q must be \(B, H, N, D\)"),
    "no tokens": (lambda p: _captured(p, {n: (1, 1, 0, 8) for n in "qkv"}, {**META, "grid": "0,1,1"}),
                  r"q has an empty axis, shape \(1, 1, 0, 8\)"),
    "no v": (lambda p: _captured(p, {"q": (1, 1, 24, 8), "k": (1, 1, 24, 8)}), r"tensors q, k, v expected"),
    "integer tensors": (lambda p: _captured(p, {n: (1, 1, 24, 8) for n in "qkv"}, dtype=torch.int32),
                        "q must be a floating tensor"),
    "a file cut short": (_truncated, r"is stored as bytes"),
    "offsets past the end of the file": (_lying_header, r"is stored as bytes 0-1000000000000"),
}


@pytest.mark.parametrize("kind", NOT_CAPTURES)
def test_a_file_that_is_not_a_capture_is_one_error_naming_it_from_its_header(tmp_path, kind):
    make, expected = NOT_CAPTURES[kind]
    path = make(tmp_path / "qkv.safetensors")
    for read in (workloads.read_header, workloads.load_captured):
        with pytest.raises(ValueError, match=rf"^{path}.*{expected}"):
            read(path)


def test_a_sweep_naming_a_capture_that_is_not_one_is_refused_in_one_line(tmp_path):
    from orchestrator import config

    path = _captured(tmp_path / "qkv.safetensors", {n: (1, 1, 0, 8) for n in "qkv"}, {**META, "grid": "0,1,1"})
    conf = tmp_path / "conf" / "workload"
    conf.mkdir(parents=True)
    (conf / "mine.yaml").write_text(f"name: mine\ncaptured: {path}\n")
    with pytest.raises(config.ConfigError, match=r"^conf/workload/mine.yaml: captured=.*q has an empty axis"):
        config.load(["~sweep", "grid.workload=[mine]", "grid.seq_k=[1]", f"conf_dirs=[{tmp_path / 'conf'}]"])
