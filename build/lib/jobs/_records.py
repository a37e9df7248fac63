"""Writing a job's result records (dataclass rows) as a CSV file: one column per field, in field order."""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path
from typing import Any


def write_csv(path: Path, record_type: type, rows: list[Any]) -> Path:
    """Write ``rows`` (instances of the dataclass ``record_type``) to ``path``; an empty list still gets the header."""
    with Path(path).open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[field.name for field in dataclasses.fields(record_type)])
        writer.writeheader()
        writer.writerows(dataclasses.asdict(r) for r in rows)
    return Path(path)
