"""The exact functions' curvature bounds (calculus/functions.py): sup |f''| over an
enclosure must never be below the true one, or the second-order remainder is unsound."""

import math

import pytest
import torch

from numoracle.calculus.functions import FUNCTIONS

# f'' in closed form, float64
SECOND = {
    "exp": torch.exp,
    "exp2": lambda x: math.log(2) ** 2 * torch.exp2(x),
    "log": lambda x: -x.pow(-2),
    "log2": lambda x: -x.pow(-2) / math.log(2),
    "rsqrt": lambda x: 0.75 * x.pow(-2.5),
    "sqrt": lambda x: -0.25 * x.pow(-1.5),
    "reciprocal": lambda x: 2 * x.pow(-3),
    "sigmoid": lambda x: torch.sigmoid(x) * (1 - torch.sigmoid(x)) * (1 - 2 * torch.sigmoid(x)),
    "tanh": lambda x: -2 * torch.tanh(x) * (1 - torch.tanh(x) ** 2),
    "erf": lambda x: -4 / math.sqrt(math.pi) * x * torch.exp(-x * x),
    "sin": lambda x: -torch.sin(x),
    "cos": lambda x: -torch.cos(x),
}
# enclosures [lo, hi] inside each function's domain
SPANS = {"exp": (-20.0, 20.0), "exp2": (-20.0, 20.0), "log": (0.01, 50.0), "log2": (0.01, 50.0),
         "rsqrt": (0.01, 50.0), "sqrt": (0.01, 50.0), "reciprocal": (0.05, 50.0), "sigmoid": (-30.0, 30.0),
         "tanh": (-10.0, 10.0), "erf": (-6.0, 6.0), "sin": (-50.0, 50.0), "cos": (-50.0, 50.0)}


@pytest.mark.parametrize("name", sorted(SECOND))
def test_curvature_bounds_hold_over_every_enclosure(name):
    f = FUNCTIONS[name]
    a, b = SPANS[name]
    g = torch.Generator().manual_seed(1)
    ends = torch.sort(a + (b - a) * torch.rand(400, 2, generator=g, dtype=torch.float64), dim=1).values
    # and enclosures around the points where |f''| peaks (sigmoid, tanh, erf), as narrow as one point
    peaks = torch.tensor([-1.3169578969248166, -0.6584789484624083, -0.7071067811865476, 0.0,
                          0.6584789484624083, 0.7071067811865476, 1.3169578969248166], dtype=torch.float64)
    ends = torch.cat([ends, torch.stack([peaks, peaks], 1), torch.stack([peaks - 1e-3, peaks + 1e-3], 1)])
    ends = ends.clamp(a, b)
    lo, hi = ends[:, 0], ends[:, 1]
    t = torch.linspace(0, 1, 2001, dtype=torch.float64)
    x = torch.minimum(lo[:, None] + (hi - lo)[:, None] * t[None, :], hi[:, None])
    true = SECOND[name](x).abs().amax(dim=1)
    # both sides are float64 evaluations: a few ulps apart where the bound is the endpoint's value
    bound = f.curvature(lo, hi) * (1 + 2.0 ** -50)
    assert bool((bound >= true).all()), (name, float(((true - bound) / true).max()))
