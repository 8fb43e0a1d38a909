"""What numoracle asks of torch.compile (Inductor) for a verdict.

The calculus rounds by casts (``formats.round``, ``representable``): a compiled cast must
round as torch's eager cast does.
- ``emulate_precision_casts``: otherwise Inductor may keep a value cast to bf16/fp16 in
  fp32 inside a fused kernel, skipping its rounding;
- ``pattern_matcher`` off: torch 2.11's pattern ``pointless_convert`` replaces any chain of
  two float casts by one, so x.to(float32).to(float64) became x.  The patterns rewrite
  graphs for AMP, attention and matrix products, none of which a verdict has.
- the C++ compiler neither contracts a product and a sum into one rounding nor reassociates
  (Inductor's defaults, named here so that the environment variables cannot change them):
  ``formats._magic`` rounds by (x + S) - S and ``formats._ufp`` needs two rounded products.

On a CPU whose widest vectors are 512 bits, a verdict's loops are tiled by float32's width
(``float_tiling``): Inductor tiles a kernel whose loop bodies all hold bf16 or fp16 values
by the 16-bit width (32 lanes), so each of a verdict's hundreds of float64 values takes
four registers and the loops spill.  (Measurements: docs/results/INDEX.md, "CPU tiling".)

While a CPU verdict compiles, Inductor also writes its boolean masks and its widenings of
bf16/fp16 values to float64 as vector code (``vector_code``): a verdict is full of masks
(taints, range checks, settled casts) and widens every 16-bit input in each pass over it, and
the C++ Inductor writes for them by default goes through memory one element at a time where
torch's vector library has no direct conversion (docs/performance.md, "Masks").
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import re
import threading

import torch

COMPILE_OPTIONS = {"emulate_precision_casts": True, "pattern_matcher": False,
                   "cpp.enable_floating_point_contract_flag": "off", "cpp.enable_unsafe_math_opt_flag": False}

_COMPILER: list = []
_tiling_lock = threading.RLock()


def can_compile() -> bool:
    """torch.compile with Inductor's exact casts (``emulate_precision_casts``) is available."""
    if not _COMPILER:
        try:
            import torch._inductor.config as cfg
            _COMPILER.append(hasattr(cfg, "emulate_precision_casts"))
        except Exception:            # a torch without Inductor
            _COMPILER.append(False)
    return _COMPILER[0]


def float_tiling_options() -> dict:
    """The Inductor options that go with ``float_tiling``: where the CPU's widest vectors
    are 512 bits, cpp.simdlen=512 (what Inductor picks by itself, named so that numoracle's
    cached kernels are not shared with other settings' ones), else none (and no patch)."""
    try:
        from torch._inductor import cpu_vec_isa
        from torch._inductor.codegen import cpp as C
        widths = {isa.bit_width() for isa in cpu_vec_isa.valid_vec_isa_list()}
        C.TilingSelect.select_tiling, C.get_loop_body_lowp_fp
    except Exception:                  # another torch's internals: keep Inductor's choice
        return {}
    return {"cpp.simdlen": 512} if widths and max(widths) == 512 else {}


@contextlib.contextmanager
def float_tiling(active: bool):
    """While a CPU verdict compiles: Inductor's tiling sees no 16-bit dtype in its loop
    bodies (only the choice of vector width changes; the code computes the same values)."""
    if not active:
        yield
        return
    from torch._inductor.codegen import cpp as C
    select, lowp = C.TilingSelect.select_tiling, C.get_loop_body_lowp_fp

    def select_as_float(self, *args, **kwargs):
        C.get_loop_body_lowp_fp = lambda body: (None, True)
        try:
            return select(self, *args, **kwargs)
        finally:
            C.get_loop_body_lowp_fp = lowp
    with _tiling_lock:
        C.TilingSelect.select_tiling = select_as_float
        try:
            yield
        finally:
            C.TilingSelect.select_tiling = select


def brief(message: str, head: int = 200, tail: int = 500) -> str:
    """A compiler's error for a warning: its start (the exception's type) and its end, where
    Inductor and Triton say what went wrong (a subprocess's traceback comes between)."""
    message = message.strip()
    if len(message) <= head + tail + 5:
        return message
    return f"{message[:head]} ... {message[-tail:]}"


