"""Packed fp4 storage (numoracle.formats.Packed, pack, unpack) and the rounding paths the
MX / NVFP4 quantizers use: every e2m1 and e4m3 value and every tie between neighbours,
against ml_dtypes on float32-exact inputs, and the E8M0 scale rules on every exponent an
fp32 amax can give."""

import math

import ml_dtypes
import numpy as np
import pytest
import torch

from numoracle import formats as F
from numoracle.calculus import quant_mx as MX
from numoracle.errors import InvalidArgument
from numoracle.mathlib import load

INTERP = load("interpreter")
H200 = load("h200")


def t64(v):
    return torch.tensor(v, dtype=torch.float64)


# ------------------------------------------------------------------ packing

@pytest.mark.parametrize("order", F.PACK_ORDERS)
def test_every_byte_unpacks_and_packs_back(order):
    b = torch.arange(256, dtype=torch.uint8).reshape(16, 16)
    codes = F.unpack(b, order)
    assert codes.shape == (16, 32) and int(codes.min()) == 0 and int(codes.max()) == 15
    assert torch.equal(F.pack(codes, order), b)
    first = b.long() & 0xF if order == "low_first" else b.long() >> 4
    assert torch.equal(codes[:, 0::2], first)


def test_low_first_is_the_layout_triton_and_torch_read():
    """tl.dot_scaled reads "the first element in lower bits"; torch.float4_e2m1fn_x2 too."""
    vals = t64([0.5, -6.0, 1.5, 0.0])
    packed = F.encode(vals, F.Packed(F.e2m1))
    assert packed.tolist() == [0x1 | 0xF << 4, 0x3]
    assert F.decode(packed.view(torch.float4_e2m1fn_x2)).tolist() == vals.tolist()
    swapped = F.encode(vals, F.Packed(F.e2m1, "high_first"))
    assert swapped.tolist() == [0x10 | 0xF, 0x30]
    assert F.decode(swapped, F.Packed(F.e2m1, "high_first")).tolist() == vals.tolist()


def test_packed_decode_agrees_with_ml_dtypes_per_nibble():
    b = torch.arange(256, dtype=torch.uint8)
    got = F.decode(b, F.Packed(F.e2m1)).numpy()
    nib = np.stack([b.numpy() & 0xF, b.numpy() >> 4], -1).reshape(-1).astype(np.uint8)
    want = nib.view(ml_dtypes.float4_e2m1fn).astype(np.float64)
    assert np.array_equal(got, want)


def test_packing_argument_errors():
    with pytest.raises(InvalidArgument, match="4-bit"):
        F.Packed(F.e4m3fn)
    with pytest.raises(InvalidArgument, match="order="):
        F.Packed(F.e2m1, "big_endian")
    with pytest.raises(InvalidArgument, match="even length"):
        F.Packed(F.e2m1).stored_shape((2, 3))
    with pytest.raises(InvalidArgument, match="even length"):
        F.pack(torch.zeros(3, dtype=torch.int64))
    with pytest.raises(InvalidArgument, match="4-bit patterns"):
        F.pack(torch.tensor([1, 16]))
    with pytest.raises(InvalidArgument, match="packed bytes"):
        F.decode(torch.zeros(2), F.Packed(F.e2m1))
    assert F.Packed(F.e2m1).stored_shape((3, 8)) == (3, 4) and repr(F.Packed(F.e2m1)) == "e2m1x2(low_first)"
