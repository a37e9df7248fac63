"""Argument checks the benchmark commands share, run before any work: a bad value stops with argparse's usage error
naming the flag, the value and what was expected."""

from __future__ import annotations

import argparse

import torch


def check_device(parser: argparse.ArgumentParser, flag: str, value: str) -> torch.device:
    """``value`` as a torch device this machine has, else ``parser.error``."""
    try:
        device = torch.device(value)
    except RuntimeError:
        parser.error(f"{flag} {value!r}: expected a torch device such as cpu, cuda or cuda:1")
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"{flag} {value!r}: this machine has no CUDA GPU (torch {torch.__version__}); use {flag} cpu")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        parser.error(f"{flag} {value!r}: this machine has {torch.cuda.device_count()} CUDA GPU(s)")
    return device


def check_at_least(parser: argparse.ArgumentParser, flag: str, value: int, least: int) -> None:
    if value < least:
        parser.error(f"{flag} must be >= {least}, got {value}")


def choices_list(parser: argparse.ArgumentParser, flag: str, value: str, choices: tuple[str, ...]) -> list[str]:
    """A comma-separated ``value`` of names from ``choices``, else ``parser.error`` naming the ones that are not."""
    names = value.split(",")
    if bad := [name for name in names if name not in choices]:
        parser.error(f"{flag}: {bad} not in {choices}")
    return names
