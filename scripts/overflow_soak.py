"""A longer run of tests/test_soundness_overflow.py's property (its inner test called directly,
draws from a seeded random generator): emulated kernels near fp32's overflow, never rejected in
fixed-input mode; prints the rejects and, per program, the draws and infinite outputs judged.

    python scripts/overflow_soak.py --seed 7 --draws 3000
"""
import argparse
import collections
import json
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
import test_soundness_overflow as T  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--draws", type=int, default=3000)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    stats = collections.Counter()
    rejects = []
    prop = T.test_an_emulated_kernel_near_overflow_is_never_rejected.hypothesis.inner_test
    for _ in range(a.draws):
        case = dict(program=rng.choice(T.PROGRAMS), seed=rng.randrange(2 ** 31), fma=rng.random() < 0.5,
                    rounding=rng.choice(["nearest", "up", "down", "away"]),
                    math_=rng.choice(["random", "extreme", "directed"]), gpu=rng.random() < 0.5)
        try:
            prop(**case)
        except AssertionError as e:
            rejects.append(dict(case, program=case["program"].name, why=str(e)[:400]))
            continue
        stats[case["program"].name] += 1
        stats[case["program"].name + ": infinities judged"] += T.judged_infinities[-1]
    print(json.dumps(dict(seed=a.seed, draws=a.draws, rejects=len(rejects), first_rejects=rejects[:3],
                          infinities_judged=sum(v for k, v in stats.items() if k.endswith("judged")),
                          per_program=dict(stats)), indent=1))
    sys.exit(1 if rejects else 0)


if __name__ == "__main__":
    main()
