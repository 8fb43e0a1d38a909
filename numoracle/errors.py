"""The exceptions numoracle raises.

`NumoracleError` is the root.  `InvalidArgument` is also a `TypeError` and a
`ValueError`, so callers that guard with either catch it; `OracleViolation`
is an `AssertionError`, so pytest reports it as a failed assertion.
"""

from __future__ import annotations


class NumoracleError(Exception):
    """Base class of every error numoracle raises on purpose."""


class InvalidArgument(NumoracleError, TypeError, ValueError):
    """An argument was malformed: the message says what was given, what was
    expected and how to fix it."""


class LanguageMisuse(InvalidArgument):
    """A reference program used a Python construct that would silently mis-handle tracked
    values (a comparison as a bool, Python's max, float(), torch.exp, ...): the message names
    the reference language's spelling.  Raised as it is, never re-worded as a bad input."""


class NotImportable(InvalidArgument):
    """A user module named by a flag or a saved case (``package.module:attribute``) does not
    import in this process: it, or a module it imports, is not on the path here.  The name may
    be right where the case was saved (a replay says "cannot be replayed here", not "corrupt")."""


class ReferenceRefused(InvalidArgument):
    """A reference program raised on the inputs it was given (shapes that do not fit, a group
    size that does not divide the last axis, ...): in a drawn case the operator's domain or
    example builder made inputs its reference does not take, not a kernel's fault."""


class MisspelledMethod(LanguageMisuse, AttributeError):
    """A torch-style method a tracked tensor does not have (``x.exp()``): an AttributeError too,
    so that ``hasattr`` and ``getattr(x, name, default)`` keep working."""


class OracleViolation(NumoracleError, AssertionError):
    """`assert_accepted` found kernel outputs outside their acceptance region."""

    def __init__(self, message: str, verdict=None):
        super().__init__(message)
        self.verdict = verdict


class _KernelFault(NumoracleError):
    """What a kernel did wrong besides its values, found by numoracle: ``where`` is the place a
    run files it under (its failure class), so that a saved case keeps its class when
    numoracle's own code moves."""

    def __init__(self, message: str, where: str = ""):
        super().__init__(message)
        self.where = where


class OutOfBounds(_KernelFault):
    """A kernel on the repaired interpreter loaded, stored or updated atomically at an address
    outside every tensor it was given (docs/design.md §7): raised before memory is touched; the
    message names the kernel's line (``where``, file:line), the lanes and the nearest tensor argument."""


class InputWritten(_KernelFault):
    """A kernel changed an input tensor it does not return as an output (it was run on a copy):
    called on the caller's tensors, it would overwrite them.  A run reports it as the case's
    error, at ``where`` = "input N"; a kernel that updates an input in place returns it as an
    output."""


class Uncertified(NumoracleError):
    """Raised (on request) when a verdict is `uncertified`: some site may leave
    its format's finite range or its math function's calibrated domain."""

    def __init__(self, message: str, verdict=None):
        super().__init__(message)
        self.verdict = verdict


class TensorsChanged(NumoracleError, RuntimeError):
    """An accepted verdict's regions, kernel values or certificate were asked for after
    the caller overwrote a tensor it judged (a compiled verdict that accepts holds the
    caller's tensors, with fingerprints, instead of copying them)."""
