"""The pytest plugin: options, property_test, corpus cases as test items."""

import shutil
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True, scope="module")
def _triton_imported_outside():
    """pytester's in-process runs drop the modules they imported; Triton's
    compiled extension must not be imported twice in one process."""
    from numoracle import backends
    backends.select("interpreter")
    import numoracle.operators  # noqa: F401
    import triton  # noqa: F401


def test_plugin_is_registered_and_adds_options(pytestconfig):
    assert pytestconfig.pluginmanager.has_plugin("numoracle")
    assert pytestconfig.getoption("--numoracle-mode") == "statistical"


def _run(pytester, src, *args):
    pytester.makepyfile(test_user=src)
    pytester.syspathinsert(ROOT)          # the fixtures' user module, as a user's own package
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", "--numoracle-backend", "interpreter", *args)


def test_property_test_passes_a_correct_kernel_and_fails_a_faulty_one(pytester):
    res = _run(pytester, '''
from numoracle.pytest_plugin import property_test

test_correct = property_test("rms_norm", kernel="tests.fixtures.user_kernels:rms_norm_ok",
                             params={"casting": ("llama",), "offset": (0.0,)}, rows=(1, 2), cols=(1, 16))

@property_test("rms_norm", kernel="tests.fixtures.user_kernels:rms_norm_truncating_store",
               formats=["bf16"], params={"casting": ("llama",), "offset": (0.0,)}, rows=(1, 2), cols=(1, 16))
def test_truncating(result):
    pass
''', "--numoracle-seed", "3")
    res.assert_outcomes(passed=1, failed=1)
    out = res.stdout.str()
    assert "Kernel output outside its acceptance region" in out and "Confirmed" in out


def test_corpus_cases_are_replayed_as_items(pytester, tmp_path):
    import numoracle.corpus as C
    src = sorted((ROOT / "corpora" / "rms_norm").glob("tests.fixtures.user_kernels.*/*/case.json"))
    assert src, "the planted-fault corpus cases are committed under corpora/rms_norm/"
    case = src[0].parent
    dest = pytester.path / "corpora" / "x" / case.name
    shutil.copytree(case, dest)
    assert C.load(dest).meta["expect"] == "reject"      # committed planted-fault cases must stay rejected
    res = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--numoracle-backend", "interpreter",
                                       "--numoracle-corpus", "corpora", "-v")
    res.assert_outcomes(passed=1)
    assert "case.json::rms_norm/" in res.stdout.str()
