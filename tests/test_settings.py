"""The settings object (docs/design.md §2-§3) and backends as objects: what the redesign
promised users - one frozen settings object whose fields are validated where they are given,
environment variables read and validated once at import, a block's settings seen by its own
thread only, profiles; and ``backend=`` taking a name, ``"auto"`` or a Backend with the same
verdict."""

import os
import subprocess
import sys
import threading

import pytest
import torch

import numoracle as no
from numoracle import backends
from numoracle.config import current
from numoracle.errors import InvalidArgument
from numoracle.formats import fp32


@no.reference
def _rms(x, w, *, eps=1e-6):
    xf = x.to(fp32)
    r = no.rsqrt(no.mean(xf * xf, axis=-1, keepdims=True) + eps)
    return (xf * r).to(x.format) * w


def _case(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 40, generator=g).to(torch.bfloat16)
    w = (1 + 0.1 * torch.randn(40, generator=g)).to(torch.bfloat16)
    xf = x.float()
    y = (xf * torch.rsqrt((xf * xf).mean(-1, keepdim=True) + 1e-6)).to(torch.bfloat16) * w
    return x, w, y


def test_a_settings_object_is_immutable_and_names_the_fix():
    s = no.settings(compile="never")
    with pytest.raises(AttributeError, match=r"immutable.*settings\(compile=\.\.\.\)"):
        s.compile = "always"
    assert s.compile == "never" and no.settings(s, compile="always").compile == "always"
    assert s.compile == "never"                       # the parent is unchanged


def test_an_unknown_field_or_a_bad_value_is_refused_where_it_is_given():
    with pytest.raises(InvalidArgument, match=r"no such field.*'compile'"):
        no.settings(compiled="always")
    with pytest.raises(InvalidArgument, match=r"compile='sometimes': expected one of"):
        no.settings(compile="sometimes")
    with pytest.raises(InvalidArgument, match=r"expected a numoracle settings object"):
        no.check(_rms, outputs=_case()[2], inputs=_case()[:2], settings={"compile": "never"})


def test_a_block_is_seen_by_its_own_thread_only_and_ends_with_it():
    before = current().compile
    seen = {}
    with no.settings(compile="never" if before != "never" else "always") as inner:
        seen["main"] = current().compile
        t = threading.Thread(target=lambda: seen.__setitem__("other", current().compile))
        t.start()
        t.join()
        with no.settings(max_rows=3):
            assert current().max_rows == 3 and current().compile == inner.compile
    assert seen["main"] == inner.compile != before
    assert seen["other"] == before
    assert current().compile == before


def test_a_registered_profile_loads_as_the_default_and_unknown_ones_are_named():
    original = no.settings.get_profile("default")
    no.settings.register_profile("test-settings-profile", max_cols=17)
    try:
        no.settings.load_profile("test-settings-profile")
        assert current().max_cols == 17
    finally:
        no.settings.load_profile("default")
    assert current() == original
    with pytest.raises(InvalidArgument, match=r"no numoracle settings profile 'nope'; registered: \["):
        no.settings.load_profile("nope")


@pytest.mark.parametrize("variable, value", [("NUMORACLE_COMPILE", "bogus"), ("NUMORACLE_ISOLATE", "perhaps")])
def test_a_bad_environment_variable_fails_at_import_naming_it_and_the_default(variable, value):
    env = dict(os.environ, **{variable: value})
    r = subprocess.run([sys.executable, "-c", "import numoracle"], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("numoracle.errors.InvalidArgument: environment variable") or "InvalidArgument" in last
    assert f"{variable}={value!r}" in last and "Unset it for the default" in last


def test_an_environment_variable_sets_the_default_profile():
    env = dict(os.environ, NUMORACLE_COMPILE="never")
    code = "import numoracle as no; print(no.settings.default.compile, no.settings.get_profile('default').compile)"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["never", "never"]


def test_backend_auto_a_name_and_a_backend_object_give_the_same_verdict_here():
    x, w, y = _case(1)
    if torch.cuda.is_available():
        pytest.skip("auto would choose the GPU, where CPU tensors are not judged the same way")
    by_name = no.check(_rms, outputs=y, inputs=(x, w), backend="interpreter", mode="fixed")
    auto = no.check(_rms, outputs=y, inputs=(x, w), backend="auto", mode="fixed")
    obj = no.check(_rms, outputs=y, inputs=(x, w), backend=backends.resolve("interpreter"), mode="fixed")
    assert by_name.status == auto.status == obj.status == "accept"
    assert auto.assumptions.backend == by_name.assumptions.backend == obj.assumptions.backend == "interpreter"
    bad = (y.view(torch.int16) + 1).view(torch.bfloat16)
    assert no.check(_rms, outputs=bad, inputs=(x, w), backend="auto", mode="fixed").status == "reject"


def test_an_unknown_backend_lists_the_names_and_the_object():
    x, w, y = _case()
    with pytest.raises(InvalidArgument, match=r"backend='cuda': expected one of \('interpreter', 'gpu', 'auto'\) "
                                              r"\(or a numoracle.backends.Backend\)"):
        no.check(_rms, outputs=y, inputs=(x, w), backend="cuda")
