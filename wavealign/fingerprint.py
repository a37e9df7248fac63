"""A fingerprint of the library's code, part of every cell and sweep id: a resumed sweep re-measures the cells
whose code changed, instead of keeping rows measured by older kernels or reorder code.

It hashes every ``.py`` file under ``wavealign/`` (kernels, reorder, masks, pipeline, ...), with comments,
blank lines and trailing spaces dropped, so editing comments does not invalidate results but any statement or
docstring change does. Text, not an AST dump, so the same code hashes alike on every Python version. The
``.yaml`` data the code runs on (the calibrated workload generator, skip profiles) is hashed the same way.
The sweep's configs, which a wheel installs as ``wavealign/conf`` (``CONFIGS``), are not the library and are left out,
so a wheel and a checkout of the same code give the same fingerprint. The user's installed files
(``wavealign.user_config``: fitted skip profiles and workload generators, read before the packaged ones) change what
the library does too, so where there are any their digest is part of the fingerprint.
"""

from __future__ import annotations

import functools
import hashlib
import io
import tokenize
from pathlib import Path

import wavealign
from wavealign import user_config

PACKAGE_DIR = Path(wavealign.__file__).resolve().parent
CONFIGS = "conf"  # the folder of the sweep's configs inside an installed wheel's package (pyproject.toml's package-dir)


def _normalized(source: str) -> str:
    """``source`` without comments, trailing spaces and blank lines."""
    lines = source.splitlines()
    comments = [t.start for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type == tokenize.COMMENT]
    for row, col in reversed(comments):
        lines[row - 1] = lines[row - 1][:col]
    return "\n".join(line.rstrip() for line in lines if line.strip())


def _yaml_normalized(text: str) -> str:
    """YAML without whole-line comments, trailing spaces and blank lines."""
    return "\n".join(line.rstrip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#"))


def source_digest(root: Path = PACKAGE_DIR, suffixes: tuple[str, ...] = (".py", ".yaml")) -> str:
    """12 hex digits of sha256 over the normalized ``.py`` and ``.yaml`` files under ``root``, by relative path."""
    digest = hashlib.sha256()
    paths = [p for suffix in suffixes for p in root.rglob(f"*{suffix}")]
    for path in sorted(paths, key=lambda p: p.relative_to(root).as_posix()):
        parts = path.relative_to(root).parts
        if "__pycache__" in parts or parts[0] == CONFIGS:
            continue
        if not path.is_file():  # a FIFO, socket or device named *.yaml: reading it would wait forever (a FIFO)
            continue
        text = path.read_text(encoding="utf-8")
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update((_normalized(text) if path.suffix == ".py" else _yaml_normalized(text)).encode() + b"\0")
    return digest.hexdigest()[:12]


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """``<package version>+<source digest>``, e.g. ``0.1.0+3f2a9c1d0b7e``, then ``.user<digest>`` where the user has
    installed profiles or workload generators (``wavealign.user_config``)."""
    installed = [d for d in (user_config.profiles_dir(), user_config.workloads_dir())
                 if any(p.is_file() for p in d.glob("*.yaml"))]
    user = "".join(source_digest(d, (".yaml",)) for d in installed)
    return f"{wavealign.__version__}+{source_digest()}" + (f".user{user}" if user else "")
