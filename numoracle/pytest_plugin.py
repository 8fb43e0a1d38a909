"""numoracle's pytest plugin (entry point ``pytest11: numoracle``).

Options::

    --hypothesis-profile ci|dev|long   Hypothesis's option: numoracle's profiles are Hypothesis
                                       settings profiles (numoracle.profiles), registered when
                                       this plugin is imported
    --numoracle-mode statistical|fixed
    --numoracle-seed N                 seed of the searches (else --hypothesis-seed, else the
                                       profile's: derandomized under ci, random otherwise)
    --numoracle-backend interpreter|gpu|auto
    --numoracle-corpus DIR             where property tests save their findings (default
                                       .numoracle/corpus under the rootdir), and collect DIR's
                                       saved cases as test items

A property test of "operator + kernel"::

    from numoracle.pytest_plugin import property_test

    test_my_rms_norm = property_test("rms_norm", kernel="mypkg.kernels:rms_norm")

    @property_test("softmax", kernel="correct", formats=["bf16"])
    def test_softmax(result):          # optional: more assertions on the RunResult
        assert result.totals.cases >= 10

A property test is a Hypothesis search like any other: it runs under the loaded Hypothesis
profile (examples, derandomize, the example database in ``.hypothesis/examples``, phases,
verbosity) and numoracle's profile of the same name (shape caps, time budget); its
``event()``/``target()`` statistics appear under ``--hypothesis-show-statistics``.  It first
replays the cases it saved in its corpus, re-running its kernel on each - a kernel still
wrong fails on that first example, a fixed one goes on to the search, which judges the
finding it kept in the example database first (``runner.findings``).  A failure reads: the verdict's explanation, how it was found,
the replay line.

Fixtures: ``numoracle_backend`` (the selected backend), ``numoracle_settings`` (numoracle's
settings under the session's profile), ``numoracle_corpus`` (the corpus directory).

Saved corpus cases (``corpora/**/case.json``, or those under ``--numoracle-corpus``) are
collected as test items that replay the case in both modes - not a JSON file that is no
numoracle case, nor a case expecting acceptance whose kernel can never be imported again (a
function of ``__main__``, a local function or lambda); a corrupt case is an item that fails
saying why, and an oracle regression case (``expect: reject``) passes while the fixed-input
mode still rejects it.  A case saved with ``expect:
accept`` (a bug to fix) passes once its kernel is accepted.

Loading the plugin imports numoracle (and with it torch, about a second) but changes nothing
for tests that do not use it: the backend (and with it ``TRITON_INTERPRET``) is chosen only
when a property test or corpus item runs, and Triton is not imported before then - unless
``--numoracle-backend interpreter`` names it, which selects the interpreter at configuration,
before any test module (and the kernels it imports at its top) is imported.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from . import backends, profiles
from .errors import InvalidArgument

# numoracle's profiles are Hypothesis's: registered now, before Hypothesis's own plugin loads
# --hypothesis-profile (at pytest_configure) and before a conftest could load_profile them
profiles.register()


@dataclass(frozen=True)
class Options:
    """The session's numoracle options (in ``config.stash``)."""
    mode: str = "statistical"
    seed: int | None = None
    backend: str = "auto"
    corpus: str | None = None          # --numoracle-corpus as given
    save_to: str = ".numoracle/corpus"  # where property tests save (the corpus, else the default)


_KEY = pytest.StashKey[Options]()


def options(config) -> Options:
    return config.stash.get(_KEY, Options())


def pytest_addoption(parser):
    g = parser.getgroup("numoracle", "numoracle property tests and corpora")
    g.addoption("--numoracle-mode", choices=("statistical", "fixed"), default="statistical",
                help="numoracle verdict mode (default statistical; rejects are confirmed in fixed mode)")
    g.addoption("--numoracle-seed", type=int, default=None,
                help="seed of numoracle's searches (default: --hypothesis-seed, else the Hypothesis profile's)")
    g.addoption("--numoracle-backend", choices=backends.NAMES, default="auto",
                help="where kernels run (default: auto, the GPU when there is one)")
    g.addoption("--numoracle-corpus", default=None, metavar="DIR",
                help="save property tests' findings under DIR (default .numoracle/corpus under the rootdir) "
                     "and collect DIR's saved cases as test items")


