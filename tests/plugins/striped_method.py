"""A test-only plugin: mask method ``test-stripes`` with a parameter of its own, ``period`` (each query block keeps
every ``period``-th K/V block column), declared once here with its default and its check.

A sweep runs it as ``plugins=[striped_method]`` with this folder on ``PYTHONPATH``; ``tests/test_plugins.py`` shows
the parameter reaching the cells as an axis and the schema the registry derives from it refusing bad values.
"""

import torch

from wavealign import masks
from wavealign.blockmask import check_int


def stripes(heads: int, q_blocks: int, kv_blocks: int, *, period: int = 2, device="cpu") -> torch.Tensor:
    """(heads, q_blocks, kv_blocks): every query block keeps the K/V block columns 0, period, 2 * period, ..."""
    kept = torch.arange(kv_blocks, device=device) % period == 0
    return kept.expand(heads, q_blocks, kv_blocks).clone()


def check_period(name: str, value: object) -> int:
    """A period is a positive integer (1 keeps every column)."""
    return check_int(name, value, lo=1)


masks.register("test-stripes", None, {"period": 2}, "every period-th K/V block column (a plugin test)",
               from_shape=stripes, checks={"period": check_period})
