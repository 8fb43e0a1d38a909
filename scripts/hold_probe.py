#!/usr/bin/env python3
"""An accepted compiled verdict holds the caller's tensors (``compiled.HOLD_ACCEPTED``), also
when it replays a CUDA graph: per operator at 1e6 elements, a verdict's explanation, then one
bit of the kernel's output flipped under an accepted verdict (asking for its explanation must
raise ``TensorsChanged``), judged again (a reject, which keeps copies), and flipped back (the
reject's explanation must not change).

    PYTHONPATH=$PWD python scripts/hold_probe.py [OPERATOR ...]      # CUDA; writes $OUT/hold_probe.json
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
import run as B  # noqa: E402

from numoracle import compiled  # noqa: E402
from numoracle.check import check  # noqa: E402
from numoracle.errors import TensorsChanged  # noqa: E402


def probe(op_name: str) -> dict:
    op, inputs, params, outs = B.setup(op_name, 10 ** 6, "cuda")
    compiled.clear()
    for _ in range(3):
        v = check(op.reference, outs, inputs, params)
    plan = list(compiled._plans.values())[0]
    y = outs[0] if isinstance(outs, (tuple, list)) else outs
    r = dict(status=v.status, hold=plan.hold, graphs=plan.graphs, failed=plan.failed,
             explain_before=v.explain()[:200])
    held = check(op.reference, outs, inputs, params)
    y.view(torch.uint8).view(-1)[12345] ^= 1
    try:
        held.explain()
        r["after_change"] = "no error"
    except TensorsChanged as exc:
        r["after_change"] = str(exc)[:300]
    again = check(op.reference, outs, inputs, params)
    r["changed_status"], r["changed_rejected"] = again.status, int(again.n_rejected)
    before = again.explain()
    y.view(torch.uint8).view(-1)[12345] ^= 1
    r["reject_explains_after_restore"] = again.explain() == before
    return r


def main() -> int:
    os.environ["NUMORACLE_COMPILE"] = "always"
    out = {}
    for name in sys.argv[1:] or ("per_token_group_quant_fp8", "rms_norm"):
        out[name] = probe(name)
        print(name, json.dumps(out[name])[:800], flush=True)
    with open(os.path.join(os.environ.get("OUT", "."), "hold_probe.json"), "w") as fh:
        json.dump(out, fh, indent=1)
    ok = all(r["after_change"] != "no error" and r["reject_explains_after_restore"] for r in out.values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