def pytest_configure(config):
    corpus = config.getoption("--numoracle-corpus")
    save_to = Path(corpus) if corpus else Path(config.rootpath) / ".numoracle" / "corpus"
    config.stash[_KEY] = Options(mode=config.getoption("--numoracle-mode"), seed=config.getoption("--numoracle-seed"),
                                 backend=config.getoption("--numoracle-backend"), corpus=corpus,
                                 save_to=str(save_to.resolve()))
    config.addinivalue_line("markers", "numoracle: a numoracle property test or corpus replay")
    if config.getoption("--numoracle-backend") == "interpreter":
        # asked for by name: chosen before the test modules are imported, so that a kernel module
        # imported at the top of a test file is decorated for the interpreter (a kernel compiled
        # for a GPU fails on a machine without one with "0 active drivers")
        backends.select("interpreter")
    if corpus and Path(corpus).is_dir() and not any(Path(a).resolve() == Path(corpus).resolve()
                                                    for a in config.args if Path(a).exists()):
        config.args.append(str(corpus))


# ---- fixtures ---------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def numoracle_backend(pytestconfig):
    """The backend the session's kernels run on (``--numoracle-backend``), selected."""
    return backends.select(options(pytestconfig).backend)


@pytest.fixture(scope="session")
def numoracle_settings():
    """numoracle's settings under the session's profile (numoracle's profile named as the
    loaded Hypothesis profile, else the current settings); use it as ``settings=`` or in a
    ``with`` block."""
    return profiles.current()[1]


@pytest.fixture(scope="session")
def numoracle_corpus(pytestconfig) -> Path:
    """The directory property tests save their findings in (and replay them from)."""
    return Path(options(pytestconfig).save_to)


# ---- corpus items -----------------------------------------------------------------------------

# corpus.CASE_FILE, corpus.ARRAYS_FILE and corpus.SCHEMA (numoracle.corpus imports torch: not at
# collection)
CASE_FILE, ARRAYS_FILE, SCHEMA = "case.json", "inputs.npz", "numoracle.corpus/1"


def _in_corpus(path: Path, config) -> bool:
    corpus = options(config).corpus
    try:
        if corpus and Path(corpus).resolve() in path.resolve().parents:
            return True
    except (OSError, RuntimeError):        # a symlink loop on the way: judged by its parts
        pass
    return "corpora" in path.parts


def pytest_collect_file(file_path, parent):
    """A case is collected from its case.json, or from its inputs.npz where the case.json
    beside it is not a regular file (missing, a directory, a FIFO, a broken link): pytest
    offers only regular files, and such a case must fail as corrupt, not vanish.  A readable
    case.json is collected only where it is a case that can pass (``_replayable``)."""
    if file_path.name not in (CASE_FILE, ARRAYS_FILE) or any(p.startswith(".tmp-") for p in file_path.parts):
        return None
    if file_path.name == ARRAYS_FILE:
        if os.path.isfile(file_path.parent / CASE_FILE):
            return None                    # collected from its case.json (pytest offers a link to a file too)
    if not _in_corpus(file_path, parent.config):
        return None
    if file_path.name == CASE_FILE and not _replayable(file_path):
        return None
    return CorpusFile.from_parent(parent, path=file_path)


_META_LIMIT = 1 << 20     # a case.json larger than this is not read at collection (its item says why)


