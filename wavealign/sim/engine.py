"""The simulator's inner loop: a CTA scheduler replaying K/V block reads through an LRU L2.

Compiled with numba, so one Wan2.1-14B 364K cell (~80M block reads) takes seconds, not hours. Time is
counted in *steps*: one step is the time an SM slot takes to process one K/V block, equal for every
slot, so a row of NNZ n holds its slot for n steps and slots run side by side step after step.

Two schedulers (``kernels.SCHEDULERS``): *streaming*, a free slot takes the next row of the launch queue (a grid of
one CTA per tile, dispatched as SMs free); *static-persistent*, slot s runs queue entries s, s + slots, s + 2 slots,
... one after another whatever their NNZ (FA4 4.0.0b36 ``flash_attn/cute/tile_scheduler.py``,
``StaticPersistentTileScheduler``: a grid of min(SMs, tiles) CTAs, each advancing its tile index by the grid size).
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np


@dataclass(frozen=True)
class Trace:
    """Counters of one replay, per head (attributed to the head whose row made the read)."""

    lookups: np.ndarray  # int64 (H,): L2 lookups of K/V blocks (a far-partition lookup counts too)
    hits: np.ndarray  # int64 (H,)
    hbm_blocks: np.ndarray  # int64 (H,): K/V blocks read from HBM
    row_start_step: np.ndarray  # int64 (H, MB), indexed by original query block
    row_finish_step: np.ndarray  # int64 (H, MB)
    row_slot: np.ndarray  # int64 (H, MB): the SM slot that ran the row
    makespan_steps: int


@numba.njit(cache=True, inline="always")
def _unlink(prev, nxt, lru_head, lru_tail, p, a):
    pa = prev[p, a]
    na = nxt[p, a]
    if pa >= 0:
        nxt[p, pa] = na
    else:
        lru_head[p] = na
    if na >= 0:
        prev[p, na] = pa
    else:
        lru_tail[p] = pa


@numba.njit(cache=True, inline="always")
def _push_front(prev, nxt, lru_head, lru_tail, p, a):
    prev[p, a] = -1
    nxt[p, a] = lru_head[p]
    if lru_head[p] >= 0:
        prev[p, lru_head[p]] = a
    else:
        lru_tail[p] = a
    lru_head[p] = a


@numba.njit(cache=True, inline="always")
def _lookup(present, prev, nxt, lru_head, lru_tail, size, capacity, p, a):
    """LRU lookup of block ``a`` in partition ``p``; inserts it on a miss. Returns True on a hit. Inlined into the
    replay's step loop (a call passing nine arrays costs more than the lookup)."""
    if present[p, a]:
        if lru_head[p] == a:  # already the most recent (slots in lock-step read one block in turn): nothing moves
            return True
        _unlink(prev, nxt, lru_head, lru_tail, p, a)
        _push_front(prev, nxt, lru_head, lru_tail, p, a)
        return True
    present[p, a] = True
    _push_front(prev, nxt, lru_head, lru_tail, p, a)
    size[p] += 1
    if size[p] > capacity:
        victim = lru_tail[p]
        _unlink(prev, nxt, lru_head, lru_tail, p, victim)
        present[p, victim] = False
        size[p] -= 1
    return False


@numba.njit(cache=True)
def _take_next_row(s, step, next_launch, stride, launch_head, launch_row, row_nnz, row_extra, reverse, nb,
                   slot_head, slot_row, slot_cursor, slot_left, slot_idle, row_start, row_finish, row_slot):
    """Free slot ``s`` takes the row at queue position ``next_launch`` at ``step``; the position after it is
    ``stride`` on (1: the streaming scheduler's shared queue; the slot count: a static-persistent slot's own
    entries). Rows with nothing to do start and finish at once and the slot takes the next one. Returns the new
    queue position (the slot stays free, ``slot_head[s] == -1``, once its queue is empty)."""
    slot_head[s] = -1
    while next_launch < launch_head.shape[0]:
        h = launch_head[next_launch]
        r = launch_row[next_launch]
        next_launch += stride
        row_start[h, r] = step
        row_slot[h, r] = s
        if row_nnz[h, r] + row_extra[h, r] == 0:
            row_finish[h, r] = step
            continue
        slot_head[s] = h
        slot_row[s] = r
        slot_left[s] = row_nnz[h, r]
        slot_idle[s] = row_extra[h, r]
        slot_cursor[s] = nb - 1 if reverse else 0
        break
    return next_launch


