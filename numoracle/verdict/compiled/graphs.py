"""Compiled flags functions replayed as CUDA graphs.

On CUDA a small verdict's time is the host launching a dozen kernels; numoracle
captures the compiled flags function once, on its own copies of the inputs, and a
verdict then copies its tensors into the graph's and replays it, with none of
torch.compile's per-call wrappers.  A graph keeps its buffers (and a copy of its
inputs) between calls: hence the size limit (settings ``cuda_graphs``,
``cuda_graph_max_elements``)."""

from __future__ import annotations

import threading

import torch

from .holding import copy_into


def wanted(settings, device: str, elements: int) -> bool:
    """Whether the flags function of a signature of ``elements`` judged elements on
    ``device`` runs as a CUDA graph."""
    if device != "cuda" or settings.cuda_graphs == "never":
        return False
    return settings.cuda_graphs == "always" or elements <= settings.cuda_graph_max_elements


class Captured:
    """A compiled flags function (already run once: compiled and tuned) captured as a CUDA
    graph on copies of its first arguments.  A call copies its arguments into those (one
    launch per dtype) and replays the graph; it returns a copy of the flags, ordered after
    the replay, so that a later call cannot overwrite them before they are read.  Calls
    from several threads (or streams) take turns: each waits for the previous replay."""

    def __init__(self, fn, tensors):
        self.device = tensors[0].device
        self.lock = threading.Lock()
        with torch.cuda.device(self.device):
            self.inputs = [t.clone() for t in tensors]
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):       # a warm-up off the capture: lazy state, allocator
                fn(*self.inputs)
            torch.cuda.current_stream().wait_stream(side)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.sites, self.flags = fn(*self.inputs)
            self.done = torch.cuda.Event()
            self.done.record()

    def __call__(self, *tensors):
        with self.lock, torch.cuda.device(self.device):
            torch.cuda.current_stream().wait_event(self.done)
            copy_into(self.inputs, tensors)
            self.graph.replay()
            flags = self.flags.clone()
            self.done.record()
        return self.sites, flags
