"""The correct stage as work units: (operator, kernel, input group, seed range) over the
cases ``correct.cases(op, n)`` gives.  A unit is ``correct.sweep_kernel`` over its cases,
and the merge of a kernel's units gives what one sweep over all of them would: the same
counts per group and mode, errors, histograms, uncertified sites, width maxima and
sizes, the same first examples (taken in case order), ``seconds`` being the units' sum;
medians are exact because each unit hands back its cases' widths (``raw``).

Each finished unit is written to ``DIR/units/`` (one ``.npz``, written to a temporary
name and renamed) before anything else; a unit's result is merged once, by its id,
however many times it is delivered."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from ..executors.core import Unit
from . import correct as C

SEED0 = 1000


# ---- units ---------------------------------------------------------------------------------------

def correct_units(names, n_cases: int, backend: str, *, chunk: int | None = None, kernels=None,
                  params=None) -> list[Unit]:
    """The units of the correct stage: per operator, kernel and input group, the group's
    cases cut into seed ranges of at most ``chunk`` cases (all of the group's cases in one
    unit by default).  ``params``: {operator: {name: value}} fixed, carried by the units."""
    from ... import operators
    units = []
    for name in names:
        op = operators.resolve(name)
        fixed = tuple(sorted((params or {}).get(name, {}).items()))
        settings = (("n_cases", n_cases),) + ((("params", fixed),) if fixed else ())
        by_group: dict = {}
        for case in C.cases(op, n_cases, seed0=SEED0, params=dict(fixed)):
            by_group.setdefault(case.group, []).append(case.seed)
        for kname in op.kernel_specs:
            if kernels is not None and kname not in kernels:
                continue
            for group, seeds in by_group.items():
                step = chunk or len(seeds)
                for i in range(0, len(seeds), step):
                    part = seeds[i:i + step]
                    units.append(Unit("correct", name, kname, group, (part[0], part[-1] + 1), backend,
                                      settings))
    return units


def unit_cases(unit: Unit):
    from ... import operators
    op = operators.resolve(unit.op)
    lo, hi = unit.seeds
    return [c for c in C.cases(op, unit.get("n_cases"), seed0=SEED0, params=dict(unit.get("params", ())))
            if c.group == unit.group and lo <= c.seed < hi]


def run_correct_unit(unit: Unit) -> dict:
    """Worker side: ``correct.sweep_kernel`` over the unit's cases, with their widths."""
    from ... import backends, operators
    backend = backends.select(unit.backend)
    op = operators.resolve(unit.op)
    try:
        kernel = op.kernels[unit.kernel]
    except Exception as exc:              # an optional upstream kernel that does not import
        return {"skipped": repr(exc)[:300]}
    res = C.sweep_kernel(op, unit.kernel, kernel, unit_cases(unit), backend, backend.device, raw=True)
    raw = res["raw"]                      # plain arrays travel and store better than tensors
    res["raw"] = {"width": {m: [(int(s), _np(a)) for s, a in v] for m, v in raw["width"].items()},
                  "accepted": {m: [(int(s), _np(a)) for s, a in v] for m, v in raw["accepted"].items()},
                  "assert_close": [(int(s), _np(a)) for s, a in raw["assert_close"]]}
    return res


def _np(a):
    return a.numpy() if hasattr(a, "numpy") else np.asarray(a)


# ---- merging -------------------------------------------------------------------------------------

SUMMARIES = {"width_ulps": "width", "accepted_width_ulps": "accepted", "assert_close_width_ulps": "assert_close"}


class MergeError(ValueError):
    pass


def _add(vals, where):
    """Sum of counts: numbers, dicts of counts (recursively, over the union of
    keys) and equal-length lists of counts (histograms)."""
    vals = [v for v in vals if v is not None]
    if not vals:
        return None
    if all(isinstance(v, bool) for v in vals) or all(isinstance(v, str) for v in vals):
        if all(v == vals[0] for v in vals):
            return vals[0]
        raise MergeError(f"{where}: different values {vals[:3]} in the units' results; merge_kernel does not "
                         f"know how to merge this field of sweep_kernel's result.")
    if all(isinstance(v, (int, float)) for v in vals):
        return sum(vals)
    if all(isinstance(v, dict) for v in vals):
        keys = list(dict.fromkeys(k for v in vals for k in v))
        return {k: _add([v.get(k) for v in vals], f"{where}.{k}") for k in keys}
    if all(isinstance(v, list) for v in vals) and len({len(v) for v in vals}) == 1 and \
            all(isinstance(x, (int, float)) for v in vals for x in v):
        return [sum(xs) for xs in zip(*vals)]
    raise MergeError(f"{where}: cannot merge {[type(v).__name__ for v in vals]} from the units' results; "
                     f"teach numoracle.studies.campaign.units.merge_kernel this field of sweep_kernel's result.")


