import torch
import triton
import triton.language as tl


@triton.jit
def _silu_mul_quant(a_ptr, b_ptr, q_ptr, s_ptr, N, G: tl.constexpr, EPS: tl.constexpr, H_BF16: tl.constexpr):
    row = tl.program_id(0)
    g = tl.program_id(1)
    offs = g * G + tl.arange(0, G)
    m = offs < N
    a = tl.load(a_ptr + row * N + offs, mask=m, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + row * N + offs, mask=m, other=0.0).to(tl.float32)
    h = a / (1.0 + tl.exp(-a)) * b
    if H_BF16:                      # the faulty kernel: h held in bf16 before the scale
        h = h.to(tl.bfloat16).to(tl.float32)
    amax = tl.max(tl.abs(h), axis=0)
    s = tl.maximum(amax, EPS) / 448.0
    q = tl.clamp(h / s, -448.0, 448.0)
    tl.store(q_ptr + row * N + offs, q.to(tl.float8e4nv), mask=m)
    tl.store(s_ptr + row * tl.cdiv(N, G) + g, s)


def silu_mul_quant(a, b, *, group_size=128, eps=1e-10, _h_bf16=False):
    R, N = a.shape
    q = torch.empty((R, N), dtype=torch.float8_e4m3fn, device=a.device)
    s = torch.empty((R, triton.cdiv(N, group_size)), dtype=torch.float32, device=a.device)
    _silu_mul_quant[(R, triton.cdiv(N, group_size))](a, b, q, s, N, G=group_size, EPS=eps, H_BF16=_h_bf16)
    return q, s


def silu_mul_quant_h_bf16(a, b, *, group_size=128, eps=1e-10):
    return silu_mul_quant(a, b, group_size=group_size, eps=eps, _h_bf16=True)