@numba.njit(cache=True, nogil=True)
def _replay(mask, row_nnz, row_extra, launch_head, launch_row, reverse, static, slots, capacity, partitions,
            lookups, hits, hbm_blocks, row_start, row_finish, row_slot):
    heads, _, nb = mask.shape
    n_addr = heads * nb
    present = np.zeros((partitions, n_addr), dtype=np.bool_)
    prev = np.full((partitions, n_addr), -1, dtype=np.int64)
    nxt = np.full((partitions, n_addr), -1, dtype=np.int64)
    lru_head = np.full(partitions, -1, dtype=np.int64)
    lru_tail = np.full(partitions, -1, dtype=np.int64)
    size = np.zeros(partitions, dtype=np.int64)

    slot_head = np.full(slots, -1, dtype=np.int64)
    slot_row = np.zeros(slots, dtype=np.int64)
    slot_cursor = np.zeros(slots, dtype=np.int64)
    slot_left = np.zeros(slots, dtype=np.int64)  # K/V reads still to make
    slot_idle = np.zeros(slots, dtype=np.int64)  # stall steps after the reads (row_extra)
    # queue positions: one shared by every slot (streaming), or slot s's own, starting at s (static-persistent)
    if static:
        queue_pos = np.arange(slots, dtype=np.int64)
        stride = slots
    else:
        queue_pos = np.zeros(1, dtype=np.int64)
        stride = 1
    step = 0
    # the lowest free slot takes the next row (the hardware's dispatch order among free SMs is unspecified)
    for s in range(slots):
        q = s if static else 0
        queue_pos[q] = _take_next_row(s, step, queue_pos[q], stride, launch_head, launch_row, row_nnz, row_extra,
                                      reverse, nb, slot_head, slot_row, slot_cursor, slot_left, slot_idle,
                                      row_start, row_finish, row_slot)
    active = 0
    for s in range(slots):
        if slot_head[s] >= 0:
            active += 1

    while active > 0:
        # one step: every busy slot reads its next K/V block, in slot order
        for s in range(slots):
            h = slot_head[s]
            if h < 0:
                continue
            if slot_left[s] == 0:
                slot_idle[s] -= 1
                continue
            r = slot_row[s]
            c = slot_cursor[s]
            if reverse:
                while not mask[h, r, c]:
                    c -= 1
                slot_cursor[s] = c - 1
            else:
                while not mask[h, r, c]:
                    c += 1
                slot_cursor[s] = c + 1
            a = h * nb + c
            # two partitions: a slot looks up its near partition; on a miss, the block's home
            # partition (address-interleaved) is looked up before HBM, and the near copy is kept
            near = s % partitions
            lookups[h] += 1
            if _lookup(present, prev, nxt, lru_head, lru_tail, size, capacity, near, a):
                hits[h] += 1
            else:
                home = a % partitions
                if home == near:
                    hbm_blocks[h] += 1
                else:
                    lookups[h] += 1
                    if _lookup(present, prev, nxt, lru_head, lru_tail, size, capacity, home, a):
                        hits[h] += 1
                    else:
                        hbm_blocks[h] += 1
            slot_left[s] -= 1
        step += 1
        for s in range(slots):
            if slot_head[s] < 0 or slot_left[s] > 0 or slot_idle[s] > 0:
                continue
            row_finish[slot_head[s], slot_row[s]] = step
            q = s if static else 0
            queue_pos[q] = _take_next_row(s, step, queue_pos[q], stride, launch_head, launch_row, row_nnz,
                                          row_extra, reverse, nb, slot_head, slot_row, slot_cursor, slot_left,
                                          slot_idle, row_start, row_finish, row_slot)
            if slot_head[s] < 0:
                active -= 1
    return step


