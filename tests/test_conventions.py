"""What a newcomer looks for: ``numoracle --version``, ``python -m numoracle`` doing what the
console script does, and help text and code comments that cite only documents in this
repository (docs/design.md §N, with N a section that docs/design.md has)."""

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import numoracle
from numoracle.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# documents that lived outside the repository once; a citation of them cannot be followed
OUTSIDE = ("DESIGN §", "OPERATORS.md", "FACTS.md", "../shared")


SECTIONS = set(re.findall(r"^#+ (\d+(?:\.\d+)*)[. ]", (ROOT / "docs/design.md").read_text(), re.M))
DOC = re.compile(r"docs/[A-Za-z0-9_./-]*[A-Za-z0-9_]")


def _sources():
    for folder in ("numoracle", "scripts"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file() and path.suffix in (".py", ".md", ".json", ".sh", ".txt"):
                yield path


def bad_citations(text: str) -> list:
    """What in ``text`` cites a document outside the repository, a docs/ file that does not
    exist (a trailing ``*`` glob counts when it matches), or a section docs/design.md lacks."""
    bad = [s for s in OUTSIDE if s in text]
    bad += [d for d in DOC.findall(text) if not (ROOT / d).exists() and not list(ROOT.glob(d + "*"))]
    bad += [f"docs/design.md §{s}" for s in re.findall(r"docs/design\.md §(\d+(?:\.\d+)*)", text)
            if s not in SECTIONS]
    return bad


def test_version_is_the_projects(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"numoracle {PYPROJECT['project']['version']}"
    assert numoracle.__version__ == PYPROJECT["project"]["version"]


def test_python_m_numoracle_is_the_console_script(monkeypatch, capsys):
    """The console script is cli:main; ``python -m numoracle`` (its __main__ run here as -m
    runs it, in the package, and once as a real process) runs the same main and exits with
    its code.  (runpy itself cannot load it under pytest, whose assertion rewriting
    claims the package because of its pytest11 plugin.)"""
    main_py = Path(numoracle.__file__).with_name("__main__.py")
    code_obj = compile(main_py.read_text(), str(main_py), "exec")
    assert PYPROJECT["project"]["scripts"]["numoracle"] == "numoracle.cli:main"
    for argv, code in ((["check", "no_such_op"], 2), (["--version"], 0)):
        monkeypatch.setattr(sys, "argv", ["numoracle", *argv])
        with pytest.raises(SystemExit) as exc:
            exec(code_obj, {"__name__": "__main__", "__package__": "numoracle", "__file__": str(main_py)})
        assert exc.value.code == code, argv
    out = capsys.readouterr()
    assert "unknown operator" in out.err and out.out.strip() == f"numoracle {numoracle.__version__}"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = subprocess.run([sys.executable, "-m", "numoracle", "--version"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert (run.returncode, run.stdout.strip()) == (0, f"numoracle {numoracle.__version__}"), run.stderr


def _help(argv, capsys) -> str:
    assert main(argv) == 0
    return capsys.readouterr().out


def test_help_lists_every_command_and_cites_nothing_outside_the_repository(capsys):
    text = _help(["--help"], capsys)
    assert "--version" in text
    missing = [c for c in COMMANDS if c not in text]
    assert not missing, missing
    for command in sorted(COMMANDS):
        text += _help([command, "--help"], capsys)
    assert not bad_citations(text), bad_citations(text)


def test_code_cites_only_documents_and_sections_in_the_repository():
    assert {"1", "4.2", "9"} <= SECTIONS  # the headings parse
    bad = [f"{p.relative_to(ROOT)}: {b}" for p in _sources() for b in bad_citations(p.read_text(errors="replace"))]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("text,ok", [("see docs/design.md §4.2", True), ("docs/results/2026-12-01-plan-*", True),
                                     ("see docs/design.md §99", False), ("see DESIGN §4", False),
                                     ("OPERATORS.md", False), ("docs/nowhere.md", False)])
def test_the_citation_check_tells_good_from_bad(text, ok):
    assert (not bad_citations(text)) is ok
