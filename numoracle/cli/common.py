"""What the commands share: one definition per flag (the same flag has the same name and
meaning in every command that takes it; where a default differs by command - --isolate is off
for check, which runs a dozen cases, and on for the long-running commands; replay's
--backend is the one each case records - the help says so), the validators of numeric
options, and the help formatter that states every default."""

from __future__ import annotations

import argparse
import math

from ..errors import InvalidArgument


class Formatter(argparse.HelpFormatter):
    """Help with each option's default, where it has one and its help does not say it."""

    def _get_help_string(self, action):
        text = action.help or ""
        d = action.default
        if "%(default)" in text or "default" in text.lower() or d is None or d is argparse.SUPPRESS:
            return text
        if isinstance(action, argparse.BooleanOptionalAction):
            return f"{text} (default: {'on' if d else 'off'})"
        if d is False:
            return text
        if action.option_strings or action.nargs in (argparse.OPTIONAL, argparse.ZERO_OR_MORE):
            return f"{text} (default: %(default)s)"
        return text


# ---- validated option types: what was given, what is expected -----------------------------------

def _number(text: str, kind, what: str):
    try:
        v = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
    if isinstance(v, float) and not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"{text!r}: expected {what}, a finite number")
    return v


def positive_int(text: str) -> int:
    v = _number(text, int, "an integer")
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text}: expected an integer >= 1")
    return v


def count(text: str) -> int:
    v = _number(text, int, "an integer")
    if v < 0:
        raise argparse.ArgumentTypeError(f"{text}: expected an integer >= 0")
    return v


def seconds(text: str) -> float:
    v = _number(text, float, "a number of seconds")
    if v <= 0:
        raise argparse.ArgumentTypeError(f"{text}: expected a number of seconds > 0")
    return v


def nonnegative(text: str) -> float:
    v = _number(text, float, "a number")
    if v < 0:
        raise argparse.ArgumentTypeError(f"{text}: expected a number >= 0")
    return v


def corpus_dir(text: str) -> str:
    """A directory to save corpus cases in: missing (created when a case is saved) or a
    directory, never a file, checked before the search so that a finding is not lost at the
    end of it; '' (no corpus) as it is."""
    from pathlib import Path
    if text:
        for p in (Path(text), *Path(text).parents):
            if p.exists() and not p.is_dir():
                raise argparse.ArgumentTypeError(f"{text}: {p} is a file; expected a directory to save corpus cases "
                                                 f"in (created if missing)")
    return text


# ---- shared flags ----------------------------------------------------------------------------------

def add_operator(p) -> None:
    p.add_argument("op", metavar="OP", help="an operator: a registered name (numoracle ops) or package.module:attribute naming "
                        "your no.Operator, importable from the current directory")


def add_kernel(p, default="correct") -> None:
    p.add_argument("--kernel", default=default,
                   help="a registered kernel (correct, a variant, faulty:NAME) or package.module:function "
                        "importable from the current directory")


def add_backend(p, default="interpreter", choices=None, help_default=None) -> None:
    from ..backends import NAMES
    choices = NAMES if choices is None else choices
    text = "where kernels run: Triton's interpreter on the CPU (made GPU-faithful), a CUDA GPU"
    text += ", or auto (the GPU when there is one)" if "auto" in choices else ""
    if help_default is not None:
        text += f" (default: {help_default})"
    p.add_argument("--backend", default=default, choices=choices, help=text)


def add_mode(p) -> None:
    p.add_argument("--mode", default="statistical", choices=("statistical", "fixed"),
                   help="the verdict's mode (statistical rejects are confirmed in the fixed-input mode)")


def add_groups(p) -> None:
    p.add_argument("--groups", action="append", default=None, metavar="GROUP",
                   help="restrict to these input-shift groups (repeat or comma-separate; default: every group)")


def add_format(p, default=None, choices=None) -> None:
    p.add_argument("--dtype", "--format", dest="dtype", default=default, choices=choices,
                   help="the inputs' format" + ("" if default else " (default: drawn from the operator's domain)"))


def add_seed(p, default=0, help="seed of the cases") -> None:
    p.add_argument("--seed", type=int, default=default, help=help)


def add_json(p) -> None:
    p.add_argument("--json", action="store_true",
                   help="print exactly one JSON document on stdout (progress and diagnostics go to stderr)")


