"""A supervised worker process that runs kernels (docs/design.md §9).

A kernel may crash its process (an out-of-bounds store on the interpreter, a segfault in a
driver), exit it, hang in C where no signal reaches Python, or leak.  Long runs therefore
run kernels in a child process that this process supervises:

* a *zygote* is started with ``python -m numoracle.runner.worker`` (no multiprocessing: it
  works inside daemonic pool and Dask workers, and never re-imports the caller's
  ``__main__``); it imports torch, Triton and numoracle, takes the parent's settings and
  (for the interpreter) its backend, and then only forks: each child that runs kernels is a
  fork of it, ready in milliseconds, so a crash costs no new imports (a shrinker re-running
  a crashing case dozens of times stays fast).  The zygote never runs a kernel, never
  starts a thread pool (one thread while it imports: a fork copies no pool's locks) and
  never touches CUDA (a GPU child selects its backend after the fork);
* a call that does not return within its limit kills the child (SIGKILL), one whose child
  dies is a ``crash`` with the signal or exit code and the end of the child's
  ``faulthandler`` dump; the next call forks a new child;
* the child dies with its parent (``PR_SET_PDEATHSIG`` where Linux offers it, and a thread
  that watches the parent's pid everywhere), ignores SIGINT (Ctrl-C in a terminal reaches
  the whole process group: the parent decides), and sends only plain data back: tensors as
  (dtype, shape, place in shared memory), anything else as its ``repr``;
* tensors cross in two shared-memory files per child (``_Region``: one the parent writes,
  one the child writes), so that the pipe carries only a small description: one copy each
  way, where pickled bytes through a pipe cost five (docs/performance.md, "A fuzz run on many
  processes");
* the child says its resident memory after every call, so that a run can watch it.

A kernel is named to the child by a *recipe*, since a function cannot cross a process
boundary: ``("import", "module:qualname")`` for a module-level function, or
``("call", "module:function", args)`` for one made by a factory (a kernel picking some
outputs, a mutant built from source).  ``recipe_of`` finds it; a kernel without one runs
in-process.
"""

from __future__ import annotations

import atexit
import collections
import importlib
import mmap
import os
import pickle
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings

from ..processes import child_environment, die_with_parent, popen
from .outcomes import Execution, raised

# set on a kernel to say how another process can make it (see the module docstring)
RECIPE = "__numoracle_recipe__"
_STARTUP_SECONDS = 300.0           # imports and backend set-up, which are not the kernel's time
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
# how long the parent polls for a reply before it sleeps on the pipe, while calls are this
# short: on two H100 hosts a parent that slept on the pipe at every case was slower in every
# phase of the case, not only the call (docs/results/2026-12-05-h100-worker-transport.md)
_POLL_SECONDS = 0.003


# ---- recipes ---------------------------------------------------------------------------

def recipe_of(kernel):
    """How a worker process can make ``kernel`` again, or None (a lambda, a closure, a
    function of ``__main__``: those run in-process)."""
    given = getattr(kernel, RECIPE, None)
    if given is not None:
        return given
    picks = getattr(kernel, "__numoracle_picks__", None)
    if picks is not None:                     # operators.pick_outputs: the inner kernel's, then the pick
        inner = recipe_of(picks[0])
        return None if inner is None else ("call", "numoracle.runner.worker:picked", (inner, picks[1]))
    mod, qual = getattr(kernel, "__module__", None), getattr(kernel, "__qualname__", None)
    if not mod or not qual or mod == "__main__" or "<" in qual:
        return None
    try:
        obj = importlib.import_module(mod)
        for part in qual.split("."):
            obj = getattr(obj, part)
    except Exception:
        return None
    return ("import", f"{mod}:{qual}") if obj is kernel else None


def _attribute(path: str):
    mod, _, qual = path.partition(":")
    obj = importlib.import_module(mod)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


def picked(inner, pick):
    """The kernel ``inner`` names, keeping the outputs ``pick`` names (operators.pick_outputs)."""
    from ..operators.operator import pick_outputs
    return pick_outputs(make(inner), pick)


