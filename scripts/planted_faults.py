"""How often numoracle and assert_close (bf16 defaults) reject emulated faulty
rms_norm (llama) kernels on the same inputs.  Usage: python scripts/planted_faults.py [N]"""
import sys

from numoracle.selftest.programs import FAULTS, planted_fault_run

n = int(sys.argv[1]) if len(sys.argv) > 1 else 48
print(f"{'fault':20s} {'numoracle stat':>15s} {'numoracle fixed':>16s} {'assert_close':>13s}   (rejects / {n} cases)")
for fault in FAULTS:
    s = f = a = 0
    for seed in range(n):
        stat, fixed, ac, _ = planted_fault_run(fault, seed)
        s += stat.status == "reject"
        f += fixed.status == "reject"
        a += not ac
    print(f"{fault:20s} {s:>15d} {f:>16d} {a:>13d}")
