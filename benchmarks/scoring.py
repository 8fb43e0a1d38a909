"""What a fuzz case's scoring costs after its verdict, by output size: ``Verdict.worst`` (the
explanation's element and the ulps target), ``outcomes.excess_ulps`` and
``outcomes.boundary_score`` (the two ``target()`` values), best of 30, on one thread, for
accepted rms_norm verdicts (bf16, the emulator's outputs).  Two checkouts side by side:

    for side in /path/to/before /path/to/after; do
        PYTHONPATH=$side OMP_NUM_THREADS=1 python benchmarks/scoring.py; done
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    import throughput as T

    import numoracle
    from numoracle.check import check
    from numoracle.runner.outcomes import boundary_score, excess_ulps
    print(f"numoracle: {os.path.dirname(numoracle.__file__)}")
    for shape in [(8, 256), (64, 512), (64, 4096)]:
        op, cases = T.make_cases("rms_norm", 0, 1, extra=[shape])
        inputs, params, outs = cases[0]
        v = check(op.reference, outs, inputs, params)
        row = []
        for name, f in (("worst", v.worst), ("excess_ulps", lambda v=v: excess_ulps(v)),
                        ("boundary_score", lambda v=v: boundary_score(v))):
            f()
            ts = []
            for _ in range(30):
                t = time.perf_counter()
                f()
                ts.append(time.perf_counter() - t)
            row.append(f"{name} {min(ts) * 1e3:7.3f} ms")
        print(f"{shape[0]:3d} x {shape[1]:4d} ({v.status}): " + "   ".join(row))


if __name__ == "__main__":
    main()
