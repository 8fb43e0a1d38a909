"""Which index does ``tl.argmax`` / ``tl.argmin`` return among equal values?  (docs/design.md §4.7)

    python scripts/argmax_ties_probe.py OUT.json      # on a GPU (or the CPU interpreter: --backend interpreter)

One kernel, one row per program: ``tl.argmax(x, 0, tie_break_left=T)`` (and argmin) over rows of
BLOCK values where several positions hold the row's extreme value (all of them; two; a random
third), for BLOCK 16 to 4096 and num_warps 1, 4, 8.  Counts, per (function, tie_break_left), how
often the result is the first tied index, the last, another tied one, or not a tied one at all."""

import json
import sys

import torch


def main(out: str, backend: str = "gpu") -> dict:
    if backend == "interpreter":
        from numoracle import backends
        backends.select("interpreter")
    import triton
    import triton.language as tl

    @triton.jit
    def choose(X, O, n, LEFT: tl.constexpr, MIN: tl.constexpr, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        x = tl.load(X + row * n + offs, mask=offs < n, other=float("nan") if MIN else -float("inf"))
        if MIN:
            i = tl.argmin(x, 0, tie_break_left=LEFT)
        else:
            i = tl.argmax(x, 0, tie_break_left=LEFT)
        tl.store(O + row, i)

    device = "cuda" if backend == "gpu" else "cpu"
    g = torch.Generator().manual_seed(0)
    counts = {}
    for block in (16, 128, 1024, 4096):
        rows = 96
        x = torch.randn(rows, block, generator=g)
        for r in range(rows):
            kind = r % 3
            k = block if kind == 0 else 2 if kind == 1 else max(2, block // 3)
            pos = torch.randperm(block, generator=g)[:k]
            x[r, pos] = 5.0
        for is_min in (False, True):
            xv = -x if is_min else x
            for left in (True, False):
                for warps in (1, 4, 8):
                    o = torch.empty(rows, dtype=torch.int32, device=device)
                    choose[(rows,)](xv.to(device).contiguous(), o, block, LEFT=left, MIN=is_min, BLOCK=block,
                                    num_warps=warps)
                    got = o.cpu().tolist()
                    key = f"{'argmin' if is_min else 'argmax'} tie_break_left={left}"
                    c = counts.setdefault(key, {"rows": 0, "first": 0, "last": 0, "other tied": 0, "not tied": 0})
                    for r, i in enumerate(got):
                        tied = (x[r] == 5.0).nonzero().reshape(-1).tolist()
                        c["rows"] += 1
                        c["first" if i == tied[0] else "last" if i == tied[-1] else
                          "other tied" if i in tied else "not tied"] += 1
    result = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu (interpreter)",
              "torch": torch.__version__, "triton": triton.__version__, "counts": counts}
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    args = sys.argv[1:]
    backend = "interpreter" if "--backend" in args and args[args.index("--backend") + 1] == "interpreter" else "gpu"
    print(json.dumps(main(args[0], backend), indent=1))
