"""The command line's one convention for mistakes: a bad argument is a ``UsageError`` (or another ``ValueError``)
whose message names the argument, the value and what was expected; ``jobs.cli`` prints it as one line on
stderr and exits 2, before any work. Public: the commands of ``jobs`` and the studies of ``lab/`` share it.

One convention for arguments: every command's own options are flags (``--run-root DIR``, ``--dry-run``). The
commands that compose a sweep config (``sweep``, ``sync-mlflow``, ``refresh-profiles``, ``bench-kernels``) also take
Hydra overrides ``path=value`` as positional arguments: they are paths of the config (``run_root=DIR``,
``grid.seq_k=[148,364]``), not options (``Parser(config_paths=...)``). Given the other spelling, a command answers
with the one it takes (``--hardware h200`` for ``hardware=h200``, ``run_root=DIR`` for ``--run-root DIR``), never a
parser's error about the characters.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import difflib
import errno
import os
import shlex
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where a device is checked: --help and a typo answer without it
    import torch


class UsageError(ValueError):
    """A command line a command cannot run; the message names the argument, the value and what was expected."""


class Parser(argparse.ArgumentParser):
    """argparse for every command, whose errors are ``UsageError`` (one line, exit 2 from ``cli``) instead of
    argparse's usage block, and which hands a ``key=value`` argument back as the flag it meant
    (``run_root=DIR`` -> ``--run-root DIR``) and a mistyped flag as the nearest one. ``--help`` keeps the docstring's
    own line breaks.

    A command that composes a sweep config gives ``config_paths`` (the paths an override may set): it then takes
    ``path=value`` overrides as positional arguments (``overrides``) beside its flags; a flag it lacks is answered with
    the config path it most likely meant (``--run-root x`` -> ``run_root=x``), and an override of one of its own
    options with the flag (``hardware=h200`` -> ``--hardware h200``)."""

    def __init__(self, command: str, doc: str | None, config_paths: Callable[[], Sequence[str]] | None = None,
                 **kwargs) -> None:
        super().__init__(prog=f"wavealign {command}", description=doc, formatter_class=_HelpFormatter, **kwargs)
        self._argv: list[str] = []
        self._config_paths = config_paths
        if config_paths is not None:
            self.add_argument("overrides", nargs="*", metavar="PATH=VALUE",
                              help="Hydra overrides of the sweep config (conf/config.yaml), e.g. run_root=DIR "
                                   "grid.seq_k=[148,364] (a list is an axis; wavealign sweep --cfg job shows the keys)")

    def parse_args(self, args: Sequence[str] | None = None, namespace=None):  # type: ignore[override]
        self._argv = list(args or [])
        if self._config_paths is None:
            return super().parse_args(self._argv, namespace)
        respell_flags(self._argv, self._config_paths, self._flags())
        parsed = self.parse_intermixed_args(self._argv, namespace)
        for item in parsed.overrides:
            self._refuse_own_option(item)
        return parsed

    def error(self, message: str):  # type: ignore[override]
        raise UsageError(message + self._respelling())

    def _flags(self) -> list[str]:
        return [s for s in self._option_string_actions if s.startswith("-")]

    def _refuse_own_option(self, item: str) -> None:
        """An override whose key is (or is close to) one of this command's own options, not a config path."""
        key, sep, value = item.partition("=")
        if not sep or "." in key or key.lstrip("+~") in self._config_paths():  # type: ignore[misc]
            return
        flags = [f for f in self._flags() if f.startswith("--")]
        flag = "--" + key.replace("_", "-")
        if flag in flags:
            raise UsageError(f"{item}: {key} is an option of this command, not a sweep config path; use {flag} "
                             f"{shlex.quote(value)}")
        close = difflib.get_close_matches(flag, flags, n=1, cutoff=0.85)
        if close:
            raise UsageError(f"{item}: not a sweep config path; did you mean {close[0]} {shlex.quote(value)}?")

    def _respelling(self) -> str:
        flags = [s for s in self._option_string_actions if s.startswith("--")]
        for item in self._argv:
            key, sep, value = item.partition("=")
            if sep and not item.startswith("-"):
                flag = "--" + key.replace("_", "-").replace(".", "-")
                if flag in flags:
                    return f"; this command takes flags: {flag} {shlex.quote(value)}"
            elif item.startswith("--") and key not in flags:
                close = difflib.get_close_matches(key, flags, n=1, cutoff=0.75)
                if close:
                    return f"; did you mean {close[0]}?"
        return ""


