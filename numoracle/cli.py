"""The ``numoracle`` command line.  Exit codes: 0 nothing found, 1 a
counterexample / violation, 2 usage or input error (DESIGN §3)."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys

from .errors import InvalidArgument, NumoracleError

# Subcommands that live beside the stage they drive: each module defines
# add_arguments(parser) and run(args) -> exit code.  Kept light to import.
SUBCOMMANDS = {
    "calibrate": ("numoracle.mathlib.calibrate", "measure math-library errors and write a profile"),
    "mutate": ("numoracle.mutation.cli", "mutation testing of an operator's kernels against every oracle"),
    "stress-tolerances": ("numoracle.stress", "search (atol, rtol) configurations for false alarms and misses"),
    "campaign": ("numoracle.campaign", "the paper's evaluation on one backend (resumable; --quick for CI)"),
    "report": ("numoracle.campaign.report", "HTML and Markdown report of a campaign directory"),
    "plan": ("numoracle.plan.cli", "the kernel's precision plan from its compiled Triton IR, checked against the reference"),
}

STATUS_COLUMNS = ("cases", "accept", "reject", "statistical_only", "uncertified", "error", "nan", "timeout")


def cmd_ops(args) -> int:
    from . import operators
    rows = [operators.get(n).to_dict() for n in operators.names()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    w = max(len(r["name"]) for r in rows) if rows else 8
    print(f"{'operator':{w}s}  {'source':8s} {'formats':15s} {'backward':8s}  {'variants'}")
    for r in rows:
        up = f"  (+ upstream: {', '.join(r['upstream'])})" if r.get("upstream") else ""
        print(f"{r['name']:{w}s}  {r['source']:8s} {','.join(r['formats']):15s} {'yes' if r['backward'] else '':8s}  "
              f"{', '.join(r['variants'])}{up}")
    return 0


def _budget(args):
    if args.seconds is not None and args.minutes is not None:
        raise InvalidArgument("give --seconds or --minutes, not both.")
    if args.minutes is not None:
        return 60.0 * args.minutes
    return args.seconds


def _groups(args):
    if not args.shift:
        return None
    from .strategies import GROUPS
    names = [g for s in args.shift for g in s.split(",") if g]
    bad = [g for g in names if g not in GROUPS]
    if bad:
        raise InvalidArgument(f"--shift {','.join(bad)}: unknown input-shift group; expected one of {list(GROUPS)}.")
    return names


def _formats(args, op):
    if args.dtype is None:
        return None
    from . import formats as F
    name = F.by_name(args.dtype).name
    if name not in op.domain.formats:
        raise InvalidArgument(f"--dtype {args.dtype}: {op.name} is defined on {list(op.domain.formats)}.")
    return [name]


def _run(args, *, command: str) -> int:
    from . import operators
    from .runner import fuzz
    from .strategies import cases, explicit_cases
    op = operators.get(args.op)
    groups = _groups(args)
    fmts = _formats(args, op)
    seconds = _budget(args)
    if args.examples is not None and args.examples < 0:
        raise InvalidArgument(f"--examples {args.examples}: expected a count >= 0.")
    if command == "fuzz":
        from .executor import wants_executor
        if wants_executor(args):
            from .executor.fuzz import run_from_cli
            return run_from_cli(args, op=op, groups=groups, formats=fmts, seconds=seconds)
    if command == "check":
        examples = 12 if args.examples is None else args.examples
        max_rows, max_cols = args.max_rows or 8, args.max_cols or 256
        explicit = explicit_cases(op, formats=fmts, groups=groups, rows=args.rows or 4, cols=args.cols or 96,
                                  seed=args.seed)
        database = None
    else:
        examples = 10**9 if args.examples is None else args.examples
        if seconds is None and args.examples is None:
            seconds = 60.0
        max_rows, max_cols = args.max_rows, args.max_cols
        explicit = ()
        database = None if args.database == "none" else args.database
    strategy = cases(op, formats=fmts, groups=groups, rows=args.rows, cols=args.cols,
                     max_rows=None if args.rows else max_rows, max_cols=None if args.cols else max_cols)
    corpus = None if args.no_save else args.corpus
    res = fuzz(op, args.kernel, backend=args.backend, mode=args.mode, max_examples=max(examples, 1) if examples else 1,
               seconds=seconds, strategy=strategy, explicit=explicit, seed=args.seed, database=database,
               timeout=args.timeout, isolate=args.isolate, shrink=not args.no_shrink,
               shrink_seconds=args.shrink_seconds, corpus=corpus, expect=args.expect,
               progress=not args.json and not args.quiet)
    if args.json:
        print(json.dumps(res.to_dict(), indent=2, default=str))
        return res.exit_code()
    _print_result(res)
    return res.exit_code()


def _print_result(res) -> None:
    t = res.totals
    print(f"{res.op} / {res.kernel} on {res.backend} ({res.mode}): {t.cases} cases in {res.elapsed:.1f}s "
          f"({res.cases_per_second:.1f}/s) - {res.exit_reason}")
    print(f"  {'group':16s}" + "".join(f"{c:>17s}" if c == "statistical_only" else f"{c:>12s}"
                                        for c in STATUS_COLUMNS))
    for g, s in sorted(res.groups.items()):
        d = s.to_dict()
        print(f"  {g:16s}" + "".join(f"{d[c]:>17d}" if c == "statistical_only" else f"{d[c]:>12d}"
                                      for c in STATUS_COLUMNS))
    for o in res.errors[:5]:
        print(f"  {o.status}: {o.case!r}: {o.error or 'NaN/inf where the reference is finite'}")
    for o in res.statistical_only[:3]:
        print(f"  statistical-only (not a counterexample): {o.case!r}")
    ce = res.counterexample
    if ce is not None:
        shape = " x ".join(str(list(x.shape)) for x in ce.inputs if hasattr(x, "shape"))
        print()
        print(f"Counterexample found by {res.shrunk_from!r}")
        print(f"shrunk in {res.shrink_evaluations} evaluations ({res.shrink_seconds:.1f}s) to inputs {shape}, "
              f"failure class {list(ce.failure_class) if ce.failure_class else None}")
        print(ce.verdict.explain())
        if res.saved:
            print(f"Saved: {res.saved}")


def cmd_check(args) -> int:
    return _run(args, command="check")


def cmd_fuzz(args) -> int:
    return _run(args, command="fuzz")


def cmd_replay(args) -> int:
    from . import corpus
    paths = corpus.find(args.paths)
    if not paths:
        raise InvalidArgument(f"no corpus cases under {args.paths}; expected directories holding case.json.")
    results, reproduced = [], False
    for p in paths:
        r = corpus.replay(p, kernel=args.kernel, backend=args.backend)
        reproduced |= r["reproduced"]
        results.append(r)
        if not args.json:
            st = r["statuses"]
            line = (f"{r['path']}: statistical {st.get('statistical', '-')}, fixed {st.get('fixed', '-')}"
                    f" (saved: {r.get('saved_statuses', {}).get('statistical')}, "
                    f"{r.get('saved_statuses', {}).get('fixed')}); {r.get('note', r.get('error'))}; "
                    f"certificate {'holds' if r.get('certificate_holds') else 'fails'}"
                    f"{'' if r.get('certificate_same', True) else ' (differs from the saved one)'}"
                    f"{' - reject reproduced' if r['reproduced'] else ''}")
            print(line)
    if args.json:
        print(json.dumps([{k: v for k, v in r.items() if k != "verdicts"} for r in results], indent=2))
    else:
        first = next((r for r in results if r["reproduced"]), None)
        if first is not None and not args.brief:
            v = first["verdicts"]["fixed"] if first["statuses"]["fixed"] == "reject" else \
                first["verdicts"]["statistical"]
            print()
            print(v.explain())
    return 1 if reproduced else 0


def _exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:          # a parent package is not there (yet)
        return False


def _add_run_arguments(p, *, command: str) -> None:
    p.add_argument("op", help="a registered operator (numoracle ops)")
    p.add_argument("--kernel", default="correct",
                   help="a registered kernel name (correct, a variant, faulty:NAME) or package.module:function "
                        "importable from the current directory")
    p.add_argument("--backend", default="interpreter", choices=("interpreter", "gpu", "auto"))
    p.add_argument("--mode", default="statistical", choices=("statistical", "fixed"))
    p.add_argument("--examples", type=int, default=None,
                   help="cases Hypothesis draws (check: 12, after one case per input group; fuzz: unbounded)")
    p.add_argument("--seconds", type=float, default=None, help="time budget of the search (fuzz: 60 by default)")
    p.add_argument("--minutes", type=float, default=None, help="time budget in minutes")
    p.add_argument("--seed", type=int, default=0 if command == "check" else None,
                   help="seed of the search (check: 0; fuzz: random unless given)")
    p.add_argument("--dtype", "--format", dest="dtype", default=None,
                   help="restrict to one format of the operator's domain (default: drawn; check's group cases "
                        "use the first)")
    p.add_argument("--rows", type=int, default=None, help="fix the number of rows")
    p.add_argument("--cols", type=int, default=None, help="fix the number of columns")
    p.add_argument("--max-rows", type=int, default=None, help="cap drawn rows (check: 8)")
    p.add_argument("--max-cols", type=int, default=None, help="cap drawn columns (check: 256)")
    p.add_argument("--shift", action="append", default=None, metavar="GROUP",
                   help="restrict to input-shift group(s) (repeat or comma-separate)")
    p.add_argument("--corpus", default="corpora", help="where counterexamples are saved (default: corpora)")
    p.add_argument("--no-save", action="store_true", help="do not save the counterexample")
    p.add_argument("--expect", default="accept", choices=("accept", "reject"),
                   help="what a replay of the saved case as a pytest item must give: 'accept' (a bug to fix) "
                        "or 'reject' (an oracle regression case for a known-faulty kernel)")
    p.add_argument("--timeout", type=float, default=60.0, help="per-case kernel time limit in seconds")
    p.add_argument("--isolate", action="store_true",
                   help="run the kernel in a worker process killed at the time limit (GPU hangs)")
    p.add_argument("--no-shrink", action="store_true")
    p.add_argument("--shrink-seconds", type=float, default=30.0)
    if command == "fuzz":
        p.add_argument("--database", default=".numoracle/hypothesis",
                       help="Hypothesis example database directory (resumes long runs); 'none' to disable")
        from .executor import add_arguments as executor_arguments
        executor_arguments(p)
        p.add_argument("--units", type=int, default=None,
                       help="with --executor dask or --workers: Hypothesis searches per input group (seeds --seed.., "
                            "default 4), each of --examples cases (default 20) or --seconds")
    p.add_argument("--quiet", action="store_true", help="no progress line on stderr")
    p.add_argument("--json", action="store_true")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; ``only`` names the subcommand about to run (the other
    SUBCOMMANDS modules are not imported)."""
    from . import __version__
    p = argparse.ArgumentParser(prog="numoracle", description=__doc__)
    p.add_argument("--version", action="version", version=f"numoracle {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)
    ops = sub.add_parser("ops", help="list the registered operators")
    ops.add_argument("--json", action="store_true")
    ops.set_defaults(func=cmd_ops)
    ck = sub.add_parser("check", help="judge a kernel on one case per input group and 12 drawn cases; "
                                      "shrink and save a counterexample")
    _add_run_arguments(ck, command="check")
    ck.set_defaults(func=cmd_check)
    fz = sub.add_parser("fuzz", help="search for counterexamples within a time budget; shrink and save the first")
    _add_run_arguments(fz, command="fuzz")
    fz.set_defaults(func=cmd_fuzz)
    rp = sub.add_parser("replay", help="re-judge saved corpus cases in both modes (exit 1 if a reject reproduces)")
    rp.add_argument("paths", nargs="+", metavar="PATH", help="case directories, case.json files or corpus directories")
    rp.add_argument("--kernel", default=None,
                    help="re-run this kernel (registered name or package.module:function) instead of the saved "
                         "outputs; registered kernels named in case.json are re-run without it")
    rp.add_argument("--backend", default=None, choices=("interpreter", "gpu", "auto"))
    rp.add_argument("--brief", action="store_true", help="no explanation of the first reject")
    rp.add_argument("--json", action="store_true")
    rp.set_defaults(func=cmd_replay)
    for name, (module, help_) in SUBCOMMANDS.items():
        if not _exists(module):
            continue
        sp = sub.add_parser(name, help=help_)
        if only is not None and name != only:
            # not the subcommand being run: do not import it (its imports must not
            # decide Triton's mode before the backend is chosen, nor break others)
            sp.add_argument("rest", nargs=argparse.REMAINDER)
            sp.set_defaults(func=lambda a, n=name: main([n, *a.rest]))
            continue
        mod = importlib.import_module(module)
        mod.add_arguments(sp)
        sp.set_defaults(func=mod.run)
    return p


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(only=first if first in SUBCOMMANDS else "")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return 2 if exc.code else 0
    try:
        return args.func(args)
    except (InvalidArgument, NumoracleError) as exc:
        print(f"numoracle: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
