"""Arithmetic: the repairs of defects ``bf16_arithmetic``, ``fp16_arithmetic`` and
``float_scalar_args``."""

from __future__ import annotations


import numpy as np

from ._state import STATE as state
from ._state import language, runtime
from .codecs import decode, encode, fmt_name
from .dot import install_dot_hook
from .reductions import install_reduce_hooks
from .rounding import rne_bf16_bits, round_fma


def install_arith_hooks() -> None:
    """Evaluate operations on handles of the active half formats in float32
    and round once to the operand format."""
    if "arith" in state.hooks:
        return
    rt = runtime()
    B = rt.InterpreterBuilder
    tl = language()
    orig_binary, orig_unary, orig_ternary = B.binary_op, B.unary_op, B.ternary_op
    orig_fma, orig_erf, orig_rsqrt = B.create_fma, B.create_erf, B.create_rsqrt

    def _f32(h):
        return decode(h.data, h.dtype.scalar).astype(np.float32)

    def _result(out, ty):
        out = np.asarray(out)
        if out.dtype == np.bool_:  # comparisons: an int1 handle (upstream keeps the operand type)
            return rt.TensorHandle(out, tl.int1)
        if out.dtype.kind in "iu":  # pragma: no cover - no integer-valued float op
            return rt.TensorHandle(out, ty)
        return rt.TensorHandle(encode(out, ty), ty)

    def binary_op(self, lhs, rhs, op):
        ty = lhs.dtype.scalar
        if ty not in state.arith_formats or rhs.dtype.scalar != ty:
            return orig_binary(self, lhs, rhs, op)
        with np.errstate(all="ignore"):
            out = op(_f32(lhs), _f32(rhs))
        return _result(out, ty)

    def unary_op(self, arg, op):
        ty = arg.dtype.scalar
        if ty not in state.arith_formats:
            return orig_unary(self, arg, op)
        with np.errstate(all="ignore"):
            out = op(_f32(arg))
        return _result(out, ty)

    def ternary_op(self, lhs, rhs, other, op):
        ty = other.dtype.scalar
        if ty not in state.arith_formats or op is np.where:
            return orig_ternary(self, lhs, rhs, other, op)
        args = [_f32(h) if h.dtype.scalar == ty else h.data for h in (lhs, rhs, other)]
        with np.errstate(all="ignore"):
            out = op(*args)
        return _result(out, ty)

    def create_fma(self, x, y, z):
        ty = z.dtype.scalar
        if ty not in state.arith_formats:
            return orig_fma(self, x, y, z)
        a, b, c = np.broadcast_arrays(_f32(x), _f32(y), _f32(z))
        return rt.TensorHandle(round_fma(a, b, c, fmt_name(ty)), ty)

    def _via_f32(orig):
        def method(self, arg):
            ty = arg.dtype.scalar
            if ty not in state.arith_formats:
                return orig(self, arg)
            out = orig(self, rt.TensorHandle(_f32(arg), tl.float32))
            return rt.TensorHandle(encode(out.data, ty), ty)

        return method

    state.patcher.set(B, "binary_op", binary_op)
    state.patcher.set(B, "unary_op", unary_op)
    state.patcher.set(B, "ternary_op", ternary_op)
    state.patcher.set(B, "create_fma", create_fma)
    state.patcher.set(B, "create_erf", _via_f32(orig_erf))
    state.patcher.set(B, "create_rsqrt", _via_f32(orig_rsqrt))
    install_reduce_hooks()
    install_dot_hook()
    state.hooks.add("arith")



def repair_bf16_arithmetic() -> None:
    """Defect ``bf16_arithmetic``: bf16 data are numpy uint16 arrays and
    ``InterpreterBuilder.binary_op``/``unary_op``/``ternary_op``/
    ``create_fma`` apply numpy to the bit patterns (``a*b + a`` gives values
    like 1e33).  Detected by ``a*b + a``, ``maximum(a, b)`` and ``-a`` on bf16
    tensors compared with torch's fp32 evaluation rounded to bf16.  Repair:
    each operation decodes bf16 to fp32 (exact), evaluates in fp32 and rounds
    once (RNE) to bf16 -- for + - * / and sqrt that is the correctly rounded
    result, since fp32 has more than 2*8+2 bits.  ``create_fma`` rounds
    once; reductions and scans keep bf16 partial sums; ``tl.dot`` decodes.

    Note: the GPU contracts ``a*b + a`` into one FMA (a single rounding);
    the repaired interpreter evaluates it as written -- two roundings -- so
    the two can differ in the last bit (the reference must admit both)."""
    state.arith_formats.add(language().bfloat16)
    install_arith_hooks()


