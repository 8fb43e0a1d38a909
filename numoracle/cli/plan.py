"""``numoracle plan OP``: the kernel's precision plan read from its compiled Triton IR (no GPU
needed), checked against the operator's reference output by output (docs/plan.md).  Exit 1 on
a disagreement."""

from __future__ import annotations

import sys

from ..errors import InvalidArgument
from . import common


def add_arguments(p) -> None:
    common.add_operator(p)
    common.add_kernel(p)
    common.add_format(p)
    common.add_seed(p, help="the example's seed")
    p.add_argument("--rows", type=common.positive_int, default=None,
                   help="the example's rows (default: 4, moved into the operator's domain)")
    p.add_argument("--cols", type=common.positive_int, default=None,
                   help="the example's columns (default: 96, moved into the operator's domain)")
    common.add_params(p)
    p.add_argument("--arch", default=None,
                   help="the NVIDIA architecture to compile for: 90 (default), 80, 100, ... or 'device' for the "
                        "GPU at hand")
    p.add_argument("--config", type=common.count, default=0,
                   help="for autotuned kernels: which configuration (an index into each one's pruned list)")
    p.add_argument("--profile", default="h200", help="the math profile the reference's sites are read under")
    p.add_argument("--all", action="store_true", help="list every site (by default loads and exact widening casts are "
                                                      "left out)")
    p.add_argument("--skeleton", default=None, metavar="PATH",
                   help="write a reference program that follows the kernel's plan to PATH ('-' for stdout; with "
                        "--json, into the document's 'skeleton')")
    p.add_argument("--name", default=None, help="the skeleton's function name (default: OP_plan)")
    p.add_argument("--compare", default=None, metavar="REFERENCE",
                   help="with --intended: package.module:function of a (completed skeleton) reference whose "
                        "exact centre is compared with the intended math")
    p.add_argument("--intended", default=None, metavar="FUNCTION",
                   help="package.module:function computing the intended outputs in float64 from the inputs")
    common.add_json(p)


def _operator(spec: str):
    # one resolver for every command: a registered or published name, or package.module:attribute
    # of the user's own Operator (importing it as a kernel refused the Operator object)
    from .. import operators
    return operators.resolve(spec)


def _import(spec: str, what: str):
    from ..operators.choose import import_kernel
    if ":" not in spec:
        raise InvalidArgument(f"{what} {spec!r}: expected package.module:function.")
    return import_kernel(spec)


def _example(op, args):
    from ..formats import by_name
    fmt = args.dtype or op.domain.formats[0]
    dt = by_name(fmt).torch_dtype
    if dt is None or by_name(fmt).name not in op.domain.formats:
        raise InvalidArgument(f"--dtype {args.dtype}: {op.name} is defined on {list(op.domain.formats)}.")
    kw = {}
    if args.rows is not None:
        kw["rows"] = args.rows
    if args.cols is not None:
        kw["cols"] = args.cols
    inputs, params = op.example(args.seed, dtype=dt, **kw)
    choices = {k: v[0] for k, v in op.domain.params.items()}
    params = {**choices, **params, **common.params(args, op)}
    return list(inputs), params


def _site_lines(kplan, show_all: bool) -> list:
    out = []
    for launch, c in kplan.distinct():
        cx = ", ".join(f"{k}={v!r}" for k, v in launch.constexprs.items())
        cfg = f" config {launch.config[0] + 1}/{launch.config[1]}" if launch.config else ""
        opts = c.options
        out.append(f"kernel {launch.name}[{launch.grid!r}]({cx}) num_warps={opts.get('num_warps')} "
                   f"fp_fusion={'on' if opts.get('enable_fp_fusion') else 'off'}{cfg}")
        for s in c.sites:
            # a reference has one line per site that can round, so all of those are listed
            if not show_all and (s.kind == "load" or (s.kind == "cast" and not s.rounds)):
                continue
            out.append(f"  {s.where.short():32s} {s.text()}")
    if kplan.host_sites:
        out.append("host")
        for s in kplan.host_sites:
            out.append(f"  {s.where.short():32s} {s.text()}")
    return out


def run(args) -> int:
    from ..plan import extract_plan, reference_plan
    from ..plan.check import check
    from ..operators.choose import resolve
    op = _operator(args.op)
    inputs, params = _example(op, args)
    if args.intended is not None or args.compare is not None:
        if args.intended is None or args.compare is None:
            raise InvalidArgument("--compare and --intended go together: the reference to compare and the "
                                  "float64 function of the intended math.")
        from ..plan import compare_centre
        rep = compare_centre(_import(args.compare, "--compare"), _import(args.intended, "--intended"), inputs,
                             params, profile=args.profile)
        if args.json:
            common.emit_json(args, {"ok": rep.ok, "outputs": rep.outputs})
        else:
            print(rep.explain())
        return 0 if rep.ok else 1
    fn, kname = resolve(op, args.kernel)
    if args.skeleton is not None:
        from ..plan import skeleton
        text = skeleton(op, fn, inputs, params, name=args.name, arch=args.arch)
        to_stdout = args.skeleton == "-"
        if to_stdout and not args.json:
            sys.stdout.write(text)
        elif not to_stdout:
            with open(args.skeleton, "w", encoding="utf-8") as f:
                f.write(text)
            print(f"wrote {args.skeleton} ({text.count(chr(10))} lines; "
                  f"{text.count('TODO_')} TODO(s))", file=sys.stderr)
        if args.json:
            # --skeleton - with --json: the skeleton is in the document (stdout holds only it)
            common.emit_json(args, {"operator": op.name, "kernel": kname,
                                    "params": {k: repr(v) for k, v in params.items()},
                                    "skeleton": text if to_stdout else None,
                                    "path": None if to_stdout else str(args.skeleton),
                                    "lines": text.count("\n"), "todos": text.count("TODO_")})
        return 0
    kplan = extract_plan(fn, inputs, params, arch=args.arch, config=args.config)
    rplan = reference_plan(op.reference, inputs, params, profile=args.profile, launch=kplan.capture.launch_values())
    report = check(kplan, rplan, kernel_name=kname)
    if args.json:
        common.emit_json(args, {"operator": op.name, "kernel": kname, "params": {k: repr(v) for k, v in params.items()},
                                "plan": kplan.to_dict(), "check": report.to_dict()})
        return report.exit_code()
    print(f"{op.name} / {kname}: {len(kplan.capture.launches)} launch(es), {len(kplan.distinct())} compiled for "
          f"{kplan.target} with Triton {kplan.triton} in {kplan.seconds['total']:.2f}s "
          f"(example: {args.dtype or op.domain.formats[0]}, seed {args.seed}, {params})")
    for line in _site_lines(kplan, args.all):
        print(line)
    print()
    print(report.explain())
    if kplan.capture.configs > 1:
        print(f"(autotuned: checked configuration {args.config + 1} of {kplan.capture.configs}; --config N picks "
              f"another)")
    return report.exit_code()


__all__ = ["add_arguments", "run"]
