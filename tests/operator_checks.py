"""Judging helpers shared by the operator test files."""
from numoracle.check import check_modes


def assert_accepted(v, what):
    """Accepted; or uncertified only where a value leaves its format's finite range (e.g.
    gelu(e)·g of a 1000x outlier in fp16): outside the domain the regions are certified on,
    never a silent accept."""
    if v.status == "uncertified":
        sites = v.certificate.failing or []
        assert sites and all(s.kind == "range" for s in sites), f"{what}: {v.explain()}"
        return
    assert v.status == "accept", f"{what}: {v.status}\n{v.explain()}"


def judge(op, kernel, seed, group, dtype, rows, cols):
    """[statistical verdict, fixed verdict] of one run of ``kernel`` on the operator's example."""
    inputs, params = op.example(seed, dtype=dtype, family=group, rows=rows, cols=cols)
    outs = kernel(*[t.clone() for t in inputs], **params)
    v = check_modes(op.reference, outs, inputs, params, backend="interpreter")
    return [v["statistical"], v["fixed"]]
