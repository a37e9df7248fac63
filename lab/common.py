"""What the lab's studies share: their entry point (``run_study``: a study's mistake is one stderr line and exit 2, as a
``wavealign`` command's is), their argument parser (``argument_parser``: the command line's convention,
``jobs.arguments``, under the script's own name), their CSV records (``write_csv``), and calibrate-workload's
head-by-head masks under candidate generator configs (``head_masks``: configs no sweep cell can name, built by
``masks.build_for_heads`` as a sweep cell builds them)."""

from __future__ import annotations

import csv
import dataclasses
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.arguments import Parser

if TYPE_CHECKING:  # torch loads where a mask is built: a study's --help and its mistakes answer without it
    import torch

    from wavealign import workloads
    from wavealign.workloads import HeadTypesConfig

EXIT_BAD_INPUT = 2


def argument_parser(script: str, doc: str | None) -> Parser:
    """The argument parser of ``lab/<script>.py`` (its mistakes are ``UsageError``s, its usage names the script)."""
    made = Parser(script, doc)
    made.prog = f"python lab/{script}.py"
    return made


def run_study(script: str, main: Callable[[list[str]], int], argv: list[str] | None = None) -> int:
    """``main(argv)`` (default: the process's arguments); a ``ValueError`` (bad input) is one stderr line
    ``lab/<script>.py: <message>`` and exit 2 (``WAVEALIGN_TRACEBACK=1`` raises it instead, to show where)."""
    try:
        return int(main(sys.argv[1:] if argv is None else argv) or 0)
    except ValueError as exc:
        if os.environ.get("WAVEALIGN_TRACEBACK"):
            raise
        print(f"lab/{script}.py: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_BAD_INPUT


def write_csv(path: Path, record_type: type, rows: list[Any]) -> Path:
    """Write ``rows`` (instances of the dataclass ``record_type``) to ``path``, one column per field in field order;
    an empty list still gets the header."""
    with Path(path).open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[field.name for field in dataclasses.fields(record_type)])
        writer.writeheader()
        writer.writerows(dataclasses.asdict(r) for r in rows)
    return Path(path)


def device_for(name: str | None) -> torch.device:
    """``--device``, or CUDA when present; asking for CUDA without it is an error naming the argument."""
    import torch

    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    chosen = torch.device(name)
    if chosen.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {name} asked for CUDA, but torch {torch.__version__} sees no CUDA device")
    return chosen


def sync(on: torch.device) -> None:
    import torch

    if on.type == "cuda":
        torch.cuda.synchronize(on)


def head_masks(wl: workloads.Workload, heads: list[int] | None, methods: list[str], *, layer: int, step: int,
               seed: int, block_size: int, device: torch.device, config: HeadTypesConfig | None = None,
               overrides: dict[str, dict[str, Any]] | None = None,
               ) -> Iterator[tuple[workloads.HeadSpec, str, torch.Tensor, float]]:
    """Yield ``(spec, method, mask (MB, NB), build_ms)`` head by head (``heads`` None: all): the masks a sweep
    cell of these heads builds, one head's Q/K/V in memory at a time. ``config`` is the generator (default:
    the calibrated cluster one); ``overrides`` change a method's params."""
    from wavealign import masks, workloads

    overrides = overrides or {}
    for spec, q, k, v in workloads.iter_heads(wl, heads, layer=layer, step=step, seed=seed, device=device,
                                              config=config):
        for method in methods:
            sync(device)
            start = time.perf_counter()
            try:
                mask = masks.build_for_heads(method, q, k, v, block_size, model=wl.model, layer=layer,
                                             heads=[spec.head], **overrides.get(method, {})).mask
            except (RuntimeError, ValueError) as err:
                raise RuntimeError(f"{method} failed on head {spec.head} ({spec.head_type}) of {wl.model} at "
                                   f"{wl.seq_len} tokens on {device}: {err}") from err
            sync(device)
            yield spec, method, mask[0, 0], (time.perf_counter() - start) * 1e3
        del q, k, v
