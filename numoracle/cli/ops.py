"""``numoracle ops``: the registered operators."""

from __future__ import annotations


from . import common



def add_arguments(p) -> None:
    common.add_json(p)


def run(args) -> int:
    from .. import operators
    rows = [operators.get(n).to_dict() for n in operators.names()]
    if args.json:
        common.emit_json(args, rows)
        return 0
    w = max(len(r["name"]) for r in rows) if rows else 8
    print(f"{'operator':{w}s}  {'source':8s} {'formats':15s} {'backward':8s}  {'variants'}")
    for r in rows:
        up = f"  (+ upstream: {', '.join(r['upstream'])})" if r.get("upstream") else ""
        print(f"{r['name']:{w}s}  {r['source']:8s} {','.join(r['formats']):15s} {'yes' if r['backward'] else '':8s}  "
              f"{', '.join(r['variants'])}{up}")
    return 0
