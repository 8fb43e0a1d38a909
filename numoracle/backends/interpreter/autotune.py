"""Autotuned kernels on the interpreter: the repair of defect ``autotune``, and which
config an interpreted autotuned kernel runs (there is nothing to benchmark)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import config
from .. import _triton_compat as compat
from ._state import MISSING
from ._state import STATE as state


def set_autotune_config(selector: Any) -> None:
    """Choose the config interpreted ``@triton.autotune`` kernels run.

    ``selector``: None (the environment variable ``NUMORACLE_AUTOTUNE_CONFIG``,
    else the first config); an int index into the kernel's ``configs``; a
    dict matched against ``Config.all_kwargs()`` (``{"BLOCK": 64}``); a
    string (as for the environment variable: ``"1"`` or
    ``"BLOCK=64,num_warps=4"``); a callable ``configs -> Config or index``;
    or a dict ``{kernel_name: selector}`` for per-kernel choices."""
    state.autotune_selector = selector


def _parse_value(text: str) -> Any:
    text = text.strip()
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def _resolve_selector(selector: Any, configs: list, kernel_name: str) -> Any:
    if selector is None:
        return configs[0]
    if isinstance(selector, dict) and kernel_name in selector and not _looks_like_kwargs(selector, configs):
        return _resolve_selector(selector[kernel_name], configs, kernel_name)
    if callable(selector) and not isinstance(selector, (str, dict)):
        return _resolve_selector(selector(configs), configs, kernel_name)
    if isinstance(selector, (int, np.integer)) and not isinstance(selector, bool):
        if not -len(configs) <= int(selector) < len(configs):
            raise IndexError(f"autotune config index {selector} out of range for {kernel_name} "
                             f"({len(configs)} configs)")
        return configs[int(selector)]
    if isinstance(selector, str):
        text = selector.strip()
        if not text:
            return configs[0]
        if "=" not in text:
            return _resolve_selector(int(text), configs, kernel_name)
        wanted = {k.strip(): _parse_value(v) for k, v in (item.split("=", 1) for item in text.split(",") if item)}
        return _resolve_selector(wanted, configs, kernel_name)
    if isinstance(selector, dict):
        for cfg in configs:
            kw = cfg.all_kwargs()
            if all(k in kw and kw[k] == v for k, v in selector.items()):
                return cfg
        raise LookupError(f"no autotune config of {kernel_name} matches {selector}")
    if any(selector is cfg for cfg in configs):
        return selector
    raise TypeError(f"cannot select an autotune config with {selector!r}")


def _looks_like_kwargs(selector: dict, configs: list) -> bool:
    keys = set()
    for cfg in configs:
        keys.update(cfg.all_kwargs())
    return bool(selector) and set(selector) <= keys


def _selected_config(autotuner: Any) -> Any:
    configs = list(autotuner.configs)
    name = getattr(getattr(autotuner, "base_fn", None), "__name__", "?")
    if state.autotune_override is not None:
        return _resolve_selector(state.autotune_override, configs, name)
    selector = state.autotune_selector
    if selector is None:
        selector = config.current().autotune_config
    return _resolve_selector(selector, configs, name)


def _selection_token() -> Any:
    sel = state.autotune_override if state.autotune_override is not None else state.autotune_selector
    if sel is None:
        sel = config.current().autotune_config
    try:
        hash(sel)
        return sel
    except TypeError:
        return id(sel)


def repair_autotune() -> None:
    """Defect ``autotune``: ``Autotuner.run`` benchmarks every config with
    ``driver.active.get_benchmarker()`` (Triton 3.6 even for one config), which
    raises "0 active drivers" without a GPU.  Detected by launching an
    interpreted autotuned kernel with two configs.  Repair: for autotuners
    around an ``InterpretedFunction`` only, ``Autotuner._bench`` returns
    timings without running anything -- 0 for the selected config (see
    :func:`set_autotune_config`), inf for the others -- so the autotuner's own
    code picks the selected config, runs its hooks and the kernel once; and
    ``Autotuner.run`` drops its per-key cache when the selection changed."""
    Autotuner = compat.autotuner_class()
    if Autotuner is None:  # pragma: no cover
        return
    orig_bench, orig_run = Autotuner._bench, Autotuner.run

    def _bench(self, *args, config, **meta):
        if compat.find_interpreted(self) is None:
            return orig_bench(self, *args, config=config, **meta)
        chosen = _selected_config(self)
        same = config is chosen or config.all_kwargs() == chosen.all_kwargs()
        t = 0.0 if same else float("inf")
        return [t, t, t]

    def run(self, *args, **kwargs):
        if compat.find_interpreted(self) is not None:
            token = _selection_token()
            if getattr(self, "_numoracle_selection", MISSING) != token:
                self.cache.clear()
                self._numoracle_selection = token
        return orig_run(self, *args, **kwargs)

    state.patcher.set(Autotuner, "_bench", _bench)
    state.patcher.set(Autotuner, "run", run)