def add_quiet(p) -> None:
    p.add_argument("--quiet", action="store_true",
                   help="no progress lines on stderr (one a kernel, operator or stage; also when stderr is a file)")


def progress(args, stream=None):
    """A long study's progress printer (campaign, mutate, stress-tolerances, calibrate): a line
    on stderr as each kernel, operator or stage ends, whether stderr is a terminal or a log file
    (a run in the background shows how far it got), nothing with --quiet.  Never None, so a
    study's own default printer is not used instead.  (fuzz's per-case line, rewritten in place,
    is for a terminal only: runner.engine.Progress.)"""
    import sys
    stream = stream or sys.stderr
    if getattr(args, "quiet", False):
        return lambda line: None
    return lambda line: print(line, file=stream, flush=True)


def emit_json(args, doc) -> None:
    """Write ``doc`` as the command's one JSON document on stdout: into ``args.json_stdout``,
    which ``main`` writes to the real stdout when the command ends (while a --json command
    runs, whatever else prints - Hypothesis, a kernel, a C library through file descriptor 1 -
    goes to stderr).  Non-finite numbers become null (JSON has none)."""
    import json
    import sys
    stream = getattr(args, "json_stdout", None) or sys.stdout
    stream.write(json.dumps(_finite(doc), indent=2, default=str, allow_nan=False) + "\n")
    stream.flush()


def _finite(x):
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def add_out(p, help="also write the JSON report to this file") -> None:
    p.add_argument("--out", default=None, metavar="PATH", help=help)


def add_params(p, where: str = "") -> None:
    p.add_argument("--param", action="append", default=None, metavar="NAME=VALUE",
                   help="fix an operator parameter (repeatable; VALUE as a Python literal, else a string)"
                        + (f", {where}" if where else "") +
                        ", e.g. --param casting=llama --param eps=1e-5 (default: drawn from the operator's domain)")


def parse_params(args) -> dict:
    """The --param values as {name: value}, not yet checked against an operator."""
    import ast
    out = {}
    for item in args.param or ():
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise InvalidArgument(f"--param {item!r}: expected NAME=VALUE, e.g. --param casting=llama.")
        try:
            value = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError):
            value = text.strip()
        out[name] = value
    return out


def params(args, op) -> dict:
    """The --param values, checked against the operator's reference: {name: value}."""
    out = parse_params(args)
    if out:
        op.reference.check_params(out)
    return out


def add_isolate(p, default: bool = True) -> None:
    import argparse
    p.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=default,
                   help="run kernels in a supervised worker process: a kernel that crashes, exits or hangs (in C "
                        "too) is that case's outcome, not the end of the run (--no-isolate: in this process, "
                        "where only hangs in Python are bounded)")


def add_timeout(p, default: float = 60.0) -> None:
    p.add_argument("--timeout", type=seconds, default=default,
                   help="per-case kernel time limit in seconds (a kernel past it is a timeout outcome)")


def isolation(args):
    """The settings block the command's kernels run under (--isolate / --no-isolate, --timeout)."""
    from ..config import settings
    changes = {"isolate": bool(getattr(args, "isolate", False))}
    if getattr(args, "timeout", None) is not None:
        changes["kernel_timeout"] = args.timeout
    return settings(**changes)


def add_executor(p) -> None:
    from ..studies.executors import add_arguments
    add_arguments(p)


# ---- reading shared flags --------------------------------------------------------------------------

def groups(args) -> list | None:
    """The --groups given (validated), or None for every group."""
    if not args.groups:
        return None
    from ..families import GROUPS
    names = [g.strip() for s in args.groups for g in s.split(",") if g.strip()]
    bad = [g for g in names if g not in GROUPS]
    if bad:
        raise InvalidArgument(f"--groups {','.join(bad)}: unknown input-shift group; expected some of {list(GROUPS)}.")
    return names


def formats(args, op) -> list | None:
    """[the --dtype given, checked against the operator's domain], or None for every format."""
    if args.dtype is None:
        return None
    from .. import formats as F
    name = F.by_name(args.dtype).name
    if name not in op.domain.formats:
        raise InvalidArgument(f"--dtype {args.dtype}: {op.name} is defined on {list(op.domain.formats)}.")
    return [name]
