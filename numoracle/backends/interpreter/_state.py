"""Everything the interpreter's repairs change, in one place: the attributes they patched
(for ``uninstall``), the formats whose casts and arithmetic the hooks take over, the
probes' results and the autotune selection."""

from __future__ import annotations

from typing import Any, Dict, Optional

from .. import _triton_compat as compat

MISSING = object()


class Patcher:
    """Records (object, attribute, original) so ``uninstall`` can undo."""

    def __init__(self) -> None:
        self.changes: list = []

    def set(self, obj: Any, name: str, value: Any) -> None:
        original = obj.__dict__.get(name, MISSING) if isinstance(obj, type) else getattr(obj, name, MISSING)
        self.changes.append((obj, name, original))
        setattr(obj, name, value)

    def restore(self) -> None:
        while self.changes:
            obj, name, original = self.changes.pop()
            if original is MISSING:
                try:
                    delattr(obj, name)
                except AttributeError:  # pragma: no cover
                    pass
            else:
                setattr(obj, name, original)


class State:
    def __init__(self) -> None:
        self.patcher = Patcher()
        self.installed = False
        self.probe_cache: Optional[Dict[str, tuple]] = None   # defect -> (present, detail), bare interpreter
        self.repaired: Dict[str, bool] = {}
        self.after_details: Dict[str, str] = {}
        # formats whose casts / arithmetic the hooks take over
        self.cast_formats: set = set()
        self.arith_formats: set = set()
        self.hooks: set = set()             # which hooks are installed
        # (globals dict, name, stub function) patched in kernels' globals: a device function call
        # never restores its patch scope, so uninstall() puts these back
        self.globals_patched: Dict[tuple, tuple] = {}
        self.autotune_selector: Any = None  # set_autotune_config / install(autotune_config=...)
        self.autotune_override: Any = None  # the autotune probe's own choice
        self.rebind_warned = False
        self.modules: Dict[str, Any] = {}
        self.bounds: Any = None             # the running launch's tensor storages (bounds._Launch)

    def forget_repairs(self) -> None:
        self.patcher.restore()
        for fn_globals, name, original in self.globals_patched.values():
            fn_globals[name] = original
        self.globals_patched.clear()
        self.cast_formats.clear()
        self.arith_formats.clear()
        self.hooks.clear()
        self.repaired.clear()
        self.bounds = None
        self.installed = False


STATE = State()


def runtime():
    """``triton.runtime.interpreter`` (imported on first use)."""
    mod = STATE.modules.get("interpreter")
    if mod is None:
        mod = STATE.modules["interpreter"] = compat.interpreter_module()
    return mod


def language():
    """``triton.language`` (imported on first use)."""
    mod = STATE.modules.get("tl")
    if mod is None:
        import triton.language as mod

        STATE.modules["tl"] = mod
    return mod
