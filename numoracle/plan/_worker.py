"""The plan's compile helper process (see ``extract``): reads pickled compile requests from
stdin, compiles each kernel with Triton out of interpreter mode, writes pickled results.

Started with ``TRITON_INTERPRET`` removed from its environment, so ``@triton.jit`` makes
compiled functions when it imports (or re-executes) a kernel's module."""

from __future__ import annotations

import importlib
import importlib.util
import linecache
import pickle
import sys
import time
import types


def _module(req: dict, cache: dict):
    key = (req["module"], req["file"], hash(req["source"]))
    if key in cache:
        return cache[key]
    if req["source"] is not None:
        # a module made from source (a mutant): execute it again here, its text in linecache
        # so that Triton reads the jit functions' source
        src = req["source"]
        linecache.cache[req["file"]] = (len(src), None, src.splitlines(True), req["file"])
        m = types.ModuleType(req["module"])
        m.__package__ = req["package"]
        m.__file__ = req["file"]
        sys.modules[m.__name__] = m
        exec(compile(src, req["file"], "exec"), m.__dict__)
    else:
        try:
            m = importlib.import_module(req["module"])
        except ImportError:
            spec = importlib.util.spec_from_file_location(req["module"], req["file"])
            m = importlib.util.module_from_spec(spec)
            sys.modules[req["module"]] = m
            spec.loader.exec_module(m)
    cache[key] = m
    return m


def _compile(req: dict, cache: dict) -> dict:
    from numoracle.plan import _triton as T
    m = _module(req, cache)
    obj = m
    for part in req["qualname"].split("."):
        obj = getattr(obj, part)
    # the module's name may be bound to an @triton.autotune or @triton.heuristics wrapper of
    # the launched @triton.jit function: compile the function it wraps
    obj = T.jit_function(obj)
    t = time.perf_counter()
    out = T.compile_ir(obj, req["signature"], req["constexprs"], tuple(req["divisible"]), req["options"],
                       T.target(req["arch"]))
    out["seconds"] = time.perf_counter() - t
    return out


def _chain(exc: BaseException) -> str:
    """The error and what caused it: Triton's CompilationError names the outer call site
    only, the reason is in its cause."""
    parts, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        parts.append(f"{type(exc).__name__}: {exc}")
        exc = exc.__cause__
    return "\ncaused by ".join(parts)


def main() -> int:
    import warnings
    from ..processes import die_with_parent
    die_with_parent()
    warnings.simplefilter("ignore")
    cache: dict = {}
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr          # anything a kernel module prints must not reach the protocol
    while True:
        head = stdin.read(8)
        if len(head) < 8:
            return 0
        n = int.from_bytes(head, "little")
        requests = pickle.loads(stdin.read(n))
        results = []
        for req in requests:
            try:
                results.append(_compile(req, cache))
            except Exception as exc:      # noqa: BLE001 - sent back to the caller
                results.append({"error": _chain(exc)})
        data = pickle.dumps(results)
        stdout.write(len(data).to_bytes(8, "little") + data)
        stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
