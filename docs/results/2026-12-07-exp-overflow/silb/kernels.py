import torch
import triton
import triton.language as tl


@triton.jit
def _silu_bwd(dy_ptr, x_ptr, dx_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    dy = tl.load(dy_ptr + offs, mask=m, other=0.0).to(tl.float32)
    x = tl.load(x_ptr + offs, mask=m, other=0.0).to(tl.float32)
    sig = 1.0 / (1.0 + tl.exp(-x))
    dx = dy * sig * (1.0 + x * (1.0 - sig))
    tl.store(dx_ptr + offs, dx.to(dx_ptr.dtype.element_ty), mask=m)


def silu_bwd(dy, x):
    dx = torch.empty_like(x)
    n = x.numel()
    _silu_bwd[(triton.cdiv(n, 1024),)](dy, x, dx, n, BLOCK=1024)
    return dx
