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
import io
import os
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
    p = _Parser(prog="numoracle", description=__doc__.split("\n\n")[0], formatter_class=Formatter)
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


class _Parser(argparse.ArgumentParser):
    """argparse's parser (its subcommands' parsers are of the same class), which keeps the
    message of a usage error on the SystemExit it raises: with --json, that message is the
    command's one JSON document (argparse's usage text still goes to stderr)."""

    def error(self, message):
        try:
            super().error(message)
        except SystemExit as exc:
            exc.usage_error = message
            exc.usage_command = self.prog
            raise


def _wants_json(argv) -> bool:
    """Whether the command line asks for --json (or an abbreviation argparse accepts), before any '--'."""
    for a in argv:
        if a == "--":
            return False
        if len(a) >= 3 and "--json".startswith(a):
            return True
    return False


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(only=first if first in COMMANDS else "")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        code = 2 if exc.code else 0
        if code and _wants_json(argv):
            # a usage error (a bad or missing argument): argparse printed its usage and message on
            # stderr; the message is the document, as numoracle's own input errors are
            _json_error(argparse.Namespace(), getattr(exc, "usage_error", None) or "invalid arguments", code,
                        command=getattr(exc, "usage_command", None))
        return code
    from ..runner.execute import UserInterrupt, interrupts
    # --json: stdout holds the command's one JSON document (common.emit_json writes it into
    # args.json_stdout, which is written to the real stdout at the end); whatever else would
    # print on stdout meanwhile (Hypothesis, a kernel, a C library, a worker process) goes to
    # stderr, at the level of file descriptor 1 too
    as_json = bool(getattr(args, "json", False)) and not hasattr(args, "json_stdout")
    if as_json:
        args.json_stdout = io.StringIO()
    try:
        with _stdout_to_stderr() if as_json else contextlib.nullcontext():
            try:
                # SIGINT and SIGTERM end a run with its summary; what a command does not catch
                # ends here with the shell's code for the signal
                with interrupts():
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
    finally:
        if as_json:
            # fd 1 is stdout again: the document, and only it
            sys.stdout.write(args.json_stdout.getvalue())
            sys.stdout.flush()


def _flush_c_stdio() -> None:
    """Flush the C library's stdio buffers (a C extension's printf), where there is a C library."""
    try:
        import ctypes
        ctypes.CDLL(None).fflush(None)
    except Exception:  # noqa: BLE001 - no C library to flush (or not this platform's): nothing buffered there
        pass


@contextlib.contextmanager
def _stdout_to_stderr():
    """Within the block, what is written to stdout goes to stderr: Python's ``sys.stdout`` and
    file descriptor 1 itself (a kernel's ``os.write(1, ...)``, a C library, ``tl.device_print``,
    a child process, which inherits it); both are restored when the block ends, however it ends
    (an error, SIGINT).  Where fd 1 or 2 is not open, only ``sys.stdout`` is redirected."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    _flush_c_stdio()
    try:
        saved = os.dup(1)
    except OSError:
        saved = None
    if saved is not None:
        try:
            os.dup2(2, 1)
        except OSError:
            os.close(saved)
            saved = None
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        _flush_c_stdio()
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)


def _json_error(args, message: str, code: int, command: str | None = None) -> None:
    """A command that failed before its document: the error is the document (for a usage error,
    argparse's message and the command it is about, e.g. "numoracle fuzz")."""
    from .common import emit_json
    emit_json(args, {"error": message, "exit_code": code, **({"command": command} if command else {})})


__all__ = ["COMMANDS", "build_parser", "main"]