@numba.njit(cache=True, nogil=True)
def _makespan(lengths, slots, static):
    finish = np.zeros(slots, dtype=np.int64)
    for i in range(lengths.shape[0]):
        # static: queue entry i is slot i mod slots's; streaming: the slot that frees first (the lowest on a tie)
        s = i % slots if static else np.argmin(finish)
        finish[s] += lengths[i]
    return finish.max()


def launch_queue(perm: np.ndarray, *, parallel_heads: bool) -> tuple[np.ndarray, np.ndarray]:
    """The launch queue of ``perm`` (H, MB): each entry's head and query block, heads one after another, or
    (``parallel_heads``) launch slot p of every head before slot p + 1."""
    heads, mb = perm.shape
    if parallel_heads:
        # queue entry i = (i % H, perm[i % H, i // H])
        launch_head = np.tile(np.arange(heads), mb)
        return launch_head, perm[launch_head, np.repeat(np.arange(mb), heads)]
    return np.repeat(np.arange(heads), mb), perm.reshape(-1)


def makespan(lengths: np.ndarray, *, slots: int, static: bool) -> int:
    """The steps a launch takes when queue entry ``i`` (launch order, all heads) holds its slot for ``lengths[i]``
    steps: ``_replay``'s schedule without the L2 (a step costs the same hit or miss, so the schedule never depends
    on it), for the whole launch in milliseconds where the replay takes seconds."""
    return int(_makespan(np.ascontiguousarray(lengths, dtype=np.int64), int(slots), bool(static)))


def replay(mask: np.ndarray, perm: np.ndarray, *, slots: int, capacity_blocks: int, reverse: bool,
           parallel_heads: bool, partitions: int = 1, row_extra_steps: np.ndarray | None = None,
           static: bool = False, row_nnz: np.ndarray | None = None) -> Trace:
    """Replay the K/V reads of ``mask`` (H, MB, NB) bool, launched in ``perm`` (H, MB) order per head.

    ``static`` selects the static-persistent scheduler (slot s runs queue entries s, s + slots, ...), else the
    streaming one. ``capacity_blocks`` is the L2 size in K/V blocks, split evenly over ``partitions``;
    ``row_extra_steps`` (H, MB), by original query block, holds a row's slot that many steps after its
    last read. ``row_nnz`` (H, MB) is the mask's row sums where the caller has them.
    """
    heads, mb, _ = mask.shape
    launch_head, launch_row = launch_queue(perm, parallel_heads=parallel_heads)
    lookups = np.zeros(heads, dtype=np.int64)
    hits = np.zeros(heads, dtype=np.int64)
    hbm_blocks = np.zeros(heads, dtype=np.int64)
    row_start = np.zeros((heads, mb), dtype=np.int64)
    row_finish = np.zeros((heads, mb), dtype=np.int64)
    row_slot = np.zeros((heads, mb), dtype=np.int64)
    row_nnz = (mask.sum(axis=-1, dtype=np.int64) if row_nnz is None
               else np.ascontiguousarray(row_nnz, dtype=np.int64))
    row_extra = (np.zeros_like(row_nnz) if row_extra_steps is None
                 else np.ascontiguousarray(row_extra_steps, dtype=np.int64))
    makespan = _replay(np.ascontiguousarray(mask), row_nnz, row_extra,
                       np.ascontiguousarray(launch_head, dtype=np.int64),
                       np.ascontiguousarray(launch_row, dtype=np.int64), bool(reverse), bool(static), int(slots),
                       max(1, int(capacity_blocks) // int(partitions)), int(partitions),
                       lookups, hits, hbm_blocks, row_start, row_finish, row_slot)
    return Trace(lookups, hits, hbm_blocks, row_start, row_finish, row_slot, int(makespan))
