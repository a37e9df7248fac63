"""Whether a workload's description can be drawn: a model preset with its heads, layer and denoising step, a
captured file with its heads, or a bare shape. The sweep's ``conf/workload/<name>.yaml`` entries are held to it
when a config loads, each refusal naming the field, its value and what was expected."""

from __future__ import annotations

from collections.abc import Sequence

from wavealign.workloads.captured import read_header
from wavealign.workloads.generators import generator, generator_names
from wavealign.workloads.presets import MODELS, models


def check_workload(model: str | None, captured: str | None, generator_name: str | None, heads: Sequence[int],
                   layer: int, step: int) -> None:
    """A ValueError naming the first field that does not fit the others (the heads and layer of ``model``, the
    heads of the ``captured`` file, a ``generator`` only for a model preset, the ``step`` among its steps)."""
    if generator_name is not None and (model is None or captured is not None):
        raise ValueError(f"generator={generator_name!r} without a model preset; expected a model (a captured file or "
                         "a bare shape draws no synthetic Q/K/V)")
    if generator_name is not None and generator_name not in generator_names():
        raise ValueError(f"generator={generator_name!r}; expected one of {generator_names()}")
    if captured is not None:
        try:
            header = read_header(captured)
        except ValueError as exc:
            raise ValueError(f"captured={captured!r}: {exc}") from None
        if model is not None:
            raise ValueError(f"model={model!r} with captured; expected no model (the file names it: {header.model!r})")
        if len(heads) == 0 or min(heads) < 0 or max(heads) >= header.shape[1]:
            raise ValueError(f"heads {list(heads)}; expected indices in [0, {header.shape[1]}) of {captured}")
        return
    if model is not None:
        if model not in models():
            raise ValueError(f"model {model!r}; expected one of {models()}")
        if len(heads) == 0 or min(heads) < 0 or max(heads) >= MODELS[model].heads:
            raise ValueError(f"heads {list(heads)}; expected indices in [0, {MODELS[model].heads}) of {model}")
        if layer >= MODELS[model].layers:
            raise ValueError(f"layer={layer}; expected < {MODELS[model].layers}, the layers of {model}")
    steps = generator(generator_name).num_steps
    if not 0 <= step < steps:
        raise ValueError(f"step={step}; expected a denoising step in [0, {steps})")
