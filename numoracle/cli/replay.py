"""``numoracle replay PATH...``: re-judge saved corpus cases in both modes."""

from __future__ import annotations

import json

from ..errors import InvalidArgument
from . import common



def add_arguments(p) -> None:
    p.add_argument("paths", nargs="+", metavar="PATH", help="case directories, case.json files or corpus directories")
    p.add_argument("--kernel", default=None,
                   help="re-run this kernel (registered name or package.module:function) instead of the saved "
                        "outputs; registered kernels named in case.json are re-run without it")
    common.add_backend(p, default=None)
    p.add_argument("--brief", action="store_true", help="no explanation of the first reject")
    common.add_json(p)


def run(args) -> int:
    from .. import corpus
    from ..runner.replay import replay
    paths = corpus.find(args.paths)
    if not paths:
        raise InvalidArgument(f"no corpus cases under {args.paths}; expected directories holding case.json.")
    results, reproduced = [], False
    for p in paths:
        r = replay(p, kernel=args.kernel, backend=args.backend)
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
