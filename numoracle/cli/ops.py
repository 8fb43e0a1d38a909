"""``numoracle ops [OP ...]``: the registered operators (or those named), with the signature
a kernel of each must have."""

from __future__ import annotations

import json

from . import common



def add_arguments(p) -> None:
    p.add_argument("op", nargs="*", metavar="OP",
                   help="operators to show: registered names or package.module:attribute (default: every "
                        "registered operator)")
    common.add_json(p)


def run(args) -> int:
    from .. import operators
    ops = [operators.resolve(o) for o in args.op] if args.op else [operators.get(n) for n in operators.names()]
    rows = [op.to_dict() for op in ops]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    w = max([len("operator")] + [len(r["name"]) for r in rows])
    ws = max([len("source")] + [len(r["source"]) for r in rows])
    print(f"{'operator':{w}s}  {'source':{ws}s} {'formats':15s} {'backward':8s}  {'variants'}")
    for r in rows:
        up = f"  (+ upstream: {', '.join(r['upstream'])})" if r.get("upstream") else ""
        print(f"{r['name']:{w}s}  {r['source']:{ws}s} {','.join(r['formats']):15s} {'yes' if r['backward'] else '':8s}  "
              f"{', '.join(r['variants'])}{up}")
        print(f"{'':{w}s}    {r['signature']}")
    return 0