# -- masks and widenings as vector code -------------------------------------------------------
#
# Inductor's C++ holds a boolean of a vectorised loop as a VecMask of the dtype it was computed
# from (a comparison of float64 values: VecMask<double, 2> for 16 lanes).  Three things it does
# with them have no vector code in torch's ATen/cpu/vec, whose generic fallbacks store the mask
# and convert it element by element:
# - ``a & b``, ``a | b``, ``a ^ b`` first cast both masks to int32 lanes (no VecMaskCast from
#   double to int);
# - a bool tensor that a later loop reads is stored through Vectorized<bool> (a 64-lane blend);
# - reading it back builds the mask from each byte.
# In a compiled verdict these were over half of the kernel's time (perf, softmax at 64x4000,
# docs/results/2026-12-04-cpu-vector-masks.md).  ``vector_code`` has the masks combined in int64
# lanes (a reinterpretation of a double mask, a widening of a float or int32 one: vector code
# both) and bool tensors stored and read as bytes through int32 lanes.  Only the representation
# of a mask changes: every lane still holds all ones or all zeros, a stored bool is 0 or 1.
# The stores and loads are rewritten where a loop's lanes fill one or two vectors of int32 (the
# loops of AVX-512 and AVX2), and only contiguous stores.
# A bf16 or fp16 value widened to float64 has no vector conversion either (each element goes
# through c10's scalar bf16 -> float): it is widened to float32 first, which torch's vector
# library does with vector code, then to float64.  Both widenings are exact.
# Two more go element by element: a bit view between float32 and int32 (or float64 and int64),
# stored and copied one value at a time, and a position along the loop (an index expression),
# whose vector at::vec's arange sets lane by lane in every step; the fingerprint of a held bf16
# tensor needs both (holding._bits).  The rewrite views whole vectors, and writes a position as
# its broadcast plus a constant vector: the same integers.

# in Inductor's cache keys: a new tag whenever the code the rewrite writes changes, or a cached
# kernel of the old rewrite is served
CODE_TAG = "numoracle-vector-code-4"


@functools.cache
def _codegen_internals():
    """(cpp module, cpp_utils module, CustomGraphPass) of this torch's Inductor, or None where
    its internals are not the ones ``vector_code`` rewrites, by name and signature (another
    torch: Inductor's own code is kept)."""
    try:
        from torch._inductor.codegen import cpp as C
        from torch._inductor.codegen import cpp_utils as U
        from torch._inductor.custom_graph_pass import CustomGraphPass
    except ImportError:
        return None
    used = ((C, ("may_unify_binary_op_mask_type", "IndentedBuffer", "V", "DTYPE_TO_CPP")),
            (U, ("unify_mask_base_type", "cexpr_index")),
            (C.CppVecKernel, ("_get_store_line", "_get_vec_load_line", "_try_get_const_stride", "_get_num_vectors",
                              "get_to_dtype_expr", "arange", "_get_vec_type", "reduction")),
            (C.CppOverrides, ("to_dtype_bitcast",)))
    if not all(hasattr(owner, name) for owner, names in used for name in names) \
            or not isinstance(vars(C.CppVecOverrides).get("to_dtype_bitcast"), staticmethod):
        return None
    expected = {C.may_unify_binary_op_mask_type: ["a", "b"],
                C.CppVecKernel._get_store_line: ["self", "value", "var", "index", "dtype", "accu_store"],
                C.CppVecKernel._get_vec_load_line: ["self", "var", "index", "dtype", "load_mask"],
                C.CppVecKernel.get_to_dtype_expr: ["self", "src", "dtype", "src_dtype", "rounding"],
                C.CppVecKernel.arange: ["self", "index", "stride"],
                C.CppVecKernel.reduction: ["self", "dtype", "src_dtype", "reduction_type", "value"],
                C.CppOverrides.to_dtype_bitcast: ["x", "dtype", "src_dtype"]}
    try:
        if any(list(inspect.signature(f).parameters) != names for f, names in expected.items()):
            return None
    except (TypeError, ValueError):          # no signature to read
        return None
    return C, U, CustomGraphPass


@functools.cache
def _tag_pass():
    """A graph pass that changes nothing, whose uuid enters Inductor's cache key: kernels
    compiled with ``vector_code`` are not served to other compiles, nor theirs to
    numoracle's."""
    from torch._inductor.custom_graph_pass import CustomGraphPass

    class NumoracleVectorCode(CustomGraphPass):
        def __call__(self, graph):
            return None

        def uuid(self):
            return CODE_TAG

    return NumoracleVectorCode()


def vector_code_options() -> dict:
    """The Inductor options that go with ``vector_code`` (the cache tag), or none where this
    torch's internals are not the expected ones."""
    if _codegen_internals() is None:
        return {}
    return {"post_grad_custom_post_pass": _tag_pass()}


def _int_vectors(kernel) -> tuple:
    """How many vectors of int32 and of int64 one step of the loop's lanes fills."""
    return kernel._get_num_vectors(torch.int32), kernel._get_num_vectors(torch.int64)