def respell_flags(argv: Sequence[str], known: Callable[[], Sequence[str]],
                  own_flags: Sequence[str] = ("-h", "--help")) -> None:
    """For a command that composes a sweep config: a ``UsageError`` for the first flag-like item that is not one of
    its ``own_flags``, with the own flag it most likely meant, else the override (``--run-root x`` -> ``run_root=x``;
    ``--tracking-uri x`` -> ``mlflow.tracking_uri=x``, the nearest of the ``known()`` config paths)."""
    from orchestrator.config_errors import suggest

    for index, item in enumerate(argv):
        if not item.startswith("-") or item.split("=")[0] in own_flags:
            continue
        flag, sep, value = item.partition("=")
        close = difflib.get_close_matches(flag, [f for f in own_flags if f.startswith("--")], n=1, cutoff=0.75)
        if close:
            raise UsageError(f"{item}: not a flag of this command; did you mean {close[0]}?")
        following = argv[index + 1] if index + 1 < len(argv) else None
        if not sep and following is not None and not following.startswith("-") and "=" not in following:
            value, item = following, f"{item} {following}"
        key = flag.lstrip("-").replace("-", "_")
        keys = known()
        path = key if key in keys else suggest(key, keys) or key
        spelled = f"{path}={value}" if value else f"{path}=VALUE"
        raise UsageError(f"{item}: not a flag of this command; a sweep config path is given as path=value: expected "
                         f"{spelled}")


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The docstring's own line breaks; an argument's ``RegistryChoices`` left unread (argparse would list them in
    its help line whether the help names them or not)."""

    def _expand_help(self, action: argparse.Action) -> str:
        if isinstance(action.choices, RegistryChoices):
            action = copy.copy(action)
            action.choices = None
        return super()._expand_help(action)


class RegistryChoices:
    """A registry's names as argparse ``choices``, read when an argument is checked against them, so the registry's
    module (which may import torch) is imported for a value given, not for ``--help`` or another mistake. Give the
    argument a ``metavar``: argparse lists its choices in the usage line otherwise."""

    def __init__(self, names: Callable[[], Sequence[str]]) -> None:
        self._names = names

    def __contains__(self, item: object) -> bool:
        return item in self._names()

    def __iter__(self):
        return iter(self._names())


def _model_names() -> list[str]:
    from wavealign import workloads

    return workloads.models()


def _generator_names() -> list[str]:
    from wavealign import workloads

    return workloads.generator_names()


def add_generator_argument(parser: argparse.ArgumentParser) -> None:
    """--generator: a synthetic Q/K/V generator of ``wavealign.workloads`` (None: the library's default, as
    ``workloads.generator`` takes it)."""
    parser.add_argument("--generator", choices=RegistryChoices(_generator_names), metavar="GENERATOR",
                        help="the synthetic Q/K/V generator (default: the library's; a wrong one lists them)")


def add_workload_arguments(parser: argparse.ArgumentParser, device: bool = True) -> None:
    """--model, --frames, --resolution (default: the paper's Wan2.1-14B 401 frames at 720p = 363,600 tokens),
    --generator (None: the library's default, ``workloads.generator_name``), --seed, --block-size and (``device``)
    --device: the workload arguments lab/mask_fidelity.py and lab/calibrate_workload.py share."""
    parser.add_argument("--model", default="wan2.1-14b", choices=RegistryChoices(_model_names), metavar="MODEL",
                        help="a model preset of wavealign.workloads (default: %(default)s; a wrong one lists them)")
    parser.add_argument("--frames", type=int, default=401)
    parser.add_argument("--resolution", default="720p")
    add_generator_argument(parser)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--block-size", type=int, default=128)
    if device:
        parser.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda if present)")


def check_device(parser: argparse.ArgumentParser, flag: str, value: str) -> torch.device:
    """``value`` as a torch device this machine has, else ``parser.error``."""
    import torch

    try:
        device = torch.device(value)
    except RuntimeError:
        parser.error(f"{flag} {value!r}: expected a torch device such as cpu, cuda or cuda:1")
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"{flag} {value!r}: this machine has no CUDA GPU (torch {torch.__version__}); use {flag} cpu")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        parser.error(f"{flag} {value!r}: this machine has {torch.cuda.device_count()} CUDA GPU(s)")
    return device


def output_folder(flag: str, value: str | Path) -> Path:
    """``value`` as the folder a command writes its files into, made if missing and shown to take a file, before any
    work: an existing file, ``/dev/null`` or a folder under ``/proc`` is a ``UsageError`` naming ``flag``, not a
    traceback after the computation."""
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{flag} {str(path)!r} exists and is not a folder; expected a folder (made if missing)")
    _check_writable(flag, path, "a writable folder")
    return path


def output_file(flag: str, value: str | Path) -> Path:
    """``value`` as the file a command writes, checked before any work: not a folder, and its folder made if missing
    and shown to take a file (a path under ``/proc`` is refused here, not after the computation). A character
    device such as ``/dev/null`` is a file to write to, as a shell's redirection takes it."""
    path = Path(value)
    if path.is_dir():
        raise UsageError(f"{flag} {str(path)!r} is a folder; expected the path of a file to write")
    if not (path.exists() and not path.is_file()):  # a device or a pipe takes what is written as it is
        _check_writable(flag, path.parent, "a file in a writable folder")
    return path


def _check_writable(flag: str, folder: Path, expected: str) -> None:
    """``folder`` made if missing and a file made and removed in it; else a ``UsageError`` naming ``flag``."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise UsageError(f"{flag} {str(folder)!r}: cannot make it or write a file in it ({exc.strerror or exc}); "
                         f"expected {expected}") from None


def makeable_folder(argument: str, value: str) -> Path:
    """``value`` (given as ``argument``, e.g. ``run_root=DIR``) as a folder this process could make and write a file
    in, tried without leaving anything behind: the missing folders made, a file made and removed in the last, and
    the folders made removed again. A path no folder can be made at (a file on the way, ``/proc``, a read-only or
    foreign folder) is a ``UsageError`` naming the argument, before the command imports what its work needs."""
    folder = Path(value).absolute()
    missing = [p for p in (folder, *folder.parents) if not os.path.lexists(p)]
    made: list[Path] = []
    try:
        if os.path.lexists(folder) and not folder.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "a file of that name is in the way")
        for path in reversed(missing):
            path.mkdir()
            made.append(path)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise UsageError(f"{argument}: cannot make the folder {folder} or write a file in it "
                         f"({exc.strerror or exc}); expected a folder this user can make and write") from None
    finally:
        for path in reversed(made):
            with contextlib.suppress(OSError):
                path.rmdir()
    return folder


def check_at_least(parser: argparse.ArgumentParser, flag: str, value: int, least: int) -> None:
    if value < least:
        parser.error(f"{flag} must be >= {least}, got {value}")


def choices_list(parser: argparse.ArgumentParser, flag: str, value: str, choices: tuple[str, ...]) -> list[str]:
    """A comma-separated ``value`` of names from ``choices``, else ``parser.error`` naming the ones that are not."""
    names = value.split(",")
    if bad := [name for name in names if name not in choices]:
        parser.error(f"{flag}: {bad} not in {choices}")
    return names
