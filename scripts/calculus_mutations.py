"""Mutation testing of the calculus itself: apply one small change to numoracle (each a
one-line, plausible slip), run the default suite's tests that guard the calculus, and see
which of them fails.  An *unsound* mutation makes regions too small or certificates too
lenient (a correct kernel could be rejected, or an overflow judged); a *loosening* one
only widens regions (sound, but faults slip through), which the tightness tests must see.

Each mutation runs in a scratch copy of the working tree (``git ls-files``), imported ahead
of the installed package (PYTHONPATH and the copy as the working directory), so the working
tree is never touched.  Per mutation the test groups run with ``-x``, cheapest first, until
one fails (``--every-group``: all of them); the first failing test is recorded.

    python scripts/calculus_mutations.py --out docs/results/<date>-calculus-mutations.json \\
        [--md table.md] [--mutations NAME,...] [--groups NAME,...]

Exit status 1 when an unsound mutation survives every group, or a loosening one survives
the tightness group, or the unmutated tree fails a group."""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mutation:
    name: str
    kind: str            # "unsound" | "loosening"
    path: str            # file, relative to the repository root
    old: str             # text replaced (must occur; the first occurrence is replaced)
    new: str


MUTATIONS = (
    Mutation("fp32 rounding term halved", "unsound", "numoracle/calculus/tracked.py",
             "        u = fmt.u\n        zero_r = R == 0",
             "        u = fmt.u * (0.5 if fmt is F.fp32 else 1.0)\n        zero_r = R == 0"),
    Mutation("underflow term of a rounding dropped", "unsound", "numoracle/calculus/tracked.py",
             "        eta = fmt.min_subnormal / 2 if fmt.subnormals else fmt.min_normal\n"
             "        tiny = (c.abs() - R)",
             "        eta = 0.0\n        tiny = (c.abs() - R)"),
    Mutation("exp treated as correctly rounded", "unsound", "numoracle/calculus/tracked.py",
             "    if model.b == 0 and model.a <= 0.5:",
             "    if (model.b == 0 and model.a <= 0.5) or call == \"exp\":"),
    Mutation("rsqrt treated as correctly rounded", "unsound", "numoracle/calculus/tracked.py",
             "    if model.b == 0 and model.a <= 0.5:",
             "    if (model.b == 0 and model.a <= 0.5) or call == \"rsqrt\":"),
    Mutation("rounding interval's upper end rounded down", "unsound", "numoracle/oracles/rounding_interval.py",
             "F.round(hi, fmt, mode=mode, overflow=ov)",
             "F.round(hi, fmt, mode=\"down\", overflow=ov)"),
    Mutation("fixed radius replaced by the statistical one", "unsound", "numoracle/verdict/regions.py",
             "    taint = out.taint\n",
             "    fixed = stat\n    taint = out.taint\n"),
    Mutation("a sum's gamma_(d-1) in place of gamma_d", "unsound", "numoracle/calculus/ops.py",
             "    gamma = gamma_bound(d, fmt.u)",
             "    gamma = gamma_bound(d - 1, fmt.u)"),
    Mutation("curvature remainder dropped", "unsound", "numoracle/calculus/tracked.py",
             "        rem = torch.where(R > 0, 0.5 * f.curvature(lo, hi) * R * R, torch.zeros_like(R))",
             "        rem = torch.zeros_like(R)"),
    Mutation("two paths to one symbol combined root-sum-square", "unsound", "numoracle/calculus/form.py",
             "            shared[k] = Term(shared[k].coef + t.coef, shared[k].s)",
             "            shared[k] = Term((shared[k].coef.square() + t.coef.square()).sqrt(), shared[k].s)"),
    Mutation("dependent clusters adding variances", "unsound", "numoracle/calculus/form.py",
             "        by_cluster[cid] = by_cluster[cid] + sigma if cid in by_cluster else sigma\n"
             "    v = torch.zeros_like(like, dtype=torch.float64)\n"
             "    for s in by_cluster.values():\n"
             "        v = v + s.square()",
             "        by_cluster[cid] = by_cluster[cid] + sigma.square() if cid in by_cluster else sigma.square()\n"
             "    v = torch.zeros_like(like, dtype=torch.float64)\n"
             "    for s in by_cluster.values():\n"
             "        v = v + s"),
    Mutation("sigmoid's exp overflow certificate skipped", "unsound", "numoracle/calculus/functions.py",
             "    in_domain=lambda lo, hi: lo >= -FP32_EXP_LIMIT,",
             "    in_domain=_everywhere,"),
    Mutation("the mean's half-ulp division term dropped", "unsound", "numoracle/calculus/ops.py",
             "    extra = builtins.max(model.a - 0.5, 0.5) * (",
             "    extra = 0.0 * ("),
    Mutation("a dot's underflow term dropped", "unsound", "numoracle/calculus/ops.py",
             "    may = (amin * bmin) < thr\n",
             "    may = (amin * bmin) < 0.0\n"),
    Mutation("dot x a_scale left out of the block matmul's certificate", "unsound", "numoracle/calculus/quant.py",
             "    ok = ok_dot & ok_as & ok_bs & ok_acc",
             "    ok = ok_dot & ok_bs & ok_acc"),
    Mutation("every rounding term 2u", "loosening", "numoracle/calculus/tracked.py",
             "        u = fmt.u\n        zero_r = R == 0",
             "        u = 2 * fmt.u\n        zero_r = R == 0"),
    Mutation("radii x4", "loosening", "numoracle/calculus/form.py",
             "        r = r + e.abs\n    for v in f.det.values():\n        r = r + v\n    return r\n",
             "        r = r + e.abs\n    for v in f.det.values():\n        r = r + v\n    return 4 * r\n"),
)

