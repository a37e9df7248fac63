"""A CUDA mask's launch order as one CUDA graph per mask shape and plan options.

A 40-head plan of 364K tokens is ~100 launches (the packing, the persistent Stage-1 kernel, then dozens of small
torch ops for the angles, the sorts and Stage 2): issuing them keeps the host busy for ~2 ms while the GPU's work
takes ~1.5 ms, so the plan's time depends on the host's CPU. Captured once, a plan is a copy of the mask into the
graph's own buffer and one replay. Each graph holds its mask buffer and its pool (~1.5x the mask's bytes); the
``MAX_GRAPHS`` latest are kept (a workload cycling through more shapes recaptures). A plan made while the caller is
itself capturing a graph is launched into that capture instead (``wavealign.launch_order``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

import torch

MAX_GRAPHS = 2


class PlanGraph:
    """``plan(mask)`` captured on a static mask buffer of one shape and device; ``__call__`` copies a mask in,
    replays, and returns a copy of the order (the graph's own output is overwritten by the next replay)."""

    def __init__(self, shape: tuple[int, ...], device: torch.device, plan: Callable[[torch.Tensor], torch.Tensor]):
        self.device = device
        self.lock = threading.Lock()
        # the graph's buffers are normal tensors even when the first plan runs under torch.inference_mode (a
        # diffusers pipeline): an inference tensor could not be written by a later plan outside it
        with torch.inference_mode(False), torch.cuda.device(device):  # the capture runs on the device's streams
            self.mask = torch.zeros(shape, dtype=torch.bool, device=device)
            self._capture(plan)

    def _capture(self, plan: Callable[[torch.Tensor], torch.Tensor]) -> None:
        device = self.device
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            plan(self.mask)  # compiles the kernels and fills the caches a capture must not create
        torch.cuda.current_stream(device).wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        # a capture stream of the mask's device (torch's shared default one lives on the first device it was made
        # on); thread_local: another thread's CUDA work (a sweep worker building its next group's inputs) may go on
        # during the capture, only this thread's calls must be capturable
        with torch.cuda.graph(self.graph, stream=torch.cuda.Stream(device), capture_error_mode="thread_local"):
            self.order = plan(self.mask)
        self.done = torch.cuda.Event()  # the last caller's copy of the order, which the next copy-in must follow
        self.done.record(torch.cuda.current_stream(device))

    def __call__(self, mask: torch.Tensor) -> torch.Tensor:
        with self.lock, torch.cuda.device(self.device):
            torch.cuda.current_stream().wait_event(self.done)  # a caller on another stream may still be reading
            self.mask.copy_(mask)
            self.graph.replay()
            order = self.order.clone()
            self.done.record()
            return order


_graphs: OrderedDict[Hashable, PlanGraph] = OrderedDict()
_graphs_lock = threading.Lock()


def replay(mask: torch.Tensor, key: Hashable, plan: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """``plan(mask)`` through the graph of ``mask``'s shape and ``key`` (the plan's options), captured on first use.
    ``plan`` must not wait for the GPU; ``key`` must name everything it depends on besides the mask."""
    full_key = (tuple(mask.shape), mask.device, key)
    with _graphs_lock:
        graph = _graphs.pop(full_key, None)
        if graph is None:
            while len(_graphs) >= MAX_GRAPHS:
                _graphs.popitem(last=False)
            graph = PlanGraph(tuple(mask.shape), mask.device, plan)
        _graphs[full_key] = graph
    return graph(mask)
