"""numoracle's pytest plugin (entry point ``pytest11: numoracle``).

Options::

    --numoracle-profile ci|dev|long    example counts, shape caps, time budgets (default ci)
    --numoracle-mode statistical|fixed
    --numoracle-seed N                 seed of the search (ci: 0, so CI runs are reproducible)
    --numoracle-backend interpreter|gpu|auto
    --numoracle-corpus DIR             save counterexamples there, and collect its saved cases

A property test of "operator + kernel"::

    from numoracle.pytest_plugin import property_test

    test_my_rms_norm = property_test("rms_norm", kernel="mypkg.kernels:rms_norm")

    @property_test("softmax", kernel="correct", formats=["bf16"])
    def test_softmax(result):          # optional: more assertions on the RunResult
        assert result.totals.cases >= 10

Saved corpus cases (``corpora/**/case.json``, or those under ``--numoracle-corpus``)
are collected as test items that replay the case in both modes: a case saved
with ``expect: accept`` (a bug to fix) passes once its kernel is accepted; one
saved with ``expect: reject`` (a known-faulty kernel kept as an oracle
regression case) passes while the fixed-input mode still rejects it.

The plugin imports nothing heavy at start-up and changes nothing for tests
that do not use it: the backend (and with it ``TRITON_INTERPRET``) is chosen
only when a property test or corpus item runs.
"""

from __future__ import annotations

import functools
import inspect
import os
from pathlib import Path

import pytest

PROFILES = {
    "ci": {"max_examples": 10, "max_rows": 8, "max_cols": 256, "seconds": None, "shrink_seconds": 10.0,
           "seed": 0},
    "dev": {"max_examples": 100, "max_rows": 32, "max_cols": 512, "seconds": 300.0, "shrink_seconds": 30.0,
            "seed": None},
    "long": {"max_examples": 100_000, "max_rows": None, "max_cols": None, "seconds": 3600.0,
             "shrink_seconds": 120.0, "seed": None},
}

_OPTIONS: dict = {"profile": "ci", "mode": "statistical", "seed": None, "backend": "auto", "corpus": None}


def pytest_addoption(parser):
    g = parser.getgroup("numoracle", "numoracle property tests and corpora")
    g.addoption("--numoracle-profile", choices=sorted(PROFILES), default=None,
                help="example counts and budgets of numoracle property tests (default: ci, or $NUMORACLE_PROFILE)")
    g.addoption("--numoracle-mode", choices=("statistical", "fixed"), default="statistical",
                help="numoracle verdict mode (default statistical; rejects are confirmed in fixed mode)")
    g.addoption("--numoracle-seed", type=int, default=None, help="seed of numoracle's searches")
    g.addoption("--numoracle-backend", choices=("interpreter", "gpu", "auto"), default="auto",
                help="where kernels run (auto: the GPU when there is one)")
    g.addoption("--numoracle-corpus", default=None, metavar="DIR",
                help="save counterexamples under DIR and collect DIR's saved cases as test items")


def pytest_configure(config):
    profile = config.getoption("--numoracle-profile") or os.environ.get("NUMORACLE_PROFILE") or "ci"
    if profile not in PROFILES:
        raise pytest.UsageError(f"NUMORACLE_PROFILE={profile!r}: expected one of {sorted(PROFILES)}.")
    _OPTIONS.update(profile=profile, mode=config.getoption("--numoracle-mode"),
                    seed=config.getoption("--numoracle-seed"), backend=config.getoption("--numoracle-backend"),
                    corpus=config.getoption("--numoracle-corpus"))
    config.addinivalue_line("markers", "numoracle: a numoracle property test or corpus replay")
    corpus = _OPTIONS["corpus"]
    if corpus and Path(corpus).is_dir() and not any(Path(a).resolve() == Path(corpus).resolve()
                                                    for a in config.args if Path(a).exists()):
        config.args.append(str(corpus))


# corpus.CASE_FILE and corpus.ARRAYS_FILE (numoracle.corpus imports torch: not at collection)
CASE_FILE, ARRAYS_FILE = "case.json", "inputs.npz"


def _in_corpus(path: Path) -> bool:
    corpus = _OPTIONS.get("corpus")
    try:
        if corpus and Path(corpus).resolve() in path.resolve().parents:
            return True
    except (OSError, RuntimeError):        # a symlink loop on the way: judged by its parts
        pass
    return "corpora" in path.parts


def pytest_collect_file(file_path, parent):
    """A case is collected from its case.json, or from its inputs.npz where the case.json
    beside it is not a regular file (missing, a directory, a FIFO, a broken link): pytest
    offers only regular files, and such a case must fail as corrupt, not vanish."""
    if file_path.name not in (CASE_FILE, ARRAYS_FILE) or any(p.startswith(".tmp-") for p in file_path.parts):
        return None
    if file_path.name == ARRAYS_FILE:
        if os.path.isfile(file_path.parent / CASE_FILE):
            return None                    # collected from its case.json (pytest offers a link to a file too)
    if not _in_corpus(file_path):
        return None
    return CorpusFile.from_parent(parent, path=file_path)


