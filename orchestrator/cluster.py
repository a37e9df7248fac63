"""Ray: see which GPU types the cluster has (``orchestrator.join`` connects to it), and keep
one long-lived worker actor per GPU (holding it exclusively, so two cells never time on one GPU at once
and compiled kernels stay warm), one CPU actor for the cells timed on a CPU, and a pool of CPU actors for simulated
cells (``wavealign.placement.pool``).

GPU types are matched by Ray's node label ``ray.io/accelerator-type``, which Ray sets from the device name
(A40, H100, H200, ...), or, for a node Ray does not label, by ``accelerator-type`` set by hand with
``ray start --labels accelerator-type=H100`` (Ray reserves the ``ray.io/`` prefix for itself).
"""

from __future__ import annotations

import itertools
import os
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import ray

from wavealign import hardware as hardware_registry
from wavealign.placement import CPU_POOLS
from wavealign.records import Cell

ACCELERATOR_LABEL = "ray.io/accelerator-type"
USER_ACCELERATOR_LABEL = "accelerator-type"
LABEL_KEYS = (ACCELERATOR_LABEL, USER_ACCELERATOR_LABEL)  # Ray's label wins where a node has both


@dataclass(frozen=True)
class Inventory:
    """What the cluster offers: GPUs per accelerator type and CPUs, over its alive nodes."""

    gpus_by_label: dict[tuple[str, str], int]  # (label key, accelerator type) -> GPUs
    untyped_gpus: int
    cpus: int
    nodes: int

    @property
    def gpus_by_type(self) -> dict[str, int]:
        out: Counter = Counter()
        for (_, kind), count in self.gpus_by_label.items():
            out[kind] += count
        return dict(out)

    def gpus_for(self, hardware: str) -> int:
        return self.gpus_by_type.get(hardware_registry.get(hardware).ray_accelerator_type, 0)

    def selectors_for(self, hardware: str) -> list[tuple[dict[str, str], int]]:
        """Label selectors reaching every GPU of ``hardware``'s type, with the GPUs each reaches."""
        accel = hardware_registry.get(hardware).ray_accelerator_type
        return [({key: kind}, count) for (key, kind), count in sorted(self.gpus_by_label.items())
                if kind == accel and count]


def inventory() -> Inventory:
    gpus: Counter = Counter()
    untyped, cpus, nodes = 0, 0, 0
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        nodes += 1
        resources, labels = node.get("Resources", {}), node.get("Labels") or {}
        cpus += int(resources.get("CPU", 0))
        count = int(resources.get("GPU", 0))
        key = next((k for k in LABEL_KEYS if labels.get(k)), None)
        if key:
            gpus[(key, labels[key])] += count
        else:
            untyped += count
    return Inventory(gpus_by_label=dict(gpus), untyped_gpus=untyped, cpus=cpus, nodes=nodes)


class CellRunner:
    """Runs cell groups one at a time with ``wavealign.pipeline.run_group``; lives as long as the sweep, and so does
    its ``InputCache`` (the inputs it keeps for its next group, and the ones it prefetches). A plain class, so that
    tests can subclass it (e.g. to inject a worker death)."""

    def __init__(self, name: str = "wavealign worker") -> None:
        from wavealign.inputs import InputCache

        self.name = name
        self.inputs = InputCache()

    def __repr__(self) -> str:  # Ray's dashboard ("Repr") and its log prefix name the actor by it
        return self.name

    def where(self) -> dict[str, Any]:
        ctx = ray.get_runtime_context()
        return {"ray_node_id": ctx.get_node_id(), "worker_pid": os.getpid()}

    def run(self, cells: list[Cell], then: list[Cell] | None = None) -> list[dict[str, Any]]:
        """Run ``cells``; ``then`` (``ray.prefetch_inputs``), the group this worker is handed next, has its inputs
        built in the background meanwhile. A worker Ray restarted after a death prefetches no more: a retried call
        would otherwise start the same build again, and a build that kills the process would fail ``cells``."""
        from wavealign import pipeline

        if ray.get_runtime_context().was_current_actor_reconstructed:
            then = None
        started = time.time()
        results = pipeline.run_group(cells, then, self.inputs)
        finished = time.time()
        where = self.where()
        return [{"result": r, "started_at": started, "finished_at": finished, **where} for r in results]


CellWorker = ray.remote(CellRunner)
# numbers the workers this process starts: a Ray actor's name is unique in its namespace (this driver's), and a
# killed worker's name is released only once Ray has it dead
_WORKER_NUMBERS = itertools.count()


def start_workers(hardware: str, count: int, max_retries: int, inv: Inventory, sweep: str = "wavealign") -> list[Any]:
    """Up to ``count`` actors for ``hardware``: one whole GPU of that type each (never more than the
    cluster has), or one CPU each for the CPU pools (``cpu``, ``simulator``). Each is named (Ray's actor name and
    its repr) after the ``sweep`` and its placement: ``wavealign smoke 0123abcd cpu worker 0``, not ``CellRunner``."""
    # a dead worker is always restarted (max_restarts is a lifetime count: a long sweep would otherwise lose
    # the type's only worker after a few deaths); each group is retried at most max_retries times
    restart = {"max_restarts": -1, "max_task_retries": max_retries}

    def named(**options: Any) -> Any:
        name = f"{sweep} {hardware} worker {next(_WORKER_NUMBERS)}"
        return CellWorker.options(name=name, **options, **restart).remote(name)

    if hardware in CPU_POOLS:
        return [named(num_cpus=1) for _ in range(count)]
    workers: list[Any] = []
    for selector, gpus in inv.selectors_for(hardware):
        take = min(gpus, count - len(workers))
        workers += [named(num_cpus=1, num_gpus=1, label_selector=selector) for _ in range(take)]
    return workers