def make(recipe):
    """The kernel a recipe names (in the worker)."""
    kind = recipe[0]
    if kind == "import":
        return _attribute(recipe[1])
    if kind == "call":
        return _attribute(recipe[1])(*recipe[2])
    raise ValueError(f"unknown kernel recipe {recipe!r}")


# ---- plain data across the pipe, tensors through shared memory ----------------------------

class _Region:
    """A shared-memory file that one process writes tensors into and the other reads them
    from.  The writer sizes it (``writable``); the reader maps what the message says was
    written (``readable``); ``bytes`` is the mapping as a uint8 tensor.  A mapping is replaced,
    never closed: a tensor may still view it."""

    SMALLEST = 1 << 20
    SHRINK_ABOVE = 1 << 26              # a file this large shrinks when a call needs a quarter of it

    def __init__(self, fd: int | None = None):
        self.fd = _anonymous_file() if fd is None else fd
        self.bytes = None
        self.size = 0

    def _map(self, size: int) -> None:
        import torch
        self.bytes, self.size = torch.frombuffer(mmap.mmap(self.fd, size), dtype=torch.uint8), size

    def writable(self, n: int):
        want = max(self.SMALLEST, 1 << max(n - 1, 0).bit_length())
        if n > self.size or (self.size > self.SHRINK_ABOVE and 4 * want <= self.size):
            os.ftruncate(self.fd, want)
            self._map(want)
        return self.bytes

    def readable(self, n: int):
        if n > self.size:
            size = os.fstat(self.fd).st_size
            if size < n:
                raise ValueError(f"the shared-memory file holds {size} bytes, the message says {n}")
            self._map(size)
        return self.bytes

    def close(self) -> None:
        self.bytes = None
        try:
            os.close(self.fd)
        except OSError:
            pass