# the default suite's tests that guard the calculus, by group, cheapest first (by default a
# mutation stops at the first group that kills it; the tightness group runs first, so a
# loosening mutation's kill there is always seen)
GROUPS = {
    "tightness": ["tests/test_tightness.py"],
    "algebra": ["tests/test_calculus_algebra.py"],
    "certificates": ["tests/test_certificate_limits.py"],
    "repros": ["tests/test_soundness_repros.py", "tests/test_calculus_edges.py", "tests/test_calculus_matmul.py"],
    "adversarial plan": ["tests/test_soundness_adversarial_plan.py"],
    "planted faults": ["tests/test_planted_faults.py"],
    "emulated soundness": ["tests/test_soundness.py"],
    "adversarial search": ["tests/test_adversarial.py"],
}
_FAILED = re.compile(r"^(FAILED|ERROR) (\S+)", re.M)


def _copy_tree(dst: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split("\n")
    for f in files:
        if not f:
            continue
        src = ROOT / f
        if src.is_file():
            (dst / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / f)


def _run_group(tree: Path, files: list, timeout: float) -> tuple:
    """(passed?, first failing test or reason, seconds)."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    t0 = time.time()
    try:
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *files],
                           cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, "timeout", time.time() - t0
    dt = time.time() - t0
    if r.returncode == 0:
        return True, None, dt
    m = _FAILED.search(r.stdout)
    return False, (m.group(2) if m else (r.stdout.strip().splitlines() or ["exit %d" % r.returncode])[-1]), dt


def run(mutations, groups, timeout, log, every_group=False) -> dict:
    with tempfile.TemporaryDirectory(prefix="numoracle-mutants-") as tmp:
        tree = Path(tmp)
        _copy_tree(tree)
        originals = {m.path: (tree / m.path).read_text() for m in mutations}
        baseline = {}
        for g in groups:
            ok, what, dt = _run_group(tree, GROUPS[g], timeout)
            baseline[g] = {"passed": ok, "first_failure": what, "seconds": round(dt, 1)}
            log(f"baseline {g}: {'pass' if ok else 'FAIL ' + str(what)} ({dt:.0f} s)")
        rows = []
        for m in mutations:
            text = originals[m.path]
            if m.old not in text:
                raise SystemExit(f"mutation {m.name!r}: its text is not in {m.path}; update the mutation list")
            (tree / m.path).write_text(text.replace(m.old, m.new, 1))
            kills = {}
            try:
                ran = []
                for g in groups:
                    ok, what, dt = _run_group(tree, GROUPS[g], timeout)
                    ran.append(g)
                    if not ok:
                        kills[g] = what
                    log(f"{m.name} / {g}: {'survives' if ok else 'killed by ' + str(what)} ({dt:.0f} s)")
                    if kills and not every_group:
                        break
            finally:
                (tree / m.path).write_text(text)
            rows.append({"mutation": m.name, "kind": m.kind, "file": m.path, "killed_by": kills,
                         "run": ran, "killed": bool(kills), "killed_by_tightness": "tightness" in kills})
    unsound = [r for r in rows if r["kind"] == "unsound"]
    loose = [r for r in rows if r["kind"] == "loosening"]
    return {"baseline": baseline, "mutations": rows,
            "unsound_killed": f"{sum(r['killed'] for r in unsound)}/{len(unsound)}",
            "loosening_killed_by_tightness": f"{sum(r['killed_by_tightness'] for r in loose)}/{len(loose)}",
            "loosening_killed": f"{sum(r['killed'] for r in loose)}/{len(loose)}"}


def markdown(res: dict, groups) -> str:
    out = ["| mutation | kind | " + " | ".join(groups) + " |", "|---|---|" + "---|" * len(groups)]
    for r in res["mutations"]:
        cells = []
        for g in groups:
            k = r["killed_by"].get(g)
            cells.append(f"killed: `{k.split('::')[-1]}`" if k else ("survives" if g in r["run"] else "not run"))
        out.append(f"| {r['mutation']} | {r['kind']} | " + " | ".join(cells) + " |")
    out.append("")
    out.append(f"Unsound mutations killed: {res['unsound_killed']}; loosening mutations killed by the tightness "
               f"tests: {res['loosening_killed_by_tightness']} (by any group: {res['loosening_killed']}).")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mutations", default="", help="comma-separated mutation names (default: all)")
    ap.add_argument("--groups", default="", help=f"comma-separated test groups (default: {','.join(GROUPS)})")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per group run")
    ap.add_argument("--every-group", action="store_true",
                    help="run every group on every mutation (default: stop at the first group that kills it)")
    ap.add_argument("--out", default="", help="JSON result file")
    ap.add_argument("--md", default="", help="markdown table file")
    a = ap.parse_args(argv)
    names = [n.strip() for n in a.mutations.split(",") if n.strip()]
    muts = [m for m in MUTATIONS if not names or m.name in names]
    if names and len(muts) != len(names):
        raise SystemExit(f"unknown mutation(s): {sorted(set(names) - {m.name for m in MUTATIONS})}")
    groups = [g.strip() for g in a.groups.split(",") if g.strip()] or list(GROUPS)
    t0 = time.time()
    res = run(muts, groups, a.timeout, log=lambda s: print(s, file=sys.stderr, flush=True),
              every_group=a.every_group)
    res["command"] = "python " + " ".join(sys.argv)
    res["seconds"] = round(time.time() - t0, 1)
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    md = markdown(res, groups)
    if a.md:
        Path(a.md).write_text(f"Calculus self-mutations (`{res['command']}`, {res['seconds']} s)\n\n" + md)
    print(md)
    bad_baseline = any(not b["passed"] for b in res["baseline"].values())
    survivors = [r for r in res["mutations"] if (r["kind"] == "unsound" and not r["killed"])
                 or (r["kind"] == "loosening" and not r["killed_by_tightness"] and "tightness" in groups)]
    return 1 if bad_baseline or survivors else 0


if __name__ == "__main__":
    sys.exit(main())