def _int32_type(n: int) -> str:
    """The C++ type at::vec's convert<int32_t, n, ...> returns."""
    return "at::vec::Vectorized<int32_t>" if n == 1 else f"at::vec::VectorizedN<int32_t,{n}>"


def _fits_int32_vectors(kernel) -> bool:
    """Whether the loop's lanes fill one or two vectors of int32 (twice as many of int64): the
    16- and 32-lane loops of AVX-512, the 8- and 16-lane loops of AVX2."""
    n32, n64 = _int_vectors(kernel)
    return n32 in (1, 2) and n64 == 2 * n32


# the end of a row's reduction: at::vec has no vector code for the horizontal reduction of
# doubles or int64s, and its generic one folds the lanes one at a time through memory (the
# quantizer's group maxima were half its verdict's time).  Rewritten where the value does not
# depend on the order: a max or min of doubles (NaN propagates, as in at::vec::maximum), a sum
# of int64s (the fingerprints: exact)
_REDUCE_ALL = re.compile(
    r"at::vec::vec_reduce_all<(double|int64_t), (\d+)>\(\[\]\(at::vec::Vectorized<\1>& x, "
    r"at::vec::Vectorized<\1>& y\) \{ return (at::vec::maximum\(x, y\)|at::vec::minimum\(x, y\)|x \+ y); \}, "
    r"(\w+)\)")


def _tree_reduce_all(m) -> str:
    """The lanes of the accumulator reduced in halves: log2(lanes) steps, not lanes - 1."""
    t, n, op, acc = m.groups()
    pair = {"at::vec::maximum(x, y)": "max_propagate_nan(a[i], a[i + w])",
            "at::vec::minimum(x, y)": "min_propagate_nan(a[i], a[i + w])", "x + y": "a[i] + a[i + w]"}[op]
    return (f"[&]() {{ constexpr int n = {n} * at::vec::Vectorized<{t}>::size(); __at_align__ {t} a[n]; "
            f"{acc}.store(a); for (int w = n / 2; w >= 1; w /= 2) for (int i = 0; i < w; i++) "
            f"a[i] = {pair}; return a[0]; }}()")


def _constant_int(stride):
    """A loop stride as a Python int, or None where it is symbolic or not whole (a sympy
    Integer and an int alike)."""
    try:
        step = int(stride)
    except (TypeError, ValueError):
        return None
    return step if step == stride else None


_code_state = threading.local()      # .active: this thread is in a numoracle compile
_codegen_installed: list = []