def _summary(parts, field, kind, mode, exact):
    import torch

    if exact:
        segs = [s for p in parts for s in (p["raw"][kind][mode] if mode else p["raw"][kind])]
        segs.sort(key=lambda s: s[0])           # case order: seeds ascend with the case index
        xs = [torch.as_tensor(np.asarray(a)) for _, a in segs]
        return C.summary(torch.cat(xs) if xs else torch.empty(0, dtype=torch.float64))
    sums = [(p[field][mode] if mode else p[field]) for p in parts]
    sums = [s for s in sums if s]
    if not sums:
        return None
    # without each case's widths the median of the union is not known: the n-weighted
    # median of the units' medians stands in for it (flagged exact_medians=False)
    ordered = sorted(sums, key=lambda s: s["median"])
    half, acc, med = sum(s["n"] for s in ordered) / 2, 0, ordered[-1]["median"]
    for s in ordered:
        acc += s["n"]
        if acc >= half:
            med = s["median"]
            break
    return {"median": med, "max": max(s["max"] for s in sums), "n": sum(s["n"] for s in sums)}


def merge_kernel(parts) -> dict:
    """Unit results of one kernel (any order) -> the serial stage's dict:
    counts per group and mode, errors, histograms, uncertified sites summed;
    maxima and sizes of the widths combined; the first three examples in case
    order; medians exact when the units carry their cases' widths
    (``raw``), else see ``merge_is_exact``."""
    parts = list(parts)
    skipped = [p for p in parts if "skipped" in p]
    if skipped:
        return {"skipped": skipped[0]["skipped"]}
    exact = merge_is_exact(parts)
    if len(parts) == 1:
        return {k: v for k, v in parts[0].items() if k != "raw"}
    out = {}
    for key in dict.fromkeys(k for p in parts for k in p):
        if key == "raw":
            continue
        if key == "examples":
            out[key] = sorted((e for p in parts for e in p.get(key, [])), key=lambda e: e["seed"])[:3]
        elif key == "seconds":
            out[key] = round(sum(p.get(key, 0) for p in parts), 2)
        elif key in SUMMARIES:
            kind = SUMMARIES[key]
            if key == "assert_close_width_ulps":            # one summary (fixed mode only)
                out[key] = _summary(parts, key, kind, None, exact)
            else:                                           # a summary per mode
                modes = list(dict.fromkeys(m for p in parts for m in (p.get(key) or {})))
                out[key] = {m: _summary(parts, key, kind, m, exact) for m in modes}
        else:
            out[key] = _add([p.get(key) for p in parts], key)
    return out


def merge_is_exact(parts) -> bool:
    parts = [p for p in parts if "skipped" not in p]
    return len(parts) <= 1 or all("raw" in p for p in parts)


class Merger:
    """Unit results keyed by unit id; a kernel is complete when every unit of
    it is in.  Adding a unit id twice is a no-op (returns False)."""

    def __init__(self, units):
        self.expected: dict = {}
        for u in units:
            self.expected.setdefault(u.key, set()).add(u.id)
        self.parts: dict = {}                 # kernel key -> {unit id: result}

    def add(self, unit: Unit, result: dict) -> bool:
        got = self.parts.setdefault(unit.key, {})
        if unit.id in got:
            return False
        got[unit.id] = result
        return True

    def complete(self, key: str) -> bool:
        return set(self.parts.get(key, {})) >= self.expected.get(key, set())

    def merged(self, key: str) -> dict:
        parts = self.parts[key]
        return merge_kernel(parts[i] for i in sorted(parts))


# ---- unit results on disk ------------------------------------------------------------------------

def _unit_file(units_dir: Path, unit: Unit) -> Path:
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in unit.id)
    return units_dir / f"{safe}.npz"


def save_unit(units_dir: Path, unit: Unit, result: dict) -> Path:
    """Write one unit's result atomically (tmp + os.replace)."""
    units_dir.mkdir(parents=True, exist_ok=True)
    arrays, meta = {}, {k: v for k, v in result.items() if k != "raw"}
    meta["unit_spec"] = unit.to_dict()
    if "raw" in result:
        index = {}
        for kind in ("width", "accepted"):
            for m, segs in result["raw"][kind].items():
                index[f"{kind}/{m}"] = []
                for j, (seed, a) in enumerate(segs):
                    arrays[f"{kind}_{m}_{j}"] = np.asarray(a)
                    index[f"{kind}/{m}"].append([int(seed), f"{kind}_{m}_{j}"])
        index["assert_close"] = []
        for j, (seed, a) in enumerate(result["raw"]["assert_close"]):
            arrays[f"tol_{j}"] = np.asarray(a)
            index["assert_close"].append([int(seed), f"tol_{j}"])
        meta["raw_index"] = index
    path = _unit_file(units_dir, unit)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    with open(tmp, "wb") as fh:
        np.savez(fh, meta=np.array(json.dumps(meta, default=str)), **arrays)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return path


def load_unit(units_dir: Path, unit: Unit) -> dict | None:
    path = _unit_file(units_dir, unit)
    if not path.exists():
        return None
    with np.load(path, allow_pickle=False) as z:
        meta = json.loads(str(z["meta"]))
        if meta.get("unit_spec") != unit.to_dict():       # another campaign's unit of the same name
            return None
        res = {k: v for k, v in meta.items() if k not in ("raw_index", "unit_spec")}
        if "raw_index" in meta:
            ix = meta["raw_index"]
            res["raw"] = {"width": {}, "accepted": {}, "assert_close": [(s, z[k]) for s, k in ix["assert_close"]]}
            for kind in ("width", "accepted"):
                for key, segs in ix.items():
                    if key.startswith(kind + "/"):
                        res["raw"][kind][key.split("/", 1)[1]] = [(s, z[k]) for s, k in segs]
    return res