def _replayable(path: Path) -> bool:
    """Whether a regular ``case.json`` is an item.  Not: a JSON file that is no numoracle case
    (no numoracle schema and no inputs.npz beside it), and a well-formed case expecting
    acceptance that can never pass, whose kernel can never be imported again - a function of
    ``__main__``, a local function or a lambda.  Every
    other case is an item, a corrupt one too (it fails saying what is wrong with it: a case
    must not vanish), and one whose kernel does not import now (it fails saying so)."""
    try:
        with open(path, "rb") as fh:              # a regular file (pytest offers no other); bounded
            raw = fh.read(_META_LIMIT + 1)
        meta = json.loads(raw) if len(raw) <= _META_LIMIT else None
    except (OSError, ValueError, RecursionError):  # RecursionError: JSON nested too deep
        meta = None
    if meta is None:                              # unreadable: its item reports why
        return True
    numoracles = isinstance(meta, dict) and meta.get("schema") == SCHEMA
    if not numoracles:
        return (path.parent / ARRAYS_FILE).exists()   # a numoracle case gone wrong, or none at all
    kernel = meta.get("kernel")
    if meta.get("expect", "accept") != "accept" or not isinstance(kernel, dict) or \
            not isinstance(kernel.get("spec"), str):
        return True                               # an oracle regression case, or corrupt
    # a planted fault's case (faulty:NAME) expecting acceptance stays an item: it fails until
    # the operator's fault is gone, and the corrupt-case battery relies on such cases
    mod, sep, name = kernel["spec"].partition(":")
    return not (sep and (mod in ("__main__", "?") or "<" in name))


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
        r = replay(self.path.parent, backend=_backend_for_replay(self.config))
        if r["status"] == "corrupt":
            raise AssertionError(f"{self.path.parent}: {r['reason']}")
        if r["passes"]:
            return
        if r.get("expect") == "reject":
            raise AssertionError(f"{self.path.parent}: saved as a reject numoracle must keep finding, but the "
                                 f"fixed-input mode now says {r['statuses'].get('fixed')!r} ({r['note']}).")
        if r["verdicts"]:
            from .errors import OracleViolation
            st = r["verdicts"]
            v = st["fixed"] if r["statuses"].get("fixed") == "reject" else st["statistical"]
            raise OracleViolation(v.explain(), v)
        raise AssertionError(f"{self.path.parent}: {r['note']}\nReplay: numoracle replay {self.path.parent}")

    def reportinfo(self):
        return self.path, 0, f"numoracle replay {self.path.parent}"

    def repr_failure(self, excinfo):
        return str(excinfo.value)


def _backend_for_replay(config):
    b = options(config).backend
    return None if b == "auto" else b


# ---- property tests ---------------------------------------------------------------------------

class PropertyFailure(AssertionError):
    """A property test's finding; its text is the failure's report (explanation first, the
    replay line last), shown as it is, without the plugin's frames."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """Around a property test, what Hypothesis's plugin does around a ``@given`` test: collect
    the search's statistics for ``--hypothesis-show-statistics``."""
    __tracebackhide__ = True
    if not getattr(getattr(item, "obj", None), "_numoracle_property_test", False):
        yield
        return
    from hypothesis.statistics import collector, describe_statistics
    found = []

    def note_statistics(stats):
        stats["nodeid"] = item.nodeid
        found.append(describe_statistics(stats))

    with collector.with_value(note_statistics):
        yield
    if found:
        item.hypothesis_statistics = "\n".join(found)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if call.when == "call" and call.excinfo is not None and isinstance(call.excinfo.value, PropertyFailure):
        report.longrepr = str(call.excinfo.value)


def _saved_cases(directory: Path, op_name: str, kspec: str) -> list:
    """The cases this test saved before (its operator and kernel; expect: accept), oldest first."""
    from .corpus import slug
    where = directory / op_name / slug(kspec)
    found = []
    for cj in where.glob("*/case.json") if where.is_dir() else ():
        try:
            meta = json.loads(cj.read_text())
        except (OSError, ValueError):
            continue
        if meta.get("expect", "accept") == "accept" and meta.get("kernel", {}).get("spec") == kspec:
            found.append((meta.get("created", ""), cj.parent))
    return [p for _, p in sorted(found)]


def _failure(explanation: str, found_by: str, notes, replay_line: str | None) -> PropertyFailure:
    lines = [ln for ln in explanation.rstrip().split("\n") if not ln.startswith("Replay: ")]
    lines.append(found_by)
    lines += [n for n in notes if n]
    if replay_line:
        lines.append(replay_line)
    return PropertyFailure("\n".join(lines))


