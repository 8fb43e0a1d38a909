"""Per-operator case strategies (docs/design.md §8).

Hypothesis draws the *structure* of a case - shape inside the operator's
domain, format, input-shift group, a power-of-two scale, a few special
values, operator parameters, kernel config and a seed - and
``op.make_example`` / ``fill`` build the bulk from the seed.  Shrinking
therefore works on a dozen numbers, and a 64x512 tensor costs nothing in
Hypothesis's buffer.  A :class:`Case` is plain data: it rebuilds the same
tensors on any machine (``materialize``) and prints as a call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from hypothesis import strategies as st

from .. import formats as F
from ..errors import InvalidArgument
from ._lazy import Lazy
from ..families import ADVERSARIAL_GROUPS, ALL_GROUPS, GROUPS

# Special values injected into the main input (input 0), by name.  All finite:
# numoracle's regions assume finite inputs (non-finite ones only make elements
# uncertified), so infinities and NaN belong to the kernel-output side.
SPECIALS = ("zero", "neg_zero", "one", "neg_one", "min_subnormal", "min_normal", "max_finite",
            "neg_max_finite", "half_ulp_tie")
SCALE_EXPS = (-24, 24)
# Operator parameters that split a row into groups: the drawn width must be a
# multiple of the drawn value too (a quantizer's group size, a matmul's K block).
COLUMN_GROUP_PARAMS = ("group_size", "group_k", "block_k", "block_size")


def special_value(kind: str, fmt: F.Format) -> float:
    return {"zero": 0.0, "neg_zero": -0.0, "one": 1.0, "neg_one": -1.0,
            "min_subnormal": fmt.min_subnormal, "min_normal": fmt.min_normal,
            "max_finite": fmt.max_finite, "neg_max_finite": -fmt.max_finite if fmt.signed else 0.0,
            # 1 + 2^-p: a value whose rounding to the next narrower format of
            # the family ties (for bf16 inputs widened to fp32 it is exact)
            "half_ulp_tie": 1.0 + 2.0 ** (1 - fmt.precision)}[kind]


@dataclass(frozen=True)
class Case:
    """One concrete input set for one operator, rebuilt from a few numbers."""
    op: str
    fmt: str
    rows: int
    cols: int
    group: str = "calibration"
    scale_exp: int = 0
    specials: tuple = ()          # ((flat index into input 0, kind), ...)
    params: tuple = ()            # sorted ((name, value), ...)
    config: tuple = ()            # sorted ((name, value), ...): kernel keyword arguments
    seed: int = 0

    def __repr__(self) -> str:
        extra = ""
        if self.scale_exp:
            extra += f", scale_exp={self.scale_exp}"
        if self.specials:
            extra += f", specials={self.specials!r}"
        if self.params:
            extra += f", params={dict(self.params)!r}"
        if self.config:
            extra += f", config={dict(self.config)!r}"
        return (f"Case({self.op!r}, fmt={self.fmt!r}, rows={self.rows}, cols={self.cols}, "
                f"group={self.group!r}{extra}, seed={self.seed})")

    @property
    def format(self) -> F.Format:
        return F.by_name(self.fmt)

    def to_dict(self) -> dict:
        return {"op": self.op, "fmt": self.fmt, "rows": self.rows, "cols": self.cols, "group": self.group,
                "scale_exp": self.scale_exp, "specials": [list(s) for s in self.specials],
                "params": dict(self.params), "config": dict(self.config), "seed": self.seed}

    @classmethod
    def from_dict(cls, d: dict) -> "Case":
        return cls(d["op"], d["fmt"], int(d["rows"]), int(d["cols"]), d.get("group", "calibration"),
                   int(d.get("scale_exp", 0)), tuple((int(i), str(k)) for i, k in d.get("specials", ())),
                   tuple(sorted(d.get("params", {}).items())), tuple(sorted(d.get("config", {}).items())),
                   int(d.get("seed", 0)))

    def materialize(self, device: str = "cpu", op=None):
        """(inputs, params): the operator's example for this seed, shape and group, then
        the scale and special values applied to input 0.  ``op``: the Operator (default:
        the registered one of this case's name)."""
        if op is None:
            from .. import operators
            try:
                op = operators.resolve(self.op)
            except InvalidArgument:
                if self.op in operators.REGISTRY:
                    raise
                # a case drawn for a user's operator names it, but only the object finds it
                raise InvalidArgument(f"{self!r}: {self.op!r} is not a registered operator; pass yours: "
                                      f"case.materialize(op=my_op).") from None
        fmt = self.format
        dtype = fmt.torch_dtype
        if dtype is None:
            raise InvalidArgument(f"{self!r}: format {fmt.name} has no torch dtype; operators that take "
                                  f"{fmt.name} define their own example builder for it.")
        inputs, params = op.example(self.seed, dtype, self.group, self.rows, self.cols)
        # parameters the example returns are tied to its inputs (a group size to the
        # scales' layout): they win over drawn ones (operators.Domain)
        params = {**dict(self.params), **dict(params)}
        inputs = list(inputs)
        x = inputs[0] if inputs else None
        if isinstance(x, torch.Tensor) and x.dtype.is_floating_point and (self.scale_exp or self.specials):
            xf = F.from_dtype(x.dtype)
            v = F.decode(x, xf)
            if self.scale_exp:
                # a power of two is exact: the group's value pattern survives the shift
                lim = xf.max_finite / 4
                v = (v * 2.0 ** self.scale_exp).clamp(-lim, lim)
                v = F.round(v, xf)
            flat = v.reshape(-1).clone()
            for i, kind in self.specials:
                if flat.numel():
                    flat[i % flat.numel()] = F.round(torch.tensor([special_value(kind, xf)],
                                                                  dtype=torch.float64), xf)[0]
            inputs[0] = F.encode(flat.reshape(v.shape), xf)
        return tuple(t.to(device) if isinstance(t, torch.Tensor) else t for t in inputs), params


def _boundaries(lo: int, hi: int, mult: int) -> list:
    """Tiny sizes, powers of two and one either side of them: where blocks and
    masks go wrong."""
    out = set()
    for k in range(0, 20):
        for d in (-1, 0, 1):
            out.add((1 << k) + d)
    out |= {lo, hi}
    return sorted(v for v in out if lo <= v <= hi and v % mult == 0 and v > 0)


def _sizes(lo: int, hi: int, mult: int = 1):
    kmin, kmax = -(-lo // mult), hi // mult
    if kmin > kmax:
        return None
    plain = st.integers(kmin, kmax).map(lambda k: k * mult)
    b = _boundaries(kmin * mult, kmax * mult, mult)
    return st.one_of(plain, st.sampled_from(b)) if b else plain


def _cols(default, bounds, mult, params):
    """The width strategy given the drawn parameters: a multiple of every
    column-group parameter (COLUMN_GROUP_PARAMS) as well as cols_multiple_of."""
    need = mult
    for name in COLUMN_GROUP_PARAMS:
        g = params.get(name)
        if isinstance(g, int) and not isinstance(g, bool) and g > 0:
            need = math.lcm(need, g)
    if need == mult:
        return default
    s = _sizes(bounds[0], bounds[1], need)
    return s if s is not None else default      # none fits: the kernel's own error is the outcome


def cases(op, *, formats=None, groups=None, rows=None, cols=None, max_rows=None, max_cols=None,
          scale_exps=SCALE_EXPS, specials=3, params=None, configs=None, seeds=None):
    """Cases for operator ``op`` (a name or a registered Operator).

    ``formats``/``groups``: restrict the drawn formats (default ``op.domain.formats``)
    and input-shift groups (default every group of ``strategies.GROUPS``; the soundness
    search's ``ADVERSARIAL_GROUPS`` on request).
    ``rows``/``cols``: a fixed size or a (lo, hi) range inside ``op.domain``; ``max_rows``
    / ``max_cols`` cap the domain's range, never below its smallest size (a cap of 8 on a
    domain of 64 to 128 rows draws 64: the caps are the settings' defaults for speed, and an
    operator that needs larger shapes keeps them).  ``scale_exps``: (lo, hi) range of the
    power-of-two scale applied to input 0 (``(0, 0)`` for none).  ``specials``: the
    most special values injected (0 for none).  ``params``: ``{name: choices}``
    overriding ``op.domain.params``.  ``configs``: a list of kernel-keyword dicts
    to draw from.  ``seeds``: a fixed seed or a (lo, hi) range."""
    kwargs = {k: v for k, v in dict(formats=formats, groups=groups, rows=rows, cols=cols, max_rows=max_rows,
                                     max_cols=max_cols, params=params, configs=configs, seeds=seeds).items()
              if v is not None}
    if scale_exps != SCALE_EXPS:
        kwargs["scale_exps"] = scale_exps
    if specials != 3:
        kwargs["specials"] = specials
    name = op if isinstance(op, str) else getattr(op, "name", op)

    def build():
        from .. import operators
        o = operators.resolve(op)
        if not hasattr(o, "domain"):
            raise InvalidArgument(f"cases(op={op!r}): expected an operator name from numoracle.operators.names() "
                                  f"or a registered Operator.")
        o.require_example()
        dom = o.domain
        fmts = tuple(formats) if formats is not None else tuple(dom.formats)
        bad = [f for f in fmts if f not in dom.formats]
        if not fmts or bad:
            raise InvalidArgument(f"cases({o.name!r}, formats={formats!r}): {o.name} is defined on formats "
                                  f"{list(dom.formats)}; {bad or 'none'} given.")
        grps = tuple(groups) if groups is not None else tuple(GROUPS)
        unknown = [g for g in grps if g not in ALL_GROUPS]
        if not grps or unknown:
            raise InvalidArgument(f"cases({o.name!r}, groups={groups!r}): unknown input-shift group(s) "
                                  f"{unknown or 'none given'}; expected names from {sorted(ALL_GROUPS)}.")
        m = dom.cols_multiple_of
        shape, bounds = {}, {}
        for arg, given, cap, (dlo, dhi) in (("rows", rows, max_rows, dom.rows), ("cols", cols, max_cols, dom.cols)):
            mult = m if arg == "cols" else 1
            if given is None:
                lo, hi = dlo, dhi if cap is None else max(dlo, min(dhi, cap))
            elif isinstance(given, int):
                lo = hi = given
            else:
                lo, hi = given
            if lo < dlo or hi > dhi or lo > hi:
                raise InvalidArgument(f"cases({o.name!r}, {arg}={given!r}, max_{arg}={cap!r}): {o.name} takes "
                                      f"{arg} in [{dlo}, {dhi}]; give a size or (lo, hi) range inside it.")
            s = _sizes(lo, hi, mult)
            if s is None:
                raise InvalidArgument(f"cases({o.name!r}, {arg}={given!r}): no size in [{lo}, {hi}] is a "
                                      f"multiple of {mult} ({o.name}'s cols_multiple_of).")
            shape[arg] = s
            bounds[arg] = (lo, hi)
        lo_k, hi_k = scale_exps
        pchoices = dict(dom.params)
        pchoices.update(params or {})
        for k, v in pchoices.items():
            if not isinstance(v, (tuple, list)) or not v:
                raise InvalidArgument(f"cases({o.name!r}, params={{{k!r}: {v!r}}}): give a non-empty tuple of "
                                      f"choices (the first is the default).")
        pstrat = st.fixed_dictionaries({k: st.sampled_from(tuple(v)) for k, v in sorted(pchoices.items())})
        cstrat = st.sampled_from([tuple(sorted(c.items())) for c in configs]) if configs else st.just(())
        if seeds is None:
            sstrat = st.integers(0, 2**31 - 1)
        elif isinstance(seeds, int):
            sstrat = st.just(seeds)
        else:
            sstrat = st.integers(*seeds)
        spec = st.lists(st.tuples(st.integers(0, 2**20), st.sampled_from(SPECIALS)), max_size=specials) \
            if specials else st.just([])

        @st.composite
        def draw(d):
            fmt = d(st.sampled_from(fmts))
            grp = d(st.sampled_from(grps))
            ps = tuple(sorted(d(pstrat).items()))
            r = d(shape["rows"])
            c = d(_cols(shape["cols"], bounds["cols"], m, dict(ps)))
            k = d(st.one_of(st.just(0), st.integers(lo_k, hi_k))) if hi_k > lo_k and lo_k <= 0 <= hi_k \
                else (d(st.integers(lo_k, hi_k)) if hi_k > lo_k else lo_k)
            sp = tuple(d(spec))
            cf = d(cstrat)
            seed = d(sstrat)
            return Case(o.name, fmt, r, c, grp, k, sp, ps, cf, seed)
        return draw()

    return Lazy("cases", (name,), kwargs, build)


# the soundness search (tests/test_adversarial.py, scripts/adversarial_search.py): the adversarial
# groups and three shifted distributions; the smallest column cap per operator, for operators whose
# drawn sizes need larger rows (a block fp8 matmul's K is a multiple of its K group, a quantizer's
# row of its group)
SOUNDNESS_GROUPS = (*ADVERSARIAL_GROUPS, "calibration", "shifted_mean", "heavy_tailed")
_SOUNDNESS_MIN_COLS = {"w8a8_block_fp8_matmul": 128, "per_token_group_quant_fp8": 64}


def soundness_cases(op, *, max_rows: int, max_cols: int):
    """The cases the soundness search draws for operator ``op`` (a name): ``SOUNDNESS_GROUPS``,
    shapes capped at ``max_rows`` x ``max_cols`` (raised where the operator needs more columns)."""
    from .. import operators
    o = operators.resolve(op)
    lo, hi = o.domain.cols
    return cases(o.name, groups=SOUNDNESS_GROUPS, max_rows=min(o.domain.rows[1], max_rows),
                 max_cols=min(hi, max(max_cols, _SOUNDNESS_MIN_COLS.get(o.name, 0), lo)))


def explicit_cases(op, *, formats=None, groups=None, rows=4, cols=96, seed=0, params=None) -> list:
    """One case per input-shift group (calibration first), the default shape clamped into
    the operator's domain and the parameters' first choices (or ``params``, {name: value}):
    the stratified start of ``check``."""
    from .. import operators
    o = operators.resolve(op)
    dom = o.domain
    fmt = (formats or dom.formats)[0]
    r = min(max(rows, dom.rows[0]), dom.rows[1])
    m = dom.cols_multiple_of
    c = min(max(cols, dom.cols[0]), dom.cols[1])
    c = max(m, c - c % m)
    chosen = {**{k: v[0] for k, v in dom.params.items()}, **(params or {})}
    params = tuple(sorted(chosen.items()))
    return [Case(o.name, fmt, r, c, g, 0, (), params, (), seed + i)
            for i, g in enumerate(groups or tuple(GROUPS))]


def fit_shape(op, rows: int, cols: int):
    """(rows, cols) moved into the operator's domain (``Domain.fit``)."""
    return op.domain.fit(rows, cols)


def group_cases(op, groups=None, per_group: int = 3, fmt: str = "bf16", rows: int = 4, cols: int = 96,
                seed: int = 0, params=None) -> list:
    """``per_group`` cases in each input group, of one format and shape (moved into the
    domain); the operator's parameter choices cycle over the cases so each is exercised:
    the fixed cases of the mutation and stress studies."""
    groups = list(GROUPS) if groups is None else list(groups)
    for g in groups:
        if g not in GROUPS:
            raise InvalidArgument(f"input group {g!r}: expected one of {sorted(GROUPS)}.")
    if fmt not in op.domain.formats:
        raise InvalidArgument(f"{op.name} accepts formats {op.domain.formats}, not {fmt!r}.")
    rows, cols = fit_shape(op, rows, cols)
    choices = {**op.domain.params, **{k: (v,) for k, v in (params or {}).items()}}
    out = []
    for gi, g in enumerate(groups):
        for i in range(per_group):
            k = gi * per_group + i
            params = tuple(sorted((name, vals[k % len(vals)]) for name, vals in choices.items()))
            out.append(Case(op.name, fmt, rows, cols, g, 0, (), params, (), seed + 1000 * gi + i))
    return out


# the shapes a sweep cycles through (clamped into each operator's domain)
SWEEP_ROWS = (1, 3, 8)
SWEEP_COLS = (16, 96, 130, 256)


def sweep_shapes(op) -> list:
    d = op.domain
    m = max(d.cols_multiple_of, 1)
    out = []
    for i, c in enumerate(SWEEP_COLS):
        c = max(m, (c // m) * m)
        c = min(max(c, d.cols[0]), d.cols[1])
        r = min(max(SWEEP_ROWS[i % len(SWEEP_ROWS)], d.rows[0]), d.rows[1])
        out.append((r, c))
    return out


def sweep_cases(op, n: int, groups=None, seed0: int = 1000, params=None) -> list:
    """n cases cycling through the input groups, the operator's formats (those with a torch
    dtype), a few CI-sized shapes and its parameter choices, seeds seed0, seed0 + 1, ...:
    the campaign's cases.  Formats change from one case to the next (so a short run sees all
    of them) and, over len(groups) * len(formats) cases, every group meets every format.
    ``params``: parameters fixed to one value (the others still cycle)."""
    groups = list(groups or GROUPS)
    fmts = [f for f in op.domain.formats if f in ("bf16", "fp16", "fp32")] or ["bf16"]
    shp = sweep_shapes(op)
    choices = list({**op.domain.params, **{k: (v,) for k, v in (params or {}).items()}}.items())
    out = []
    for i in range(n):
        rows, cols = shp[i % len(shp)]
        params = tuple(sorted((k, v[(i // 3 + j) % len(v)]) for j, (k, v) in enumerate(choices)))
        out.append(Case(op.name, fmts[(i + i // len(groups)) % len(fmts)], rows, cols, groups[i % len(groups)],
                        0, (), params, (), seed0 + i))
    return out


__all__ = ["Case", "cases", "explicit_cases", "group_cases", "sweep_cases", "fit_shape", "SPECIALS",
           "special_value"]
