"""From a launcher and example inputs to its precision plan: capture the launches, compile each
distinct one to TTIR/TTGIR for an NVIDIA target (no GPU needed) and read its sites.

Compilation needs compiled ``@triton.jit`` objects.  In a process where Triton runs in
interpreter mode (``TRITON_INTERPRET=1``, as numoracle's interpreter backend sets it), kernels
and ``triton.language``'s own helpers are interpreted functions that Triton's compiler cannot
read, so compilation moves to a helper process started without that variable
(``numoracle.plan._worker``); it imports (or, for a module made from source such as a mutant,
re-executes) the kernel's module and compiles there.  The capture itself always runs here.
"""

from __future__ import annotations

import atexit
import linecache
import os
import pickle
import subprocess
import sys
import time
from dataclasses import dataclass, field

from ..errors import InvalidArgument
from . import _triton as T
from . import capture as C
from . import kernel as K


@dataclass
class Compiled:
    """One compiled specialization: its IR, sites and loop-carried accumulations."""
    name: str
    ir: K.KernelIR
    sites: list
    loops: dict
    options: dict
    seconds: float

    def by_ir(self) -> dict:
        """id(mlir op) -> its Site."""
        if not hasattr(self, "_by_ir"):
            # an FMA candidate is a note on its add, which keeps its own site
            self._by_ir = {id(s.ir): s for s in self.sites if s.ir is not None and s.kind != "fma"
                           and not s.detail.get("companion")}
        return self._by_ir

    def companions(self) -> dict:
        """id(mlir op) -> the further sites one operation stands for (a dot_scaled's operand
        scaling, which the TTGIR does apart)."""
        if not hasattr(self, "_companions"):
            self._companions = {}
            for s in self.sites:
                if s.ir is not None and s.detail.get("companion"):
                    self._companions.setdefault(id(s.ir), []).append(s)
        return self._companions


@dataclass
class KernelPlan:
    """The precision plan of one execution of a launcher."""
    capture: C.Capture
    compiled: list                       # Compiled per launch (capture.launches order)
    host_sites: list                     # Site per host step (same order as capture.host_steps)
    target: str
    triton: str
    seconds: dict = field(default_factory=dict)

    def launch_compiled(self, launch) -> Compiled:
        return self.compiled[next(i for i, l in enumerate(self.capture.launches) if l is launch)]

    def distinct(self) -> list:
        """(launch, Compiled) once per distinct compiled kernel, in launch order."""
        out, seen = [], set()
        for l, c in zip(self.capture.launches, self.compiled):
            if l.key() not in seen:
                seen.add(l.key())
                out.append((l, c))
        return out

    def sites(self) -> list:
        """Every site once per distinct compiled kernel, then the host steps."""
        return [s for _, c in self.distinct() for s in c.sites] + list(self.host_sites)

    def fp_fusion(self) -> bool:
        return any(c.options.get("enable_fp_fusion") for c in self.compiled)

    def to_dict(self) -> dict:
        kernels = []
        for l, c in self.distinct():
            kernels.append({"kernel": l.name, "constexprs": {k: repr(v) for k, v in l.constexprs.items()},
                            "signature": l.signature, "options": c.options, "grid": repr(l.grid),
                            "config": list(l.config) if l.config else None,
                            "compile_seconds": round(c.seconds, 3),
                            "sites": [s.to_dict() for s in c.sites]})
        return {"target": self.target, "triton": self.triton, "launches": len(self.capture.launches),
                "kernels": kernels, "host": [s.to_dict() for s in self.host_sites],
                "launcher_error": self.capture.error,
                "seconds": {k: round(v, 3) for k, v in self.seconds.items()}}


def extract_plan(launcher, inputs, params=None, *, arch=None, config: int = 0) -> KernelPlan:
    """The precision plan of ``launcher(*inputs, **params)`` (a function that launches Triton
    kernels): every launch captured, every distinct launch compiled for NVIDIA ``arch``
    (default 90; ``"device"`` for the GPU at hand) and read."""
    t0 = time.perf_counter()
    cap = C.capture(launcher, inputs, dict(params or {}), config=config)
    t1 = time.perf_counter()
    tgt = T.target(arch)
    todo, order = {}, []
    for l in cap.launches:
        key = l.key()
        if key not in todo:
            todo[key] = l
            order.append(key)
    results = dict(zip(order, _compile_all([todo[k] for k in order], tgt)))
    compiled = []
    for i, l in enumerate(cap.launches):
        res = results[l.key()]
        if isinstance(res, Exception):
            raise InvalidArgument(f"cannot compile {l.name} for {tgt.backend} sm{tgt.arch}: {res}") from res
        # one reading per launch: its arguments (storages, scalar values) are its own
        kir = K.KernelIR(res["ttir"], res.get("ttgir", ""), args=l.args, grid=l.grid, options=res["options"])
        compiled.append(Compiled(l.name, kir, K.extract(kir, i), K.loop_levels(kir), res["options"],
                                 res.get("seconds", 0.0) if todo[l.key()] is l else 0.0))
    t2 = time.perf_counter()
    host = [_host_site(h, i) for i, h in enumerate(cap.host_steps)]
    return KernelPlan(cap, compiled, host, f"{tgt.backend} sm{tgt.arch}", T.version(),
                      {"capture": t1 - t0, "compile_and_read": t2 - t1, "total": t2 - t0})


