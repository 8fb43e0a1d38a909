"""``numoracle check OP`` and ``numoracle fuzz OP``: judge a kernel on generated cases;
shrink and save the first confirmed counterexample."""

from __future__ import annotations

import json

from . import common

STATUS_COLUMNS = ("cases", "accept", "reject", "statistical_only", "uncertified", "error", "nan", "timeout", "crash")


def add_arguments(p, command: str) -> None:
    common.add_operator(p)
    common.add_kernel(p)
    common.add_backend(p)
    common.add_mode(p)
    check = command == "check"
    p.add_argument("--examples", type=common.count, default=None,
                   help="cases Hypothesis draws (default: 12, after one case per input group)" if check else
                        "cases Hypothesis draws (default: no limit; the run ends at --seconds)")
    p.add_argument("--seconds", type=common.seconds, default=None,
                   help="time budget of the search (default: none; the run ends after --examples)" if check else
                        "time budget of the search (default: 60 when no --examples is given, else none); with "
                        "--workers or --executor, of each search: --units searches per input group share the "
                        "workers, so 11 groups x 4 units on 2 workers take about 22 x SECONDS")
    common.add_seed(p, default=0 if check else None,
                    help="seed of the search" if check else "seed of the search (default: a random one, printed)")
    common.add_format(p)
    p.add_argument("--rows", type=common.positive_int, default=None,
                   help="fix the number of rows (default: drawn; check's one case per group has 4, at most --max-rows)" if check else
                        "fix the number of rows (default: drawn)")
    p.add_argument("--cols", type=common.positive_int, default=None,
                   help="fix the number of columns (default: drawn; check's one case per group has 96, at most --max-cols)" if check
                        else "fix the number of columns (default: drawn)")
    p.add_argument("--max-rows", type=common.positive_int, default=None,
                   help="cap drawn rows (default: 8)" if check else
                        "cap drawn rows (default: none, the operator's domain)")
    p.add_argument("--max-cols", type=common.positive_int, default=None,
                   help="cap drawn columns (default: 256)" if check else
                        "cap drawn columns (default: none, the operator's domain)")
    common.add_groups(p)
    common.add_params(p)
    p.add_argument("--corpus", default="corpora", type=common.corpus_dir,
                   help="where counterexamples are saved (a directory; created when one is)")
    p.add_argument("--no-save", action="store_true", help="do not save the counterexample")
    p.add_argument("--expect", default="accept", choices=("accept", "reject"),
                   help="what a replay of the saved case as a pytest item must give: 'accept' (a bug to fix) "
                        "or 'reject' (an oracle regression case for a known-faulty kernel)")
    common.add_timeout(p)
    common.add_isolate(p, default=command == "fuzz")
    p.add_argument("--no-shrink", action="store_true", help="save the counterexample as found, unshrunk")
    p.add_argument("--shrink-seconds", type=common.seconds, default=30.0, help="time budget of the shrinking")
    if command == "fuzz":
        p.add_argument("--database", default=".hypothesis/examples",
                       help="example database directory, Hypothesis's own by default: numoracle keeps the run's "
                            "finding there and the next run of the operator, kernel and mode judges it first (until it "
                            "passes); 'none' to disable (with --workers or "
                            "--executor each unit is a search seeded by --seed + its number, without a database: "
                            "its findings are saved under --corpus, for numoracle replay)")
        common.add_executor(p)
        p.add_argument("--units", type=common.positive_int, default=None,
                       help="with --executor dask or --workers: Hypothesis searches per input group (seeds --seed.., "
                            "default 4), each of --examples cases (default 20) or --seconds")
    p.add_argument("--quiet", action="store_true",
                   help="no progress line on stderr (there is none anyway when stderr is not a terminal: the "
                        "line is rewritten in place)")
    common.add_json(p)


def check_shape(rows, cols, max_rows, max_cols) -> tuple:
    """The shape of check's one case per input group: --rows/--cols where given, else 4 x 96
    within the caps the drawn cases keep (--max-rows/--max-cols)."""
    return rows or min(4, max_rows), cols or min(96, max_cols)