def _install_codegen(C, U) -> None:
    """Wrap Inductor's three mask code generators, its cast's, its bit view's, its
    position's and its reduction's, once per process.  The wrappers write the vector code
    only in a thread inside ``vector_code(True)``, and Inductor's own elsewhere, so a compile
    of anyone else's code is untouched; a verdict whose symbolic plan traces again on a later
    call gets the same code as its first trace."""
    unify, store, load = C.may_unify_binary_op_mask_type, C.CppVecKernel._get_store_line, \
        C.CppVecKernel._get_vec_load_line
    to_dtype = C.CppVecKernel.get_to_dtype_expr
    arange_ = C.CppVecKernel.arange
    bitcast = C.CppVecOverrides.__dict__["to_dtype_bitcast"].__func__
    reduction_ = C.CppVecKernel.reduction

    def active() -> bool:
        return getattr(_code_state, "active", False)

    def unify_masks(a, b):
        if active() and a.dtype == torch.bool:
            return U.unify_mask_base_type(C.V.kernel.compute, (a, b), torch.int64)
        return unify(a, b)

    def store_line(self, value, var, index, dtype, accu_store=False):
        if (active() and dtype == torch.bool and not accu_store and not isinstance(value, str)
                and _fits_int32_vectors(self)
                and self._try_get_const_stride(index, self.itervars[self.tiling_idx]) == 1):
            # all-ones lanes -> 1, zero lanes -> 0, narrowed to bytes
            n32, n64 = _int_vectors(self)
            i32 = _int32_type(n32)
            ones = f"{value}.template cast<int64_t,{n64}>().template cast<int32_t,{n32}>()"
            code = C.IndentedBuffer()
            code.writeline(
                f"at::vec::convert<int8_t,1,int32_t,{n32}>({i32}(0) - {i32}({ones})).store("
                f"reinterpret_cast<int8_t*>({var} + {U.cexpr_index(index)}), {U.cexpr_index(self.num_elems)});")
            return code
        return store(self, value, var, index, dtype, accu_store)

    def load_line(self, var, index, dtype, load_mask=None):
        # (Inductor's own bool load ignores load_mask too)
        if active() and dtype == torch.bool and _fits_int32_vectors(self):
            n32, _ = _int_vectors(self)
            buf = f"{var} + {U.cexpr_index(index)}" if index != 0 else var
            return (f"at::vec::VecMask<int32_t,{n32}>(at::vec::convert<int32_t,{n32},uint8_t,1>("
                    f"at::vec::Vectorized<uint8_t>::loadu(reinterpret_cast<const uint8_t*>({buf}), "
                    f"{U.cexpr_index(self.num_elems)})) != {_int32_type(n32)}(0))"
                    f".template cast<float,{n32}>()")
        return load(self, var, index, dtype, load_mask)

    def to_dtype_expr(self, src, dtype, src_dtype, rounding=False):
        if (active() and not rounding and getattr(src, "is_vec", False) and dtype == torch.float64
                and src_dtype in (torch.bfloat16, torch.float16)):
            # through float32: both widenings exact, the first one vector code
            nf, n16, nd = (self._get_num_vectors(t) for t in (torch.float32, src_dtype, torch.float64))
            return (f"at::vec::convert<double,{nd},float,{nf}>("
                    f"at::vec::convert<float,{nf},{C.DTYPE_TO_CPP[src_dtype]},{n16}>({src}))")
        return to_dtype(self, src, dtype, src_dtype, rounding)

    def arange(self, index, stride):
        step = _constant_int(stride)
        if active() and index.dtype in (torch.int64, torch.int32) and step is not None:
            # a broadcast plus a constant vector (at::vec's arange sets each lane from a scalar,
            # an insert per lane in every iteration); integers: the same values
            vec = self._get_vec_type(index.dtype)
            csevar = self.cse.generate(self.compute, f"({vec}({index}) + {vec}::arange(0, {step}))")
            csevar.dtype, csevar.is_vec = index.dtype, True
            return csevar
        return arange_(self, index, stride)

    def to_dtype_bitcast(x, dtype, src_dtype):
        same = {torch.float32: torch.int32, torch.int32: torch.float32,
                torch.float64: torch.int64, torch.int64: torch.float64}
        if active() and getattr(x, "is_vec", False) and same.get(src_dtype) == dtype:
            # a reinterpretation of each vector (Inductor's own goes element by element)
            n, cdt = C.V.kernel._get_num_vectors(dtype), C.DTYPE_TO_CPP[dtype]
            if n == 1:
                return f"at::vec::cast<{cdt}>({x})"
            return (f"[&]() {{ at::vec::VectorizedN<{cdt},{n}> r; for (int i = 0; i < {n}; i++) "
                    f"r[i] = at::vec::cast<{cdt}>({x}[i]); return r; }}()")
        return bitcast(x, dtype, src_dtype)

    def reduction(self, dtype, src_dtype, reduction_type, value):
        suffix = getattr(self.reduction_suffix, "_lines", None)
        before = len(suffix) if isinstance(suffix, list) else None
        result = reduction_(self, dtype, src_dtype, reduction_type, value)
        if active() and before is not None and (
                (reduction_type in ("max", "min") and dtype == torch.float64)
                or (reduction_type == "sum" and dtype == torch.int64)):
            for i in range(before, len(suffix)):
                if isinstance(suffix[i], str):
                    suffix[i] = _REDUCE_ALL.sub(_tree_reduce_all, suffix[i])
        return result

    C.may_unify_binary_op_mask_type = unify_masks
    C.CppVecKernel._get_store_line, C.CppVecKernel._get_vec_load_line = store_line, load_line
    C.CppVecKernel.get_to_dtype_expr = to_dtype_expr
    C.CppVecKernel.arange = arange
    C.CppVecOverrides.to_dtype_bitcast = staticmethod(to_dtype_bitcast)
    C.CppVecKernel.reduction = reduction


@contextlib.contextmanager
def vector_code(active: bool):
    """While a CPU verdict compiles (in this thread): Inductor's C++ combines, stores and
    loads boolean masks, widens bf16/fp16 values to float64, views float bits as integers
    and writes positions along the loop with vector code, and ends a row's float64 max or
    min and int64 sum in halves (see above).  The values computed are the same."""
    codegen = _codegen_internals() if active else None
    if codegen is None:
        yield
        return
    with _tiling_lock:
        if not _codegen_installed:
            _install_codegen(*codegen[:2])
            _codegen_installed.append(True)
    before = getattr(_code_state, "active", False)
    _code_state.active = True
    try:
        yield
    finally:
        _code_state.active = before
