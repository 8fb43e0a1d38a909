"""``numoracle replay PATH...``: re-judge saved corpus cases in both modes."""

from __future__ import annotations


from ..errors import InvalidArgument
from . import common



def add_arguments(p) -> None:
    p.add_argument("paths", nargs="+", metavar="PATH", help="case directories, case.json files or corpus directories")
    p.add_argument("--kernel", default=None,
                   help="re-run this kernel (registered name or package.module:function) instead of the one the "
                        "case records")
    p.add_argument("--saved-outputs", action="store_true",
                   help="re-judge the outputs saved with each case instead of re-running its kernel")
    common.add_backend(p, default=None)
    common.add_isolate(p)
    common.add_timeout(p, default=120.0)
    p.add_argument("--brief", action="store_true", help="no explanation of the first reject")
    common.add_json(p)


def _line(r) -> str:
    if r["status"] == "corrupt":
        return f"{r['path']}: corrupt: {r['reason']}"
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
    return line


def run(args) -> int:
    from .. import corpus
    from ..runner.replay import STATUSES, replay, worst
    paths = corpus.find(args.paths)
    if not paths:
        raise InvalidArgument(f"no corpus cases under {args.paths}; expected directories holding case.json.")
    results = []
    for p in paths:
        with common.isolation(args):
            r = replay(p, kernel=args.kernel, backend=args.backend, saved_outputs=args.saved_outputs,
                       timeout=args.timeout)
        results.append(r)
        if not args.json:
            print(_line(r), flush=True)
    if args.json:
        common.emit_json(args, [{k: v for k, v in r.items() if k != "verdicts"} for r in results])
    else:
        counts = {s: sum(r["status"] == s for r in results) for s in STATUSES}
        print(f"{len(results)} case(s): " + ", ".join(f"{n} {s}" for s, n in counts.items() if n))
        first = next((r for r in results if r["verdicts"] and r["reproduced"]), None)
        if first is not None and not args.brief:
            v = first["verdicts"]["fixed"] if first["statuses"]["fixed"] == "reject" else \
                first["verdicts"]["statistical"]
            print()
            print(v.explain())
    return STATUSES.index(worst(results))