def run(args, command: str) -> int:
    from .. import operators
    from ..runner import fuzz
    from ..strategies import cases, explicit_cases
    op = operators.resolve(args.op)
    groups = common.groups(args)
    fmts = common.formats(args, op)
    fixed = common.params(args, op)
    choices = {k: (v,) for k, v in fixed.items()} or None
    seconds = args.seconds
    if command == "fuzz":
        from ..studies.executors import wants_executor
        if wants_executor(args):
            from ..studies.executors.fuzz import run_from_cli
            return run_from_cli(args, op=op, groups=groups, formats=fmts, seconds=seconds, params=choices)
    if command == "check":
        examples = 12 if args.examples is None else args.examples
        max_rows, max_cols = args.max_rows or 8, args.max_cols or 256
        rows, cols = check_shape(args.rows, args.cols, max_rows, max_cols)
        explicit = explicit_cases(op, formats=fmts, groups=groups, rows=rows, cols=cols, seed=args.seed,
                                  params=fixed)
        database = None
    else:
        examples = 10**9 if args.examples is None else args.examples
        if seconds is None and args.examples is None:
            seconds = 60.0
        max_rows, max_cols = args.max_rows, args.max_cols
        explicit = ()
        database = None if args.database == "none" else args.database
    strategy = cases(op, formats=fmts, groups=groups, rows=args.rows, cols=args.cols,
                     max_rows=None if args.rows else max_rows, max_cols=None if args.cols else max_cols,
                     params=choices)
    corpus = None if args.no_save else args.corpus
    with common.isolation(args):
        res = fuzz(op, args.kernel, backend=args.backend, mode=args.mode, max_examples=max(examples, 1) if examples else 1,
                   seconds=seconds, strategy=strategy, explicit=explicit, seed=args.seed, database=database,
                   timeout=args.timeout, shrink=not args.no_shrink, shrink_seconds=args.shrink_seconds,
                   corpus=corpus, expect=args.expect, progress=not args.quiet)
    if args.json:
        common.emit_json(args, res.to_dict())
        return res.exit_code()
    print_result(res, seed_drawn=command == "fuzz" and args.seed is None)
    return res.exit_code()


def print_result(res, seed_drawn: bool = False) -> None:
    from ..runner.outcomes import compile_note
    t = res.totals
    print(f"{res.op} / {res.kernel} on {res.backend} ({res.mode}): {t.cases} cases in {res.elapsed:.1f}s "
          f"({res.cases_per_second:.1f}/s) - {res.exit_reason}")
    if seed_drawn and res.seed is not None:
        print(f"  seed {res.seed} (drawn for this run; --seed {res.seed} repeats its search)")
    print(f"  {'group':16s}" + "".join(f"{c:>17s}" if c == "statistical_only" else f"{c:>12s}"
                                        for c in STATUS_COLUMNS))
    for g, s in sorted(res.groups.items()):
        d = s.to_dict()
        print(f"  {g:16s}" + "".join(f"{d[c]:>17d}" if c == "statistical_only" else f"{d[c]:>12d}"
                                      for c in STATUS_COLUMNS))
    for g in sorted(res.uncertified_causes):
        # one line per first failing site (in program order), with the later sites that fail in
        # those cases (an overflow usually overflows what comes after it)
        firsts: dict = {}
        examples = res.uncertified_cause_examples.get(g, {})
        for sites, n in res.causes(g):        # the most frequent first: its first case is the example
            first, *later = sites
            entry = firsts.setdefault(first, [0, {}, examples.get(sites)])
            entry[0] += n
            entry[1].update(dict.fromkeys(later))
        for first, (n, after, ex) in sorted(firsts.items(), key=lambda kv: (-kv[1][0], kv[0]))[:3]:
            at = f"; e.g. {ex['element']}: {'; '.join(ex['inputs'])}" if ex and ex.get("inputs") else ""
            also = f"; later sites failing in them: {', '.join(after)}" if after else ""
            print(f"  uncertified in {g}: {first} ({n} case{'s' if n > 1 else ''}{at}){also}")
    for o in res.errors[:5]:
        print(f"  {o.status}: {o.case!r}: {o.error or 'NaN/inf where the reference is finite'}")
    for o in res.statistical_only[:3]:
        print(f"  statistical-only (not a counterexample): {o.case!r}")
    for w in res.warnings:
        print(f"  warning: {w}")
    if res.memory:
        m = res.memory
        print(f"  memory ({res.isolation}): {m['start_mb']:.0f} -> {m['end_mb']:.0f} MiB over {m['cases']} cases "
              f"(peak {m['peak_mb']:.0f})")
    note = compile_note(res.times.to_dict(t.cases))
    if note:
        print(f"  {note}")
    if res.isolation.startswith("in-process:"):
        print(f"  kernels ran {res.isolation}")
    ce = res.counterexample
    if ce is not None:
        what = "Counterexample" if ce.status == "reject" else f"Finding ({ce.status})"
        print()
        print(f"{what} found by {res.shrunk_from!r}")
        print(f"shrunk in {res.shrink_evaluations} evaluations ({res.shrink_seconds:.1f}s) to inputs {ce.shapes()}, "
              f"failure class {list(ce.failure_class) if ce.failure_class else None}")
        text = ce.explain()
        print(text)
        if res.saved:
            print(f"Saved: {res.saved}")
            if "\nReplay: " not in text:
                # a verdict's explanation ends with its replay line; a crash, timeout or error
                # finding has none: one copy-pasteable line either way
                print(f"Replay: numoracle replay {res.saved}")
        elif res.save_error:
            if ce.case is not None:
                print(f"Not saved; the case as drawn: {json.dumps(ce.case.to_dict(), default=str)}")
            print(f"error: {res.save_error}")
    if res.exit_reason in ("interrupted", "terminated"):
        print(f"  run {res.exit_reason}: exit code {res.exit_code()}")


__all__ = ["add_arguments", "run"]