def repair_fp16_arithmetic() -> None:
    """Defect ``fp16_arithmetic``: fp16 operations not rounded once from
    fp32.  Detected like ``bf16_arithmetic``.  Not present on Triton 3.6-3.9:
    numpy's float16 loops compute in float32 and round once.  The repair
    applies the bf16 machinery to fp16."""
    state.arith_formats.add(language().float16)
    install_arith_hooks()


def repair_float_scalar_args() -> None:
    """Defect ``float_scalar_args``: ``GridExecutor`` passes arguments through
    ``interpreter._implicit_cvt``, which wraps bools, ints and tensors but
    returns a Python float as is, so ``eps.to(tl.float32)`` raises
    AttributeError.  On the GPU a float argument is an fp32 scalar (Triton's
    launcher casts it; ``mangle_type(0.1) == 'fp32'``).  Detected by launching
    a kernel doing ``x + eps.to(tl.float32)``.  Repair: wrap
    ``_implicit_cvt`` so a float (or numpy floating scalar) becomes a
    1-element fp32 tensor, rounded RNE like the launcher's C cast.  A
    consequence that matches the GPU: ``bf16_tensor * eps`` now promotes to
    fp32 (a float argument is not a "weak" Python scalar)."""
    rt = runtime()
    tl = language()
    orig = rt._implicit_cvt

    def _implicit_cvt(arg):
        if isinstance(arg, (float, np.floating)) and not isinstance(arg, bool):
            with np.errstate(over="ignore"):
                data = np.array([arg], dtype=np.float32)
            return tl.tensor(rt.TensorHandle(data, tl.float32), tl.float32)
        return orig(arg)

    state.patcher.set(rt, "_implicit_cvt", _implicit_cvt)


def repair_bf16_constants() -> None:
    """Defect ``bf16_constants``: Triton 3.6's ``InterpreterBuilder`` has no ``get_bf16``, so a
    Python float meeting a bf16 tensor (``x * 1.5``, ``offset + w`` with a constexpr offset)
    raises AttributeError where the GPU makes a bf16 constant.  Detected by launching
    ``tl.full(..., -1.5, tl.bfloat16)``.  Repair: ``get_bf16`` builds the constant as later
    releases' interpreter does, the value rounded to fp32 and then to bf16 (RNE); a constant
    that is a bf16 value, as numoracle's kernels use, is exact either way."""
    rt = runtime()
    tl = language()

    def get_bf16(self, value):
        with np.errstate(over="ignore"):
            bits = rne_bf16_bits(np.array([value], dtype=np.float32))
        return rt.TensorHandle(bits, tl.bfloat16)

    state.patcher.set(rt.InterpreterBuilder, "get_bf16", get_bf16)


def repair_runtime_range() -> None:
    """Defect ``runtime_range``: Triton 3.6's interpreter turns a runtime integer argument used
    as a Python index (``range(0, n_cols, BLOCK)``, a chunked row loop) into an int with
    ``int()`` of its one-element array, which numpy 2.4 refuses ("only 0-dimensional arrays
    can be converted to Python scalars"; earlier numpy releases warned that it is deprecated).
    Detected by launching a loop over ``range(0, n, 2)``.  Repair: the index is read from the
    array's one element, as later releases' interpreter does."""
    rt = runtime()
    orig = rt._patch_lang_tensor

    def _patch_lang_tensor(tensor, scope):
        orig(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).reshape(-1)[0])
                       if np.size(self.handle.data) == 1 else int(self.handle.data))

    state.patcher.set(rt, "_patch_lang_tensor", _patch_lang_tensor)