def property_test(op, kernel="correct", *, formats=None, groups=None, rows=None, cols=None, params=None,
                  configs=None, max_examples=None, backend=None, mode=None, timeout=60.0, allow_uncertified=True):
    """A pytest test function that replays the cases it saved, then fuzzes ``kernel`` of
    operator ``op`` under the session's Hypothesis profile, and fails with the verdict's
    explanation (and the saved case's replay line) on a confirmed counterexample, a kernel
    error, NaN output or timeout.  Statistical-only rejects are reported, not failures.
    ``max_examples`` overrides the profile's.  Decorate a function taking the RunResult to add
    assertions."""

    def run(config, extra=None):
        __tracebackhide__ = True
        from hypothesis import core

        from .operators import resolve as resolve_op
        from .runner import fuzz
        from .runner.kernels import resolve as resolve_kernel
        from .runner.replay import replay
        from .strategies import cases
        opts = options(config)
        hs, ns = profiles.current()
        chosen_backend = backend or opts.backend
        corpus = Path(opts.save_to)
        # the cases saved before come first, the kernel re-run on each as this test defines it
        try:
            backends.select(chosen_backend)
            o = resolve_op(op)
            _, kspec = resolve_kernel(o, kernel)
        except InvalidArgument as exc:     # the test's own arguments: the message, not numoracle's frames
            raise PropertyFailure(f"property_test({op!r}, kernel={kernel!r}): {exc}") from None
        for case_dir in _saved_cases(corpus, o.name, kspec):
            r = replay(case_dir, kernel=kernel, backend=None if chosen_backend == "auto" else chosen_backend,
                       timeout=timeout)
            if r["passes"]:
                continue
            v = None
            if r["verdicts"]:
                v = r["verdicts"]["fixed"] if r["statuses"].get("fixed") == "reject" else r["verdicts"]["statistical"]
            raise _failure(v.explain() if v is not None else f"{o.name}/{kspec}: {r.get('note') or r.get('reason')}",
                           f"Replayed first: the case this test saved at {case_dir} still fails "
                           f"({r['status']}; {r.get('note', '')}).", (),
                           f"Replay: numoracle replay {case_dir}")
        seed = opts.seed if opts.seed is not None else core.global_force_seed
        strategy = cases(op, formats=formats, groups=groups, rows=rows, cols=cols, params=params, configs=configs,
                         max_rows=None if rows else ns.max_rows, max_cols=None if cols else ns.max_cols)
        res = fuzz(op, kernel, backend=chosen_backend, mode=mode or opts.mode,
                   max_examples=max_examples or hs.max_examples, seconds=ns.time_budget or None, strategy=strategy,
                   seed=seed, derandomize=hs.derandomize and seed is None, database=hs.database, timeout=timeout,
                   shrink_seconds=ns.shrink_seconds, corpus=corpus, hypothesis_settings=hs)
        how = (f"Found by {res.shrunk_from!r} ({res.totals.cases} cases, "
               + (f"--numoracle-seed {res.seed}" if res.seed is not None else "derandomized") + ")")
        if res.counterexample is not None:
            ce = res.counterexample
            # the explanation above is of the shrunk case, which the found one need not resemble
            how += f", shrunk to inputs {ce.shapes()} in {res.shrink_evaluations} kernel runs"
            raise _failure(ce.explain(), how, res.hypothesis_report,
                           f"Replay: numoracle replay {res.saved}" if res.saved else
                           f"Not saved: {res.save_error}")
        if res.errors:
            lines = "\n".join(f"  {o.status}: {o.case!r}: {o.error or 'NaN/inf where the reference is finite'}"
                              for o in res.errors[:5])
            raise PropertyFailure(f"{res.op}/{res.kernel}: {len(res.errors)} kernel failure(s) on {res.totals.cases} "
                                  f"cases:\n{lines}")
        if not allow_uncertified and res.totals.uncertified:
            raise PropertyFailure(f"{res.op}/{res.kernel}: {res.totals.uncertified} uncertified case(s).")
        if extra is not None:
            extra(res)
        return None

    kname = kernel if isinstance(kernel, str) else getattr(kernel, "__name__", "kernel")
    # ``request`` is the only parameter pytest sees (``result`` is ours, not a fixture)
    signature = inspect.Signature([inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD)])

    def test(*args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]) and not hasattr(args[0], "config"):
            fn = args[0]

            @functools.wraps(fn)
            def decorated(request):
                __tracebackhide__ = True
                return run(request.config, fn)
            del decorated.__wrapped__
            decorated.__signature__ = signature
            decorated._numoracle_property_test = True
            return pytest.mark.numoracle(decorated)
        __tracebackhide__ = True
        request = kwargs.get("request", args[0] if args else None)
        return run(request.config)

    test.__name__ = f"test_{op}_{''.join(ch if ch.isalnum() else '_' for ch in kname)}"
    test.__qualname__ = test.__name__
    test.__signature__ = signature
    test._numoracle_property_test = True
    return pytest.mark.numoracle(test)