class CorpusFile(pytest.File):
    def collect(self):
        from .corpus import read_meta
        from .errors import InvalidArgument
        try:                  # read as replay reads it: bounded, no FIFO or device, checked
            _, meta = read_meta(self.path.parent)
            name = f"{meta['op']}/{meta['kernel']['spec']}/{meta['id']}"
        except InvalidArgument:
            name = "case"          # a corrupt case: the item reports it when it runs
        yield CorpusItem.from_parent(self, name=name)


class CorpusItem(pytest.Item):
    def runtest(self):
        __tracebackhide__ = True
        from .runner.replay import replay
        r = replay(self.path.parent, backend=_backend_for_replay())
        if r["status"] == "corrupt":
            raise AssertionError(f"{self.path.parent}: {r['reason']}")
        if r["passes"]:
            return
        if r.get("expect") == "reject":
            raise AssertionError(f"{self.path.parent}: saved as a reject numoracle must keep finding, but the "
                                 f"fixed-input mode now says {r['statuses'].get('fixed')!r} ({r['note']}).")
        if r["verdicts"]:
            from .errors import OracleViolation
            st = r["statuses"]
            v = r["verdicts"]["fixed"] if st.get("fixed") == "reject" else r["verdicts"]["statistical"]
            raise OracleViolation(v.explain(), v)
        raise AssertionError(f"{self.path.parent}: {r['note']}")

    def reportinfo(self):
        return self.path, 0, f"numoracle replay {self.path.parent}"

    def repr_failure(self, excinfo):
        return str(excinfo.value)


def _backend_for_replay():
    b = _OPTIONS.get("backend", "auto")
    return None if b == "auto" else b


def property_test(op, kernel="correct", *, formats=None, groups=None, rows=None, cols=None, params=None,
                  configs=None, max_examples=None, backend=None, mode=None, timeout=60.0, allow_uncertified=True):
    """A pytest test function that fuzzes ``kernel`` of operator ``op`` under the
    session's profile and fails with the verdict's explanation (and the saved
    case's replay line) on a confirmed counterexample, a kernel error, NaN
    output or timeout.  Statistical-only rejects are reported, not failures.
    Decorate a function taking the RunResult to add assertions."""

    def run(extra=None):
        from .errors import OracleViolation
        from .runner import fuzz
        from .strategies import cases
        prof = PROFILES[_OPTIONS["profile"]]
        seed = _OPTIONS["seed"] if _OPTIONS["seed"] is not None else prof["seed"]
        strategy = cases(op, formats=formats, groups=groups, rows=rows, cols=cols, params=params, configs=configs,
                         max_rows=None if rows else prof["max_rows"], max_cols=None if cols else prof["max_cols"])
        res = fuzz(op, kernel, backend=backend or _OPTIONS["backend"], mode=mode or _OPTIONS["mode"],
                   max_examples=max_examples or prof["max_examples"], seconds=prof["seconds"], strategy=strategy,
                   seed=seed, derandomize=False, timeout=timeout, shrink_seconds=prof["shrink_seconds"],
                   corpus=_OPTIONS["corpus"])
        if res.counterexample is not None:
            v = res.counterexample.verdict
            raise OracleViolation(f"{v.explain()}\nFound by {res.shrunk_from!r}"
                                  + (f"\nSaved: {res.saved}" if res.saved else ""), v)
        bad = [o for o in res.errors]
        if bad:
            lines = "\n".join(f"  {o.status}: {o.case!r}: {o.error or 'NaN/inf where the reference is finite'}"
                              for o in bad[:5])
            raise AssertionError(f"{res.op}/{res.kernel}: {len(bad)} kernel failure(s) on {res.totals.cases} "
                                 f"cases:\n{lines}")
        if not allow_uncertified and res.totals.uncertified:
            raise AssertionError(f"{res.op}/{res.kernel}: {res.totals.uncertified} uncertified case(s).")
        if extra is not None:
            extra(res)
        return None

    kname = kernel if isinstance(kernel, str) else getattr(kernel, "__name__", "kernel")

    def test(*args):
        if len(args) == 1 and callable(args[0]) and not args[0].__class__.__name__.startswith("Fixture"):
            fn = args[0]

            @functools.wraps(fn)
            def decorated():
                return run(fn)
            # pytest must see no parameters (``result`` is ours, not a fixture)
            del decorated.__wrapped__
            decorated.__signature__ = inspect.Signature()
            return pytest.mark.numoracle(decorated)
        return run()

    test.__name__ = f"test_{op}_{''.join(ch if ch.isalnum() else '_' for ch in kname)}"
    test.__qualname__ = test.__name__
    return pytest.mark.numoracle(test)
