"""Where a verdict's per-element arithmetic comes from: the full-size tensor
operations of one compiled verdict's tensor code (the function that
``numoracle.verdict.compiled`` traces), run eagerly under a dispatch mode and counted
per numoracle call site and per aten operator.  A full-size operation is one
whose output has at least as many elements as the operator's first input.

    python benchmarks/opcount.py rms_norm
    python benchmarks/opcount.py softmax --device cuda --rows 256 --top 40
    python benchmarks/opcount.py rms_norm --eager     # a whole eager verdict, shortcuts taken

The code runs eagerly, so roundings take the formulation picked outside a
compile (formats._bitcasts_cheap): compiled on the CPU, 16-bit roundings use
the midpoint fix instead (about 20 more operations each)."""
from __future__ import annotations

import argparse
import collections
import os
import sys
import traceback

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as B  # noqa: E402


class _Counter(TorchDispatchMode):
    def __init__(self, elements: int):
        super().__init__()
        self.elements = elements
        self.total = 0
        self.by_site = collections.Counter()
        self.by_op = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        outs = out if isinstance(out, (tuple, list)) else [out]
        if any(isinstance(o, torch.Tensor) and o.numel() >= self.elements for o in outs):
            self.total += 1
            self.by_op[func.overloadpacket.__name__] += 1
            frames = [f for f in traceback.extract_stack()[:-1] if f"{os.sep}numoracle{os.sep}" in f.filename]
            if frames:
                f = frames[-1]
                self.by_site[f"{os.path.basename(f.filename)}:{f.lineno} {f.name}"] += 1
        return out


def count(op_name: str, rows: int, device: str, full: bool) -> _Counter:
    """The counter after one run of the verdict's tensor code for op_name at
    rows x benchmarks.run.COLS elements (``full``: the regions function)."""
    from numoracle.verdict import compiled
    from numoracle.verdict.compiled.plan import struct
    from numoracle.check import check
    from numoracle import settings
    try:
        settings.register_profile("opcount", compile="always")
        settings.load_profile("opcount")
        compiled.clear()
        op, inputs, params, outs = B.setup(op_name, rows * B.COLS, device)
        check(op.reference, outs, inputs, params).status          # eager: the plan learns its sites
        plan = compiled.plans()[0]
        tensors = []
        for x in list(inputs) + list(outs if isinstance(outs, (tuple, list)) else [outs]):
            tensors += struct(x)[1]
        counter = _Counter(inputs[0].numel())
        with counter:
            plan._function(full)(*tensors)
        return counter
    finally:
        compiled.clear()
        settings.load_profile("default")


def count_eager(op_name: str, rows: int, device: str) -> _Counter:
    """The counter over one whole eager verdict (statistical mode, settings compile='never'):
    the calculus with its data-dependent shortcuts taken (``Context.any``/``all`` decide on
    the values), plus the eager path's own site records and judgement.  Against ``count``,
    an upper bound of what specialising a compiled verdict on the shortcuts could save."""
    from numoracle import settings
    from numoracle.check import check
    try:
        settings.register_profile("opcount-eager", compile="never")
        settings.load_profile("opcount-eager")
        op, inputs, params, outs = B.setup(op_name, rows * B.COLS, device)
        check(op.reference, outs, inputs, params, mode="statistical")
        counter = _Counter(inputs[0].numel())
        with counter:
            check(op.reference, outs, inputs, params, mode="statistical")
        return counter
    finally:
        settings.load_profile("default")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("op", choices=B.OPS)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--top", type=int, default=30, help="call sites to list")
    ap.add_argument("--regions", action="store_true", help="count the regions function (else the flags-only one)")
    ap.add_argument("--eager", action="store_true", help="count a whole eager verdict instead (shortcuts taken)")
    a = ap.parse_args(argv)
    c = count_eager(a.op, a.rows, a.device) if a.eager else count(a.op, a.rows, a.device, a.regions)
    print(f"{a.op} on {a.device}: {c.total} full-size operations per {'eager ' if a.eager else ''}verdict")
    for site, n in c.by_site.most_common(a.top):
        print(f"{n:6d}  {site}")
    print("by operator:", ", ".join(f"{k} {v}" for k, v in c.by_op.most_common()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
