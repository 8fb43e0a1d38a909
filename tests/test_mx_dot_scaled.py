"""The ``dot_scaled`` variant of mx_scaled_matmul where a GPU emulates ``tl.dot_scaled``: the
adversarial search on an H100 found its outputs rejected in fixed mode because the emulation
reads the E8M0 byte 0 (2^-127) as a scale of 0 (docs/results/2026-12-05-h100-dot-scaled-scale-zero.md).
The variant now refuses such blocks there; the refusal rule is checked here on any machine, and
the GPU behaviour behind it by scripts/dot_scaled_scale_zero.py on a CUDA machine."""
import os
import subprocess
import sys

import pytest
import torch

from numoracle.backends import select

# the kernel module is decorated for the backend chosen when it is first imported: choose the
# interpreter first, as the modules that launch its kernels do (run before them, this import
# left them GPU kernels on a machine without one)
select("interpreter")

from numoracle.operators.kernels.mx_matmul import dot_scaled_refusal  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
E4M3_ONE, NEG_ZERO = 0x38, 0x80


def _codes(rows, blocks, fill=0, dtype=torch.float8_e4m3fn):
    width = 32 // 2 if dtype == torch.float4_e2m1fn_x2 else 32
    return torch.full((rows, blocks * width), fill, dtype=torch.uint8).view(dtype)


def _scales(*rows):
    return torch.tensor(rows, dtype=torch.uint8)


def _one_at(codes, row, block, byte=E4M3_ONE):
    """codes with ``byte`` at one place inside block ``block`` of row ``row``."""
    raw = codes.view(torch.uint8).clone()
    width = 16 if codes.dtype == torch.float4_e2m1fn_x2 else 32
    raw[row, block * width + 5] = byte
    return raw.view(codes.dtype)


@pytest.mark.parametrize("zero_in", ["a", "b", "both"])
def test_refusal_names_the_operands_with_a_nonzero_block_at_scale_byte_zero(zero_in):
    a = _one_at(_codes(2, 2), 1, 0)
    b = _one_at(_codes(1, 2), 0, 1)
    a_s = _scales([127, 127], [0, 127]) if zero_in in ("a", "both") else _scales([127, 127], [1, 127])
    b_s = _scales([127, 0]) if zero_in in ("b", "both") else _scales([127, 254])
    why = dot_scaled_refusal("cuda", (9, 0), a, a_s, b, b_s)
    named = {"a": "a hold", "b": "b hold", "both": "a and b hold"}[zero_in]
    assert why.startswith(named) and "2^-127" in why and "9.0" in why and "mx_matmul" in why


def test_no_refusal_for_blocks_of_zeros_at_scale_byte_zero():
    # zeros of either sign: what a quantizer may store for an all-zero block, 0 under any scale
    a = _one_at(_one_at(_codes(2, 2), 0, 0, NEG_ZERO), 1, 1)
    a_s = _scales([0, 0], [0, 127])
    b = _codes(3, 2, dtype=torch.float4_e2m1fn_x2)
    b_raw = b.view(torch.uint8).clone()
    b_raw[:, :] = 0x88                        # e2m1 -0 in both nibbles
    assert dot_scaled_refusal("cuda", (9, 0), a, a_s, b_raw.view(b.dtype), _scales([0, 0], [0, 0], [0, 0])) == ""


def test_a_packed_e2m1_code_in_either_nibble_counts():
    for byte in (0x01, 0x10):
        b = _codes(1, 2, dtype=torch.float4_e2m1fn_x2)
        raw = b.view(torch.uint8).clone()
        raw[0, 16 + 3] = byte                 # the second block (16 bytes a block)
        why = dot_scaled_refusal("cuda", (9, 0), _codes(1, 2), _scales([127, 127]), raw.view(b.dtype),
                                 _scales([127, 0]))
        assert why.startswith("b hold")
        assert dot_scaled_refusal("cuda", (9, 0), _codes(1, 2), _scales([127, 127]), raw.view(b.dtype),
                                  _scales([0, 127])) == ""


@pytest.mark.parametrize("device_type, capability", [("cuda", (10, 0)), ("cuda", (12, 0)), ("cpu", None)])
def test_no_refusal_with_microscaling_cores_or_off_the_gpu(device_type, capability):
    a = _one_at(_codes(1, 1), 0, 0)
    assert dot_scaled_refusal(device_type, capability, a, _scales([0]), a, _scales([0])) == ""


def test_no_refusal_without_scale_byte_zero():
    # bytes 1 (2^-126) and 254 are read as they are by the emulation (measured)
    a = _one_at(_codes(1, 2), 0, 0)
    assert dot_scaled_refusal("cuda", (9, 0), a, _scales([1, 254]), a, _scales([126, 127])) == ""


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_dot_scaled_and_scale_byte_zero():
    # its own process: this one has selected the interpreter backend
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "dot_scaled_scale_zero.py")],
                       capture_output=True, text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), check=False)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
