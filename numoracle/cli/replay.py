"""``numoracle replay PATH...``: re-judge saved corpus cases in both modes: one line per case
(every case, whatever the others give) and the worst status as the exit code (0 ok, 1
reproduced, 2 corrupt, not replayable here, or a path holding no case); ``--json``: one JSON
document, a case that is sound but cannot run here marked ``"here": true``."""

from __future__ import annotations


from ..errors import InvalidArgument
from . import common



def add_arguments(p) -> None:
    p.add_argument("paths", nargs="+", metavar="PATH", help="case directories, case.json files or corpus directories")
    p.add_argument("--kernel", default=None,
                   help="re-run this kernel (registered name or package.module:function) instead of the one the "
                        "case records (default: the recorded one)")
    p.add_argument("--saved-outputs", action="store_true",
                   help="re-judge the outputs saved with each case instead of re-running its kernel")
    common.add_backend(p, default=None, help_default="the backend each case records")
    common.add_isolate(p)
    common.add_timeout(p, default=120.0)
    p.add_argument("--brief", action="store_true", help="no explanation of the first reject")
    common.add_json(p)


def _shown(text: str) -> str:
    """``text`` printable on any stdout: a path's undecodable bytes (surrogate escapes) as
    backslash escapes, not a UnicodeEncodeError that ends the run."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _line(r) -> str:
    if r["status"] == "corrupt":
        return _shown(f"{r['path']}: {'cannot be replayed here' if r.get('here') else 'corrupt'}: {r['reason']}")
    st = r["statuses"]
    saved = r.get("saved_statuses", {})
    line = (f"{r['path']}: {r['status']}"
            + (f" (statistical {st.get('statistical')}, fixed {st.get('fixed')}; saved: {saved.get('statistical')}, "
               f"{saved.get('fixed')})" if st else "")
            + f"; {r['note']}")
    if st:
        line += (f"; certificate {'holds' if r.get('certificate_holds') else 'fails'}"
                 f"{'' if r.get('certificate_same', True) else ' (differs from the saved one)'}")
    if r.get("expect") == "reject":
        line += "; an oracle regression case: " + ("still rejected" if r["passes"] else "NO LONGER REJECTED")
    return _shown(line)


def _cases(paths):
    """(case directories, results for the paths that hold none): a path that is not a case
    or holds no case is reported, and the others are still replayed."""
    from .. import corpus
    from ..runner.replay import corrupt
    cases, problems = [], []
    for p in paths:
        try:
            found = corpus.find([p])
        except InvalidArgument as exc:
            problems.append(corrupt(p, str(exc)))
            continue
        if not found:
            problems.append(corrupt(p, f"{p}: no corpus cases under it; expected directories holding "
                                        f"{corpus.CASE_FILE} and {corpus.ARRAYS_FILE}."))
        cases += [c for c in found if c not in cases]
    return cases, problems


def run(args) -> int:
    import contextlib
    import sys

    from .. import backends
    from ..runner.replay import STATUSES, replay, worst
    if args.backend is not None:
        backends.select(args.backend)          # a backend this machine lacks: one error, not one per case
    cases, problems = _cases(args.paths)
    for r in problems:                          # a path given by mistake is a usage error, said on stderr
        print(_shown(f"numoracle: error: {r['reason']}"), file=sys.stderr, flush=True)
    results = []
    # under --json, stdout holds the one JSON document: whatever a kernel prints goes to stderr
    quiet = contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext()
    for p in cases:
        with quiet, common.isolation(args):
            r = replay(p, kernel=args.kernel, backend=args.backend, saved_outputs=args.saved_outputs,
                       timeout=args.timeout)
        results.append(r)
        if not args.json:
            print(_line(r), flush=True)
    if args.json:
        common.emit_json(args, [{k: v for k, v in r.items() if k != "verdicts"} for r in problems + results])
    else:
        counts = {s: sum(r["status"] == s and not r.get("here") for r in results) for s in STATUSES}
        counts["not replayable here"] = sum(bool(r.get("here")) for r in results)
        print(f"{len(results)} case(s): " + (", ".join(f"{n} {s}" for s, n in counts.items() if n) or "none")
              + (f"; {len(problems)} path(s) holding no case" if problems else ""))
        first = next((r for r in results if r["verdicts"] and r["reproduced"]), None)
        if first is not None and not args.brief:
            v = first["verdicts"]["fixed"] if first["statuses"]["fixed"] == "reject" else \
                first["verdicts"]["statistical"]
            print()
            print(_shown(v.explain()))
    return STATUSES.index(worst(problems + results))