def _anonymous_file() -> int:
    """A file descriptor of a file in memory with no name (an unlinked temporary file where
    the system has no ``memfd_create``)."""
    if hasattr(os, "memfd_create"):
        return os.memfd_create("numoracle-worker", getattr(os, "MFD_CLOEXEC", 0))
    fd, path = tempfile.mkstemp(prefix="numoracle-worker-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    os.unlink(path)
    return fd


def pack(x, tensors: list):
    """Tensors as (dtype, shape, slot in ``tensors``), appending them there; containers of
    them; plain values as they are; anything else as its repr (the parent never unpickles an
    object the kernel made).  ``write`` then puts ``tensors`` in shared memory."""
    import torch
    if isinstance(x, torch.Tensor):
        spec = {"__tensor__": str(x.dtype).removeprefix("torch."), "shape": list(x.shape)}
        if x.device.type == "meta":            # no data to send: the parent sees where it was
            return {**spec, "meta": True}
        tensors.append(x.detach())
        # a tensor on the CPU stays there; one on an accelerator lands on the receiver's device
        return {**spec, "slot": len(tensors) - 1, "cpu": x.device.type == "cpu"}
    if isinstance(x, (tuple, list)):
        return {"__seq__": type(x).__name__, "items": [pack(v, tensors) for v in x]}
    if isinstance(x, dict):
        return {"__dict__": [(str(k), pack(v, tensors)) for k, v in x.items()]}
    if x is None or isinstance(x, (bool, int, float, str, bytes)):
        return x
    return {"__repr__": repr(x)[:300], "type": type(x).__name__}


def write(region: _Region, tensors: list) -> tuple:
    """Copy ``tensors`` into ``region`` (from any device): their (offset, bytes) and the bytes
    used, which the message carries to the reader."""
    import torch
    spans, at = [], 0
    for t in tensors:
        n = t.numel() * t.element_size()
        spans.append((at, n))
        at += (n + 63) & ~63                   # every tensor 64-byte aligned, for any dtype's view
    if at:
        space = region.writable(at)
        for t, (off, n) in zip(tensors, spans):
            if n:
                space[off:off + n].copy_(t.reshape(-1).view(torch.uint8))
    return tuple(spans), at


class Unpicklable:
    """What a kernel returned that is no tensor, a container or a plain value."""

    def __init__(self, text: str, type_name: str):
        self.text, self.type_name = text, type_name

    def __repr__(self):
        return self.text


def unpack(x, device="cpu", region: _Region | None = None, spans=(), size: int = 0):
    """What ``pack`` described, its tensors copied out of ``region`` onto ``device``."""
    import torch
    space = region.readable(size) if size else None

    def tensor(spec):
        dt = getattr(torch, spec["__tensor__"])
        if spec.get("meta"):
            return torch.empty(spec["shape"], dtype=dt, device="meta")
        where = "cpu" if spec["cpu"] else device
        off, n = spans[spec["slot"]]
        if not n:
            return torch.empty(spec["shape"], dtype=dt, device=where)
        view = space[off:off + n].view(dt).reshape(spec["shape"])
        # a copy either way: the region is overwritten by the next call
        return view.clone() if torch.device(where).type == "cpu" else view.to(where)

    def walk(v):
        if isinstance(v, dict):
            if "__tensor__" in v:
                return tensor(v)
            if "__seq__" in v:
                items = [walk(i) for i in v["items"]]
                return tuple(items) if v["__seq__"] == "tuple" else items
            if "__dict__" in v:
                return {k: walk(i) for k, i in v["__dict__"]}
            if "__repr__" in v:
                return Unpicklable(v["__repr__"], v["type"])
        return v
    return walk(x)


def _send(fd: int, msg) -> None:
    data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(len(data).to_bytes(8, "little") + data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _read_exactly(fd: int, n: int, deadline: float | None) -> bytes | None:
    """n bytes from fd, or None at end of file; raises TimeoutError past ``deadline``."""
    chunks, left = [], n
    while left:
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                raise TimeoutError
        b = os.read(fd, min(left, 1 << 20))
        if not b:
            return None
        chunks.append(b)
        left -= len(b)
    return b"".join(chunks)


def _poll(fd: int, seconds: float) -> None:
    """Wait up to ``seconds`` for ``fd`` to become readable without sleeping."""
    end = time.perf_counter() + seconds
    while not select.select([fd], [], [], 0)[0] and time.perf_counter() < end:
        pass


def _receive(fd: int, deadline: float | None):
    head = _read_exactly(fd, 8, deadline)
    if head is None:
        return None
    body = _read_exactly(fd, int.from_bytes(head, "little"), deadline)
    return None if body is None else pickle.loads(body)


_STATM: dict = {}          # pid -> an open /proc/<pid>/statm (read at every call: opened once)


def rss_mb() -> float:
    """This process's resident memory in MiB (peak where the current figure is unknown)."""
    try:
        pid = os.getpid()
        fd = _STATM.get(pid)
        if fd is None:
            _STATM.clear()                 # a forked child's inherited descriptor names its parent
            fd = _STATM[pid] = os.open(f"/proc/{pid}/statm", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        return int(os.pread(fd, 200, 0).split()[1]) * _PAGE / 2**20
    except (OSError, ValueError, IndexError):
        import resource
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 2**20 if sys.platform == "darwin" else peak / 1024


# ---- the parent's side --------------------------------------------------------------------

def _signal_name(code: int) -> str:
    try:
        return signal.Signals(code).name
    except ValueError:
        return f"signal {code}"


class _Zygote:
    """The process that forks children; the parent talks to it over a Unix socket, passing
    each child's pipes to it (SCM_RIGHTS) and asking it to reap children it killed."""

    def __init__(self, backend, values: dict):
        import socket
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = child_environment(dict(os.environ, **backend.environment()))
        env["PYTHONPATH"] = os.pathsep.join(p for p in [os.getcwd(), *sys.path] if p)
        cmd = [sys.executable, "-m", "numoracle.runner.worker", "zygote", str(theirs.fileno())]
        try:
            self.proc = popen(cmd, pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL,
                              stdout=sys.stderr.fileno() if _has_fd(sys.stderr) else None)
        finally:
            theirs.close()
        self.sock = ours
        # the hello is answered once the zygote has imported everything: ``ready`` waits for it,
        # so that whoever started the zygote does its own set-up meanwhile
        self._unanswered = True
        self._send(("hello", {"backend": backend.name, "profile": backend.math_profile, "settings": values,
                              "cwd": os.getcwd()}))

    def ready(self) -> None:
        """Wait for the zygote's answer to its hello (its imports done)."""
        if self._unanswered:
            self._unanswered = False
            self._reply(_STARTUP_SECONDS)

    def _send(self, msg, fds=()) -> None:
        import socket
        data = pickle.dumps(msg)
        try:
            socket.send_fds(self.sock, [len(data).to_bytes(8, "little") + data], list(fds))
        except OSError as exc:
            raise RuntimeError(f"the kernel worker's zygote process did not answer ({type(exc).__name__}); "
                               f"it {'is running' if self.proc.poll() is None else 'ended'}") from None

    def _request(self, msg, timeout: float | None = 30.0, fds=()):
        self.ready()
        self._send(msg, fds)
        return self._reply(timeout)

    def _reply(self, timeout: float | None):
        try:
            reply = _receive(self.sock.fileno(), None if timeout is None else time.monotonic() + timeout)
        except (TimeoutError, OSError) as exc:
            raise RuntimeError(f"the kernel worker's zygote process did not answer ({type(exc).__name__}); "
                               f"it {'is running' if self.proc.poll() is None else 'ended'}") from None
        if reply is None:
            raise RuntimeError(f"the kernel worker's zygote process ended (code {self.proc.poll()})")
        if reply[0] == "failed":
            raise RuntimeError(f"the kernel worker's zygote process could not start: {reply[1]}")
        return reply

    def alive(self) -> bool:
        return self.proc.poll() is None

    def fork(self, recipes, fds) -> int:
        import torch
        # the child computes with as many threads as this process (a local executor's worker
        # has its share of the cores), not the zygote's default of every core
        return self._request(("fork", list(recipes), torch.get_num_threads()), fds=fds)[1]

    def wait(self, pid: int) -> int:
        """The child's exit code as subprocess gives it (negative: killed by that signal)."""
        return self._request(("wait", pid), timeout=60.0)[1]

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class _Child:
    """One child process forked by the zygote: its pipes and its faulthandler log."""

    def __init__(self, zygote: _Zygote, recipes):
        req_r, req_w = os.pipe()
        res_r, res_w = os.pipe()
        self.log = tempfile.TemporaryFile(prefix="numoracle-worker-")
        self.zygote = zygote
        self.requests, self.replies = _Region(), _Region()
        try:
            self.pid = zygote.fork(recipes, (req_r, res_w, self.log.fileno(), self.requests.fd, self.replies.fd))
        except BaseException:
            for fd in (req_r, req_w, res_r, res_w):
                os.close(fd)
            self.log.close()
            self.requests.close()
            self.replies.close()
            raise
        os.close(req_r)
        os.close(res_w)
        self.to, self.frm = req_w, res_r
        self.code = None
        self.ready = False
        self.sent_values = None          # the settings the child has (sent again only when they change)

    def wait_ready(self) -> None:
        if self.ready:
            return
        try:
            reply = _receive(self.frm, time.monotonic() + _STARTUP_SECONDS)
        except (TimeoutError, OSError) as exc:
            raise RuntimeError(f"the kernel worker process did not start within {_STARTUP_SECONDS:g} s "
                               f"({type(exc).__name__})") from None
        if reply is None or reply[0] != "ready":
            raise RuntimeError(f"the kernel worker process could not start: "
                               f"{reply[1] if reply else self.death()[0]}")
        self.ready = True

    def _reap(self) -> int:
        if self.code is None:
            self.code = self.zygote.wait(self.pid)
        return self.code

    def death(self) -> tuple:
        """How the child ended: ('was killed by SIGSEGV', 'SIGSEGV') or ('exited with code 7', 'exit 7')."""
        code = self._reap()
        if code < 0:
            name = _signal_name(-code)
            return f"was killed by {name}", name
        return f"exited with code {code}", f"exit {code}"

    def log_tail(self, n: int = 3000) -> str:
        try:
            self.log.seek(0, os.SEEK_END)
            size = self.log.tell()
            self.log.seek(max(0, size - n))
            return self.log.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""

    def close(self, kill: bool = False) -> None:
        for fd in (self.to, self.frm):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.code is None:
            if kill:
                try:
                    os.kill(self.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:                       # closing its request pipe ends the child's loop
                self._reap()
            except RuntimeError:       # the zygote is gone, and its children with it
                pass
        self.log.close()
        self.requests.close()
        self.replies.close()


class Worker:
    """A supervised child process for one backend; ``call`` runs a kernel there and always
    returns an ``Execution`` (the child's death and hangs included)."""

    def __init__(self, backend, settings_values: dict | None = None):
        self.backend = backend
        self.settings_values = settings_values
        self.starts = 0
        self.calls = 0
        self._zygote: _Zygote | None = None
        self._child: _Child | None = None
        self._recipes: list = []           # kernels the zygote imports before it forks
        # the last calls' seconds: the parent polls while their median is short (a kernel's
        # first calls, which load its specializations, do not stop it)
        self._recent: collections.deque = collections.deque(maxlen=9)

    @property
    def pid(self) -> int | None:
        return None if self._child is None else self._child.pid

    def alive(self) -> bool:
        return self._child is not None and self._child.code is None

    def _values(self) -> dict:
        from ..config import settings
        values = dict(self.settings_values if self.settings_values is not None else settings.default.to_dict())
        values["isolate"] = False                 # the child runs its kernels itself
        return values

    def prestart(self) -> None:
        """Start the zygote now without waiting for its imports, which then overlap the caller's
        own set-up (a run's backend, operator and strategy); the first call waits for the rest."""
        if self._zygote is None or not self._zygote.alive():
            if self._zygote is not None:
                self._zygote.close()
            self._zygote = _Zygote(self.backend, self._values())

    def start(self) -> None:
        if self._child is not None:
            self._child.close(kill=True)
            self._child = None
        self.prestart()
        child = _Child(self._zygote, self._recipes[-8:])
        self.starts += 1
        try:
            child.wait_ready()
        except BaseException:
            child.close(kill=True)
            raise
        self._child = child

    def _lose(self) -> None:
        """The current child is gone (killed or dead)."""
        if self._child is not None:
            self._child.close(kill=True)
            self._child = None

    def call(self, recipe, inputs, params, config, timeout=None) -> Execution:
        """Run the kernel ``recipe`` names on ``inputs`` in the child."""
        t0 = time.perf_counter()
        if recipe not in self._recipes:
            self._recipes.append(recipe)
        tensors: list = []
        described = (pack(tuple(inputs), tensors), pack(dict(params), tensors), pack(dict(config), tensors))
        # the settings of this call (an autotuned kernel's config on the interpreter reads them)
        values = self._values()
        starting = 0.0
        for attempt in (0, 1):
            if not self.alive():
                s0 = time.perf_counter()
                self.start()
                starting += time.perf_counter() - s0
            child = self._child
            spans, size = write(child.requests, tensors)
            changed = values != child.sent_values
            msg = ("call", recipe, *described, spans, size, values if changed else None)
            try:
                _send(child.to, msg)
                if changed:
                    child.sent_values = values
                break
            except OSError:
                # the child died after its last call: that death is nobody's case; start afresh
                self._lose()
                if attempt:
                    raise
        self.calls += 1
        child = self._child
        deadline = None if not timeout else time.monotonic() + timeout
        if not self._recent or sorted(self._recent)[len(self._recent) // 2] < _POLL_SECONDS:
            _poll(child.frm, _POLL_SECONDS)
        try:
            reply = _receive(child.frm, deadline)
        except TimeoutError:
            self._lose()
            return Execution("timeout", error=f"no return within {timeout:g} s (worker process killed)",
                             error_type="KernelTimeout", seconds=time.perf_counter() - t0, where="worker",
                             start_seconds=starting)
        except BaseException:
            # an interrupt of this process while the kernel runs: the case is abandoned
            self._lose()
            raise
        if reply is None:
            why, what = child.death()
            tail = child.log_tail()
            self._lose()
            return Execution("crash", error=f"the worker process {why}", error_type=what, traceback=tail,
                             seconds=time.perf_counter() - t0, where="worker", start_seconds=starting)
        self._recent.append(time.perf_counter() - t0 - starting)      # the call, not the start
        if reply[0] == "ok":
            _, outs, launch, spans, size, rss, (compiles, compile_seconds) = reply
            return Execution("ok", unpack(outs, self.backend.device, child.replies, spans, size),
                             seconds=time.perf_counter() - t0, where="worker", rss_mb=rss,
                             launch=unpack(launch, "cpu", child.replies, spans, size), start_seconds=starting,
                             compiles=compiles, compile_seconds=compile_seconds)
        _, error_type, text, tb, origin, rss = reply
        return Execution("error", error=text, error_type=error_type, traceback=tb, origin=origin,
                         seconds=time.perf_counter() - t0, where="worker", rss_mb=rss, start_seconds=starting)

    def close(self, kill: bool = False) -> None:
        if self._child is not None:
            self._child.close(kill=kill)
            self._child = None
        if self._zygote is not None:
            self._zygote.close()
            self._zygote = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close(kill=True)
        return False


def _has_fd(stream) -> bool:
    try:
        stream.fileno()
        return True
    except (AttributeError, OSError, ValueError):
        return False


_SHARED: dict = {}
_SHARED_LOCK = threading.Lock()


def shared(backend) -> Worker:
    """This process's worker for ``backend`` (one per backend, started on first use and
    closed at exit).  Its settings are those current at each start."""
    with _SHARED_LOCK:
        w = _SHARED.get(backend.name)
        if w is None:
            w = _SHARED[backend.name] = Worker(backend)
        return w


def close_all() -> None:
    for w in list(_SHARED.values()):
        w.close(kill=True)
    _SHARED.clear()


atexit.register(close_all)


# ---- the child's side -----------------------------------------------------------------------

def _setup(info: dict, select_backend: bool):
    """Settings and (when ``select_backend``) the backend, as the parent has them."""
    os.chdir(info["cwd"])
    from .. import backends
    from ..config import settings
    settings.register_profile("numoracle-worker", **info["settings"])
    settings.load_profile("numoracle-worker")
    return backends.select(info["backend"], profile=info["profile"]) if select_backend else None


def zygote(sock_fd: int) -> int:  # pragma: no cover - runs in the zygote
    """Import everything once, then fork a child per request (see the module docstring)."""
    import socket

    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock = socket.socket(fileno=sock_fd)
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)                  # no thread pool before a fork
    hello = _receive(sock_fd, None)
    if hello is None:
        return 0
    info = hello[1]
    on_gpu = info["backend"] == "gpu"
    try:
        backend = _setup(info, select_backend=not on_gpu)   # CUDA is initialised after the fork only
        importlib.import_module("numoracle.operators")      # what kernels import
    except BaseException as exc:  # noqa: BLE001 - said to the parent
        _send(sock_fd, ("failed", f"{type(exc).__name__}: {exc}"))
        return 1
    _send(sock_fd, ("ready", os.getpid()))
    kernels: dict = {}
    while True:
        try:
            head, fds, _, _ = socket.recv_fds(sock, 8, 5)
        except OSError:
            return 0
        if len(head) < 8:
            return 0
        body = _read_exactly(sock_fd, int.from_bytes(head, "little"), None)
        if body is None:
            return 0
        msg = pickle.loads(body)
        if msg[0] == "wait":
            try:
                _, status = os.waitpid(msg[1], 0)
                code = os.waitstatus_to_exitcode(status)
            except ChildProcessError:
                code = 0
            _send(sock_fd, ("status", code))
            continue
        _, recipes, child_threads = msg
        for recipe in recipes:                # kernels imported once, here, inherited by every child
            if recipe not in kernels and not on_gpu:
                try:
                    kernels[recipe] = make(recipe)
                except BaseException:  # noqa: BLE001 - the child will say why, on its call
                    pass
        pid = os.fork()
        if pid == 0:
            try:
                sock.close()
                req_fd, res_fd, log_fd, req_shm, res_shm = fds
                torch.set_num_threads(child_threads or threads)
                code = serve(req_fd, res_fd, log_fd, (_Region(req_shm), _Region(res_shm)), info, backend, kernels)
            except BaseException:  # noqa: BLE001
                code = 1
            os._exit(code)
        for fd in fds:
            os.close(fd)
        _send(sock_fd, ("forked", pid))


def serve(req_fd: int, res_fd: int, log_fd: int, regions, info: dict, backend, kernels: dict) -> int:  # pragma: no cover
    """A child's loop: run each call's kernel, answer with its outputs or its exception."""
    import faulthandler

    import torch

    from .inputs import copies, inputs_kept
    from .launches import compiling, recorded

    die_with_parent()
    log = os.fdopen(log_fd, "w", buffering=1)
    faulthandler.enable(file=log, all_threads=True)
    try:
        if backend is None:
            backend = _setup(info, select_backend=True)
    except BaseException as exc:  # noqa: BLE001 - said to the parent
        _send(res_fd, ("failed", f"{type(exc).__name__}: {exc}"))
        return 1
    _send(res_fd, ("ready", os.getpid()))
    from ..config import settings
    current = info["settings"]
    requests, replies = regions
    while True:
        msg = _receive(req_fd, None)
        if msg is None or msg[0] != "call":
            return 0
        _, recipe, inputs, params, config, spans, size, values = msg
        if values is not None and values != current:
            settings.register_profile("numoracle-worker", **values)
            settings.load_profile("numoracle-worker")
            current = values
        try:
            kernel = kernels.get(recipe)
            if kernel is None:
                kernel = kernels[recipe] = make(recipe)
            ins, params, config = (unpack(v, backend.device, requests, spans, size) for v in (inputs, params, config))
            # copies on the kernel's device (on a GPU, no second copy from the host after the call)
            kept = copies(ins)
            # a broken kernel's overflow warnings (numpy's, under the interpreter) are its values'
            # business, judged by the verdict: not lines on the user's terminal, as in-process
            with warnings.catch_warnings(), recorded() as launch, compiling() as compiled:
                warnings.simplefilter("ignore", RuntimeWarning)
                out = kernel(*ins, **params, **config)
            if backend.device.startswith("cuda"):
                torch.cuda.synchronize()
            inputs_kept(kept, ins, out)
        except BaseException as exc:  # noqa: BLE001 - SystemExit and KeyboardInterrupt included: the kernel's
            reply = _error_reply(exc)
        else:
            try:
                tensors: list = []
                sent = (pack(out, tensors), pack(launch, tensors))
                reply = ("ok", *sent, *write(replies, tensors), rss_mb(), (compiled.count, compiled.seconds))
            except BaseException as exc:  # noqa: BLE001 - the outputs cannot be sent: say so instead
                reply = _error_reply(exc, "the kernel's outputs cannot be sent to the parent: ")
        try:
            _send(res_fd, reply)
        except OSError:                        # the parent is gone
            return 0
        except BaseException:  # noqa: BLE001 - the reply would not pickle: say so instead
            _send(res_fd, ("error", "TypeError", "the kernel's outputs cannot be sent to the parent",
                           "", "", rss_mb()))


def _error_reply(exc: BaseException, what: str = "") -> tuple:  # pragma: no cover - runs in the child
    """The reply for an exception being handled: its type, ``what`` and its message, the end of
    its traceback, where it was raised, this process's memory."""
    import traceback
    exc, where = raised(exc)
    return ("error", type(exc).__name__, f"{what}{type(exc).__name__}: {exc}"[:800],
            traceback.format_exc()[-1500:], where, rss_mb())


def _main(argv: list[str]) -> int:  # pragma: no cover - runs in the zygote
    if argv[:1] != ["zygote"]:
        return 2
    try:
        return zygote(int(argv[1]))
    except (OSError, EOFError):
        # The parent went away mid-message (it was terminated or killed): nothing is owed to
        # anyone, and a traceback on the terminal the user just interrupted would only alarm.
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(_main(sys.argv[1:]))
