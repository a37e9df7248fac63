"""The Ray part of a sweep: group the pending cells per placement, start one worker pool per GPU type (and
CPU workers), and keep every worker busy with one group at a time, recording each group as it finishes.

Cells for GPU types the cluster lacks are recorded ``unschedulable`` (or wait, with
``ray.wait_for_nodes=true``); a cell that raises is recorded ``failed`` with its traceback; a worker that
dies is restarted and its cells retried ``ray.max_retries`` times, after which they are ``failed`` and the
restarted worker takes the next group. A worker not up within ``ray.worker_start_timeout_s`` is dropped (the
cells of a type left with none are ``failed``).
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from typing import Any

from omegaconf import DictConfig
from rich.console import Console

from orchestrator import stop
from orchestrator.progress import SweepProgress
from orchestrator.record import Recorder
from wavealign import measurers, metrics, variants
from wavealign.pipeline import inputs_key
from wavealign.placement import CPU_POOLS, POOL_WORKERS, WAITS_FOR, pool
from wavealign.records import Cell


def sweep_label(name: str, sweep_id: str) -> str:
    """How Ray's dashboard and ``ray list`` show a sweep's job, worker actors and group tasks."""
    return f"wavealign {name} {sweep_id}"


def queues(cells: list[Cell], grid_cells: list[Cell]) -> tuple[dict[str, deque[list[Cell]]], set[str]]:
    """Pending cells grouped per placement, and the ids of baselines added to them.

    A group resumed without its ``original`` cell (done earlier) gets that cell back as a baseline that runs
    but is not recorded again, so every speedup still comes from cells timed back to back. Groups on the same
    inputs (other backends on one mask) form a block queued one after another, in their order in ``cells``, so a
    worker builds the mask and Q/K/V once for them (``inputs.InputCache``). Blocks are queued longest first
    (``predicted_cost``, ties in the order of their first group): with several workers the last groups handed out
    are the short ones, so the sweep does not end waiting on one worker's long group.
    """
    groups: dict[str, list[Cell]] = {}
    for cell in cells:
        groups.setdefault(cell.group_id, []).append(cell)
    originals = {c.group_id: c for c in grid_cells if variants.of_spec(c.attention).is_baseline}
    baselines: set[str] = set()
    blocks: dict[str, list[list[Cell]]] = {}  # inputs_key -> its groups, in the order of ``cells``
    for group_id, group in groups.items():
        original = originals.get(group_id)
        if original is not None and all(not variants.of_spec(c.attention).is_baseline for c in group):
            group.insert(0, original)
            baselines.add(original.cell_id)
        blocks.setdefault(inputs_key(group[0]), []).append(group)
    queues: dict[str, deque[list[Cell]]] = {}
    for block in sorted(blocks.values(), key=lambda b: -sum(predicted_cost(g) for g in b)):  # stable: ties keep order
        for group in block:
            queues.setdefault(pool(group[0]), deque()).append(group)
    return queues, baselines


def predicted_cost(group: list[Cell]) -> float:
    """A group's GPU time before it runs, up to a constant: per cell, the launches its measurer runs (its ``runs``
    hook) x dense attention's FLOPs at its shape (``metrics.attention_flops``). The mask's density is unknown until
    the worker builds it, so a sparse group counts as a dense one of its shape; mask building, reorder and launch
    planning are left out."""
    return float(sum(measurers.get(c.measurer.measure).runs(c.measurer) * _dense_flops(c) for c in group))


def _dense_flops(cell: Cell) -> float:
    spec = cell.inputs
    return metrics.attention_flops(spec.seq_len_tokens, spec.seq_len_tokens, spec.head_dim, spec.num_heads)


def start_pools(cfg: DictConfig, queues: dict[str, deque[list[Cell]]], recorder: Recorder,
                progress: SweepProgress, console: Console, sweep: str = "wavealign") -> dict[str, list[Any]]:
    """One actor per GPU of each needed type (cells of absent types become unschedulable), then the CPU pools' actors
    on the CPUs the GPU actors leave: one for the cells timed on a CPU (``POOL_WORKERS``), so that no two time on one
    machine at once; as many as the CPUs left allow for simulated cells. Each actor is named after the ``sweep``
    (``sweep_label``) and its placement."""
    from orchestrator import cluster

    inv = cluster.inventory()
    deadline = time.monotonic() + cfg.ray.wait_timeout_s
    missing = [hw for hw in queues if hw not in CPU_POOLS and inv.gpus_for(hw) == 0]
    while missing and cfg.ray.wait_for_nodes and time.monotonic() < deadline:
        console.print(f"waiting for nodes with GPU types {missing} (ray.wait_for_nodes=true)")
        time.sleep(5.0)
        inv = cluster.inventory()
        missing = [hw for hw in queues if hw not in CPU_POOLS and inv.gpus_for(hw) == 0]
    workers: dict[str, list[Any]] = {}
    for hw in list(queues):
        if hw in CPU_POOLS:
            continue
        if hw in missing:
            reason = (f"no alive Ray node has a GPU labelled {' or '.join(cluster.LABEL_KEYS)}="
                      f"{cluster.hardware_registry.get(hw).ray_accelerator_type} (cluster GPUs by type: "
                      f"{inv.gpus_by_type or 'none'}, unlabelled: {inv.untyped_gpus})")
            for group in queues.pop(hw):
                for cell in group:
                    recorder.add(cell, None, status="unschedulable", error=reason)
                progress.add(hw, unschedulable=len(recorder.recordable(group)))
            continue
        workers[hw] = cluster.start_workers(hw, len(queues[hw]), cfg.ray.max_retries, inv, sweep)
    for key in (k for k in CPU_POOLS if k in queues):
        spare = inv.cpus - sum(len(ws) for ws in workers.values())
        count = max(1, min(spare, len(queues[key]), POOL_WORKERS.get(key, spare)))
        workers[key] = cluster.start_workers(key, count, cfg.ray.max_retries, inv, sweep)
    return workers


def await_workers(workers: dict[str, list[Any]], timeout_s: float,
                  console: Console) -> tuple[dict[str, list[Any]], dict[str, list[dict[str, Any]]]]:
    """The workers that answer ``where`` within ``timeout_s``, per placement (one left with none is left out),
    and their answers. The others are killed: a worker Ray cannot place would hold the sweep forever."""
    import ray

    calls = [(key, worker, worker.where.remote()) for key, ws in workers.items() for worker in ws]
    ready = set(ray.wait([ref for _, _, ref in calls], num_returns=len(calls), timeout=timeout_s)[0])
    up: dict[str, list[Any]] = {}
    where: dict[str, list[dict[str, Any]]] = {}
    for key, worker, ref in calls:
        try:
            answer = ray.get(ref) if ref in ready else None
        except ray.exceptions.RayError as exc:
            answer = None
            console.print(f"[yellow]a {key} worker failed to start: {exc}[/yellow]")
        if answer is None:
            ray.kill(worker)
        else:
            up.setdefault(key, []).append(worker)
            where.setdefault(key, []).append(answer)
    for key, ws in workers.items():
        if len(up.get(key, [])) < len(ws):
            console.print(f"[yellow]{len(ws) - len(up.get(key, []))} of {len(ws)} {key} workers not up within "
                          f"ray.worker_start_timeout_s={timeout_s:g}; going on without them[/yellow]")
    return up, where


def fail_unstarted(queues: dict[str, deque[list[Cell]]], workers: dict[str, list[Any]], recorder: Recorder,
                   progress: SweepProgress, timeout_s: float) -> None:
    """Record ``failed`` the queued cells of each placement left with no worker after start-up."""
    for key in [k for k in queues if k not in workers]:
        _fail_all(queues.pop(key), recorder, progress, key,
                  f"no {key} worker started within ray.worker_start_timeout_s={timeout_s:g} (Ray could not place "
                  f"one: its GPUs held by other work or its nodes gone; or it failed to start)")


def dispatch(queues: dict[str, deque[list[Cell]]], workers: dict[str, list[Any]], recorder: Recorder,
             progress: SweepProgress, probe_timeout_s: float, console: Console, prefetch: bool = False,
             sweep: str = "wavealign") -> bool:
    """Keep every worker busy with one group at a time until the queues drain; True if interrupted. Each group's Ray
    task is named after the ``sweep`` and the group (``wavealign smoke 0123abcd group 89ab...``).

    A worker that died on a group (Ray's retries spent) is asked ``where`` once: Ray restarts it, and it takes
    the next group if it answers within ``probe_timeout_s``; otherwise it is dropped.

    With ``prefetch`` (``ray.prefetch_inputs``), once no worker of a placement is left idle, each worker just handed
    a group is also handed, in the same call, the group it would take next (``reserve_next``: only when that one
    is on other inputs), kept for it, whose inputs it builds while the current one is timed (``CellRunner.run``).
    Not beside a group whose measurer wants the GPU to itself (``ncu``). A worker left idle with its queue empty
    takes a group kept for a busy one (``take``), and a worker dropped gives its kept group back to the queue.
    """
    import ray

    idle = {k: list(ws) for k, ws in workers.items()}
    holds: dict[int, str] = {}  # id(worker) -> inputs_key of its latest group (the inputs it keeps)
    reserved: dict[int, tuple[str, list[Cell]]] = {}  # id(worker) -> (placement, the group it prefetches)
    inflight: dict[Any, tuple[str, Any, list[Cell]]] = {}
    probes: dict[Any, tuple[str, Any, float]] = {}  # where() of a worker that died -> placement, worker, deadline
    try:
        while any(queues.values()) or inflight or reserved:
            if stop.requested:  # its KeyboardInterrupt may have been swallowed on the way (``stop``)
                return True
            for key, queue in queues.items():
                started = []
                while idle[key] and not _waiting(key, queues, inflight):
                    index = next((i for i, a in enumerate(idle[key]) if id(a) in reserved), len(idle[key]) - 1)
                    actor = idle[key][index]
                    group = take(key, queue, id(actor), holds, reserved)
                    if group is None:
                        break
                    del idle[key][index]
                    holds[id(actor)] = inputs_key(group[0])
                    started.append((actor, group))
                for actor, group in started:
                    upcoming = None
                    alone = any(measurers.get(c.measurer.measure).alone_on_gpu for c in group)
                    if prefetch and not idle[key] and not alone:
                        upcoming = reserve_next(queue, holds[id(actor)])
                    if upcoming is not None:
                        reserved[id(actor)] = (key, upcoming)
                    call = actor.run.options(name=f"{sweep} group {group[0].group_id}")
                    inflight[call.remote(group, upcoming)] = (key, actor, group)
                    progress.add(key, running=len(recorder.recordable(group)))
                coming = any(k == key for k, _, _ in (*inflight.values(), *probes.values()))
                if queue and not idle[key] and not coming:
                    _fail_all(queue, recorder, progress, key, "every worker of this type died")
            if not inflight and not probes:
                continue
            waiting = [*inflight, *probes]
            ready, _ = ray.wait(waiting, num_returns=len(waiting), timeout=0)  # all that are done by now
            if not ready:
                ready, _ = ray.wait(waiting, num_returns=1, timeout=1.0)
            for ref in ready:
                if ref in probes:
                    key, actor, _ = probes.pop(ref)
                    if not _readmit(ref, actor, key, idle, console):
                        _give_back(actor, reserved, queues)
                    continue
                key, actor, group = inflight.pop(ref)
                progress.add(key, running=-len(recorder.recordable(group)))
                if _collect(ref, actor, group, key, idle, recorder, progress):
                    probes[actor.where.remote()] = (key, actor, time.monotonic() + probe_timeout_s)
            # the groups that finished reach Parquet before the next wait, in one write: a killed driver loses none,
            # and with many workers the cost of a write is shared by the groups that finished meanwhile
            recorder.flush()
            for actor in _drop_expired(probes, probe_timeout_s, console):
                _give_back(actor, reserved, queues)
    except KeyboardInterrupt:
        return True
    return False


def _waiting(key: str, queues: dict[str, deque[list[Cell]]], inflight: dict[Any, tuple[str, Any, list[Cell]]]) -> bool:
    """Whether placement ``key`` holds its next group back: the pools it waits for (``placement.WAITS_FOR``: the cells
    timed on a CPU wait for the simulator's) still have groups queued or running."""
    running = {placement for placement, _, _ in inflight.values()}
    return any(queues.get(other) or other in running for other in WAITS_FOR.get(key, ()))


def take(key: str, queue: deque[list[Cell]], worker: int, holds: dict[int, str],
         reserved: dict[int, tuple[str, list[Cell]]]) -> list[Cell] | None:
    """The group an idle worker (``id`` ``worker``) of placement ``key`` runs next, taken off the queue or the
    reservations: the one kept for it (whose inputs it prefetched); else ``next_group``; else, the queue being
    empty, one kept for a busy worker of its placement (which would otherwise run it after its current group while
    this one idles; its prefetch is lost); else None."""
    if worker in reserved:
        return reserved.pop(worker)[1]
    if queue:
        return next_group(queue, holds.get(worker))
    other = next((w for w, (k, _) in reserved.items() if k == key), None)
    return reserved.pop(other)[1] if other is not None else None


def reserve_next(queue: deque[list[Cell]], held: str, look_ahead: int = 64) -> list[Cell] | None:
    """The group a worker keeping the inputs ``held`` would take next (``next_group``), taken off the queue when
    it is on other inputs (to be prefetched and kept for that worker); None when the worker would reuse what it
    keeps, or the queue is empty."""
    if not queue or any(inputs_key(g[0]) == held for g in itertools.islice(queue, look_ahead)):
        return None
    return queue.popleft()


def _give_back(actor, reserved: dict[int, tuple[str, list[Cell]]], queues: dict[str, deque[list[Cell]]]) -> None:
    """Put the group kept for a dropped worker back at the head of its queue."""
    kept = reserved.pop(id(actor), None)
    if kept is not None:
        queues[kept[0]].appendleft(kept[1])


def next_group(queue: deque[list[Cell]], held: str | None, look_ahead: int = 64) -> list[Cell]:
    """The first group on the inputs ``held`` (the ones a worker keeps) among the next ``look_ahead`` queued, else
    the queue's head; taken off the queue."""
    for index, group in enumerate(itertools.islice(queue, look_ahead)):
        if held is not None and inputs_key(group[0]) == held:
            del queue[index]
            return group
    return queue.popleft()


def _collect(ref, actor, group: list[Cell], key: str, idle: dict[str, list[Any]], recorder: Recorder,
             progress: SweepProgress) -> bool:
    """Record ``group``'s results and return its worker to ``idle``; True if instead the worker died on it
    (Ray's ``ray.max_retries`` spent), to be probed before it takes another group."""
    import ray

    try:
        outputs = ray.get(ref)
    except ray.exceptions.RayError as exc:
        died = isinstance(exc, ray.exceptions.RayActorError)
        for cell in group:
            recorder.add(cell, None, status="failed",
                         error=f"worker died: {exc}" if died else f"{type(exc).__name__}: {exc}")
        progress.add(key, failed=len(recorder.recordable(group)))
        if not died:
            idle[key].append(actor)
        return died
    idle[key].append(actor)
    for cell, out in zip(group, outputs, strict=True):
        result = out.pop("result")
        if recorder.add(cell, result, **out) is not None:
            progress.add(key, **{"done" if result.status == "done" else "failed": 1})
    return False


def _readmit(ref, actor, key: str, idle: dict[str, list[Any]], console: Console) -> bool:
    """Return a worker that died to ``idle`` if its ``where`` answered (Ray restarted it); else drop it (False)."""
    import ray

    try:
        ray.get(ref)
    except ray.exceptions.RayError as exc:
        console.print(f"[yellow]dropped a {key} worker: it died and Ray cannot restart it ({exc})[/yellow]")
        return False
    idle[key].append(actor)
    return True


def _drop_expired(probes: dict[Any, tuple[str, Any, float]], timeout_s: float, console: Console) -> list[Any]:
    """Kill and forget the workers that died and are not back by their deadline (Ray cannot place them again);
    returns them."""
    import ray

    now = time.monotonic()
    dropped = []
    for ref, (key, actor, deadline) in list(probes.items()):
        if now > deadline:
            del probes[ref]
            ray.kill(actor)
            dropped.append(actor)
            console.print(f"[yellow]dropped a {key} worker: it died and was not back within "
                          f"ray.worker_start_timeout_s={timeout_s:g}[/yellow]")
    return dropped


def _fail_all(queue: deque[list[Cell]], recorder: Recorder, progress: SweepProgress, key: str, reason: str) -> None:
    while queue:
        group = queue.popleft()
        for cell in group:
            recorder.add(cell, None, status="failed", error=reason)
        progress.add(key, failed=len(recorder.recordable(group)))
