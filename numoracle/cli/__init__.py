"""The ``numoracle`` command line (also ``python -m numoracle``).  Exit codes: 0 nothing
found, 1 a counterexample / violation, 2 usage or input error; a run ended by SIGINT or
SIGTERM says so with 130 or 143, after its summary.

One module per command, each with ``add_arguments(parser)`` and ``run(args) -> exit
code`` (``SUMMARIES`` holds each command's one-line help, so that listing the commands
imports none of them); flags shared by several commands are defined once, in ``common``.  A command's module is imported only when that command runs (its imports
must not decide Triton's mode before the backend is chosen)."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys

from ..errors import InvalidArgument, NumoracleError
from .common import Formatter

# command -> module (check and fuzz share one)
COMMANDS = {
    "ops": "ops",
    "check": "run",
    "fuzz": "run",
    "replay": "replay",
    "mutate": "mutate",
    "stress-tolerances": "stress",
    "campaign": "campaign",
    "report": "report",
    "calibrate": "calibrate",
    "workers": "workers",
    "plan": "plan",
}
# one line each, for the list of commands (the module gives the rest when it runs)
SUMMARIES = {
    "ops": "list the registered operators",
    "check": "judge a kernel on one case per input group and 12 drawn cases; shrink and save a counterexample",
    "fuzz": "search for counterexamples within a time budget; shrink and save the first",
    "replay": "re-judge saved corpus cases in both modes (exit 1 if a reject reproduces)",
    "mutate": "mutation testing of an operator's kernels against every oracle",
    "stress-tolerances": "search (atol, rtol) configurations for false alarms and misses",
    "campaign": "the paper's evaluation on one backend (resumable; --quick for CI)",
    "report": "HTML and Markdown report of a campaign directory",
    "calibrate": "measure math-library errors and write a profile",
    "workers": "start this host's Dask workers (one per GPU, pinned) and block",
    "plan": "the kernel's precision plan from its compiled Triton IR (no GPU), checked against the reference",
}


def _module(command: str):
    return importlib.import_module(f"{__name__}.{COMMANDS[command]}")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; ``only`` names the command about to run (the other commands' modules
    are not imported: their parsers take what follows them as it is)."""
    from .. import __version__
    p = argparse.ArgumentParser(prog="numoracle", description=__doc__.split("\n\n")[0], formatter_class=Formatter)
    p.add_argument("--version", action="version", version=f"numoracle {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    for name in COMMANDS:
        sp = sub.add_parser(name, help=SUMMARIES[name], description=SUMMARIES[name], formatter_class=Formatter)
        if only is not None and name != only:
            sp.add_argument("rest", nargs=argparse.REMAINDER)
            sp.set_defaults(func=lambda a, n=name: main([n, *a.rest]))
            continue
        mod = _module(name)
        if COMMANDS[name] == "run":
            mod.add_arguments(sp, name)
            sp.set_defaults(func=lambda a, n=name, m=mod: m.run(a, n))
        else:
            mod.add_arguments(sp)
            sp.set_defaults(func=mod.run)
    return p


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(only=first if first in COMMANDS else "")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return 2 if exc.code else 0
    from ..runner.execute import UserInterrupt, interrupts
    # --json: stdout holds the command's one JSON document (common.emit_json writes it there);
    # whatever else would print on stdout meanwhile (Hypothesis, a kernel, a library) goes to stderr
    as_json = bool(getattr(args, "json", False)) and not hasattr(args, "json_stdout")
    if as_json:
        args.json_stdout = sys.stdout
    try:
        # SIGINT and SIGTERM end a run with its summary; what a command does not catch
        # ends here with the shell's code for the signal
        with interrupts(), (contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext()):
            return args.func(args)
    except (InvalidArgument, NumoracleError) as exc:
        print(f"numoracle: error: {exc}", file=sys.stderr)
        if as_json:
            _json_error(args, str(exc), 2)
        return 2
    except KeyboardInterrupt as exc:
        code = exc.exit_code if isinstance(exc, UserInterrupt) else 130
        print(f"numoracle: interrupted ({'SIGTERM' if code == 143 else 'SIGINT'})", file=sys.stderr)
        return code


def _json_error(args, message: str, code: int) -> None:
    """A command that failed before its document: the error is the document."""
    from .common import emit_json
    emit_json(args, {"error": message, "exit_code": code})


__all__ = ["COMMANDS", "build_parser", "main"]
