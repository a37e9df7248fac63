"""How a cell's launch is measured, one module per way, keyed by name (a sweep's ``grid.measure``).

    timed       CUDA events on a GPU (L2 flushed between repetitions), the wall clock on a CPU: medians and IQRs
    simulated   the L2/HBM simulator's prediction (``wavealign.sim``) of the backend's launch on the cell's GPU,
                from a CPU worker: no GPU needed, no Q/K/V built
    ncu         timed, then one launch per cell profiled by Nsight Compute (``wavealign.instruments.ncu``)

A sweep cell names its measurer (``grid.measure``); the pipeline prepares the cell's attention step on the group's
inputs and hands it over as a ``Measurement``, whose ``result`` the measurer fills. What a measurer is lives in its
entry: whether its cells need Q/K/V, whether it models a GPU from a CPU worker (``wavealign.placement`` places it),
whether its figures are predictions (recorded ``simulated``), its parameters (``grid.measure_params``), and how many
times it runs a cell's launch (``runs``: what scheduling a cell costs). Adding one is
a module that calls ``register``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import torch

from wavealign.attention import AttentionStep, Prepared
from wavealign.kernels import LaunchShape
from wavealign.records import Cell, CellResult, MeasurerSpec
from wavealign.registry import Registry, resolve_params


@dataclass
class Measurement:
    """One cell's attention step, prepared on its group's inputs, to be measured: ``result`` is filled in place."""

    cell: Cell
    step: AttentionStep
    prepared: Prepared
    qkv: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None
    shape: LaunchShape
    device: torch.device
    result: CellResult
    # the launch's run on the cell's Q/K/V, kept by a measurer that times the group's cells together (``timed`` on a
    # CPU: in turns) until its ``after_group``
    call: Callable[[], object] | None = None


@dataclass(frozen=True)
class Measurer:
    """A way of measuring: ``measure(measurement)`` fills the result's figures, and, once a group's cells are all
    measured, ``after_group(measurements)`` (the done ones of this measurer) may add to them."""

    name: str
    measure: Callable[[Measurement], None]
    description: str
    params: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    checks: Mapping[str, Callable[[str, Any], Any]] = field(default_factory=lambda: MappingProxyType({}))
    needs_qkv: bool = True  # its cells' inputs hold Q/K/V, not the mask alone
    models_gpu: bool = False  # it predicts the cell's GPU from a CPU worker instead of running there
    predicted: bool = False  # its figures are a model's prediction (CellResult.simulated), not a measurement
    alone_on_gpu: bool = False  # its group wants the GPU to itself: no next inputs built beside it
    after_group: Callable[[list[Measurement]], None] | None = None
    # how many times measuring a cell runs (or models) its launch: the multiplier of the cell's scheduling cost
    # (the dispatcher's order, the dry run's time estimate)
    runs: Callable[[MeasurerSpec], int] = lambda spec: 1
    # the types of params whose default says none (``registry.param_types``)
    types: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def resolve(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The defaults overridden by ``params`` (a cell's ``measure_params``), each checked."""
        return resolve_params(f"measurer {self.name!r}", self.params, self.checks, params)


REGISTRY: Registry[Measurer] = Registry("measurer", __name__)


def register(measurer: Measurer) -> Measurer:
    """File a measurer under its name; called once by its own module."""
    if missing := sorted(set(measurer.params) - set(measurer.checks)):
        raise ValueError(f"measurer {measurer.name!r} gives no check for parameter(s) {missing}")
    frozen = MappingProxyType(dict(measurer.params)), MappingProxyType(dict(measurer.checks))
    object.__setattr__(measurer, "params", frozen[0])
    object.__setattr__(measurer, "checks", frozen[1])
    return REGISTRY.register(measurer.name)(measurer)


def get(name: str) -> Measurer:
    """The measurer called ``name``; a ValueError lists the known names otherwise."""
    return REGISTRY.get(name)


def names() -> list[str]:
    """Every registered measurer, sorted."""
    return REGISTRY.names()