def _host_site(h: C.HostStep, i: int) -> K.Site:
    """A host step as a site (its torch dtypes in numoracle's format names)."""
    kind = C.host_kind(h.op)
    fmt = _torch_fmt(h.out_dtype)
    src = _torch_fmt(h.input_dtypes[0]) if h.input_dtypes else None
    file, line, fn = h.stack[-1] if h.stack else (None, None, None)
    w = K.Where(file, line, None, tuple((f, l, None) for f, l, _ in reversed(h.stack[:-1])))
    tail = h.op.rsplit(".", 1)[-1]
    s = K.Site("host", h.op, fmt, w, src_fmt=src, launch=i, detail={"host_kind": kind, "name": tail, **h.detail})
    if kind == "cast":
        s.rounds = src is not None and not K.subset(src, fmt)
        s.detail["text"] = f"host {tail}: {src} -> {fmt} ({'rounds' if s.rounds else 'exact'})"
    elif kind == "sum":
        s.detail["text"] = f"host {tail} over {h.detail.get('n')} in {fmt} (torch's order)"
        s.rounds = True
    elif kind == "dot":
        s.detail["text"] = f"host {tail}: {src} inputs -> {fmt} (K={h.detail.get('k')}, the library's accumulation)"
        s.rounds = True
    elif kind == "arith":
        s.rounds = K.is_low(fmt)
        s.detail["text"] = f"host {tail} in {fmt}"
    elif kind == "math":
        s.function = {"sigmoid": "exp", "softmax": "exp", "log_softmax": "exp"}.get(tail, tail)
        s.implementation = "torch on the host"
        s.rounds = K.is_low(fmt)
        s.detail["text"] = f"host {tail} in {fmt} (torch)"
    elif kind == "fill":
        s.detail["text"] = f"host {tail} (a constant)"
    else:
        s.detail["text"] = f"host {h.op} -> {fmt}"
    return s


def _torch_fmt(dtype: str | None) -> str | None:
    if dtype is None:
        return None
    return {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float64": "fp64",
            "float8_e4m3fn": "e4m3fn", "float8_e5m2": "e5m2", "float8_e4m3fnuz": "e4m3fnuz"}.get(dtype)


# --------------------------------------------------------------------------- compiling

def _compilable_here(kernel) -> bool:
    cls = T.classes()
    if cls.interpreted is not None and isinstance(kernel, cls.interpreted):
        return False
    if not isinstance(kernel, cls.jit):
        return False
    import triton.language as tl
    return isinstance(getattr(tl, "sum", None), cls.jit) and not (
        cls.interpreted is not None and isinstance(tl.sum, cls.interpreted))


def _compile_all(launches: list, tgt) -> list:
    here = [l for l in launches if _compilable_here(l.kernel)]
    away = [l for l in launches if not _compilable_here(l.kernel)]
    results = {}
    for l in here:
        t = time.perf_counter()
        try:
            r = T.compile_ir(l.kernel, l.signature, l.constexprs, l.divisible, l.options, tgt)
            r["seconds"] = time.perf_counter() - t
            results[id(l)] = r
        except Exception as exc:        # noqa: BLE001 - reported with the kernel's name
            results[id(l)] = exc
    if away:
        for l, r in zip(away, _worker().compile([_request(l, tgt) for l in away])):
            results[id(l)] = r
    return [results[id(l)] for l in launches]


def _request(l: C.Launch, tgt) -> dict:
    fn = T.python_function(l.kernel)
    mod = sys.modules.get(fn.__module__)
    file = getattr(mod, "__file__", None) or fn.__code__.co_filename
    source = None
    if not (file and os.path.isfile(file)):
        lines = linecache.getlines(fn.__code__.co_filename)
        if not lines:
            raise InvalidArgument(f"cannot compile {fn.__name__} in the helper process: its module "
                                  f"{fn.__module__} has no source file and no source in linecache.")
        source = "".join(lines)
        file = fn.__code__.co_filename
    return {"module": fn.__module__, "file": file, "source": source,
            "package": getattr(mod, "__package__", None), "qualname": fn.__qualname__,
            "signature": l.signature, "constexprs": l.constexprs, "divisible": l.divisible,
            "options": l.options, "arch": tgt.arch, "do_not_specialize": None}


class _Worker:
    """A helper process that compiles kernels with Triton out of interpreter mode."""

    def __init__(self):
        from ..processes import child_environment, popen
        env = child_environment({k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"})
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        self.proc = popen([sys.executable, "-m", "numoracle.plan._worker"], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, env=env)

    def compile(self, requests: list) -> list:
        data = pickle.dumps(requests)
        try:
            self.proc.stdin.write(len(data).to_bytes(8, "little") + data)
            self.proc.stdin.flush()
            n = int.from_bytes(self._read(8), "little")
            out = pickle.loads(self._read(n))
        except (BrokenPipeError, EOFError, OSError) as exc:
            raise InvalidArgument(f"the plan's compile helper process failed ({exc}); run numoracle plan in a "
                                  f"process without TRITON_INTERPRET=1 to compile in-process.") from None
        return [RuntimeError(r["error"]) if "error" in r else r for r in out]

    def _read(self, n: int) -> bytes:
        chunks, got = [], 0
        while got < n:
            b = self.proc.stdout.read(n - got)
            if not b:
                raise EOFError("helper process ended")
            chunks.append(b)
            got += len(b)
        return b"".join(chunks)

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


_WORKERS: list = []          # at most one helper process, started when first needed


def _worker() -> _Worker:
    if _WORKERS and _WORKERS[0].proc.poll() is None:
        return _WORKERS[0]
    w = _Worker()
    _WORKERS[:] = [w]
    atexit.register(w.close)
    return w
