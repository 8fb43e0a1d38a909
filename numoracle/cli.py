"""The ``numoracle`` command line.  Exit codes: 0 nothing found, 1 a
counterexample / violation, 2 usage or input error (DESIGN §3)."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys
import time

from .errors import InvalidArgument, NumoracleError

# Subcommands that live beside the stage they drive: each module defines
# add_arguments(parser) and run(args) -> exit code.  Kept light to import.
SUBCOMMANDS = {
    "calibrate": ("numoracle.mathlib.calibrate", "measure math-library errors and write a profile"),
    "mutate": ("numoracle.mutation.cli", "mutation testing of an operator's kernels against every oracle"),
    "stress-tolerances": ("numoracle.stress", "search (atol, rtol) configurations for false alarms and misses"),
}

FAMILIES_DEFAULT = ("normal", "shifted_mean", "heavy_tailed", "scaled", "constant_rows", "pow2_grid")


def _kernel(op, spec: str):
    if ":" in spec:
        mod, _, fn = spec.partition(":")
        try:
            return getattr(importlib.import_module(mod), fn)
        except (ImportError, AttributeError) as exc:
            raise InvalidArgument(f"--kernel {spec!r}: cannot import it ({exc}); expected "
                                  f"package.module:function importable from the current directory.") from None
    if spec not in op.kernel_specs:
        raise InvalidArgument(f"--kernel {spec!r}: {op.name} has kernels {sorted(op.kernel_specs)}; "
                              f"or give package.module:function for your own.")
    return op.kernels[spec]


def cmd_ops(args) -> int:
    from . import operators
    rows = [operators.get(n).to_dict() for n in operators.names()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'operator':16s} {'source':8s} {'formats':16s} {'variants'}")
    for r in rows:
        print(f"{r['name']:16s} {r['source']:8s} {','.join(r['formats']):16s} {', '.join(r['variants'])}")
    return 0


def cmd_check(args) -> int:
    import torch

    from . import backends, operators
    from .check import check
    backend = backends.select(args.backend)
    dev = backends.device(backend)
    op = operators.get(args.op)
    kernel = _kernel(op, args.kernel)
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    results, t0 = [], time.time()
    counts = {"accept": 0, "reject": 0, "uncertified": 0, "error": 0}
    worst = None
    for i in range(args.examples):
        seed = args.seed + i
        fam = FAMILIES_DEFAULT[i % len(FAMILIES_DEFAULT)]
        dt = dtypes[args.dtype]
        inputs, params = op.example(seed, dtype=dt, family=fam, rows=args.rows, cols=args.cols)
        inputs = tuple(t.to(dev) for t in inputs)
        try:
            outs = kernel(*[t.clone() for t in inputs], **params)
        except Exception as exc:  # a kernel failure is an outcome, not the end of the run
            counts["error"] += 1
            results.append({"seed": seed, "family": fam, "status": "error", "error": repr(exc)[:300]})
            continue
        v = check(op.reference, outs, inputs, params, mode=args.mode, backend=backend)
        counts[v.status] += 1
        results.append({"seed": seed, "family": fam, "status": v.status, "rejected": v.n_rejected,
                        "uncertified": v.n_uncertified, "confirmation": v.confirmation})
        if v.status == "reject" and worst is None:
            worst = v
        if not args.json:
            print(f"  case {i + 1:3d}/{args.examples}  {fam:14s} seed={seed:<6d} {v.status}"
                  + (f" ({v.n_rejected} rejected, {v.confirmation})" if v.status == "reject" else "")
                  + (f" ({v.n_uncertified} uncertified)" if v.n_uncertified else ""), flush=True)
    elapsed = time.time() - t0
    summary = {"op": op.name, "kernel": args.kernel, "backend": backend, "mode": args.mode,
               "examples": args.examples, "counts": counts, "seconds": round(elapsed, 2), "cases": results}
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"{op.name} / {args.kernel} on {backend} ({args.mode}): {counts['accept']} accepted, "
              f"{counts['reject']} rejected, {counts['uncertified']} uncertified, {counts['error']} kernel errors "
              f"in {elapsed:.1f}s")
        if worst is not None:
            print()
            print(worst.explain())
    return 1 if counts["reject"] or counts["error"] else 0


def _exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:          # a parent package is not there (yet)
        return False


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="numoracle", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    ops = sub.add_parser("ops", help="list the registered operators")
    ops.add_argument("--json", action="store_true")
    ops.set_defaults(func=cmd_ops)
    ck = sub.add_parser("check", help="run an operator's kernel on generated inputs and judge every output")
    ck.add_argument("op")
    ck.add_argument("--kernel", default="correct", help="a registered kernel name or package.module:function")
    ck.add_argument("--backend", default="interpreter", choices=("interpreter", "gpu", "auto"))
    ck.add_argument("--mode", default="statistical", choices=("statistical", "fixed"))
    ck.add_argument("--examples", type=int, default=12)
    ck.add_argument("--seed", type=int, default=0)
    ck.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "fp32"))
    ck.add_argument("--rows", type=int, default=4)
    ck.add_argument("--cols", type=int, default=96)
    ck.add_argument("--json", action="store_true")
    ck.set_defaults(func=cmd_check)
    for name, (module, help_) in SUBCOMMANDS.items():
        if not _exists(module):
            continue
        mod = importlib.import_module(module)
        sp = sub.add_parser(name, help=help_)
        mod.add_arguments(sp)
        sp.set_defaults(func=mod.run)
    return p


def main(argv=None) -> int:
    parser = build_parser()
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
