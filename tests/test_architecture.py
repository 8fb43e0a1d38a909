"""The package's structure: no import cycle anywhere in numoracle (imports inside
functions count), and the public surface is what docs/design.md §3 names."""

from __future__ import annotations

import ast
from pathlib import Path

import numoracle

ROOT = Path(numoracle.__file__).parent


def _modules() -> dict:
    """module name -> source path, for every module of the package."""
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict) -> set:
    """The numoracle modules that importing (or running any function of) ``name`` imports,
    each with the packages Python runs on the way (their __init__)."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found = set()

    def add(target: str):
        # importing a.b.c runs a, a.b and a.b.c; the packages that hold the importer itself
        # are already running (its own package's __init__ is not an import it makes)
        parts = target.split(".")
        for k in range(1, len(parts) + 1):
            m = ".".join(parts[:k])
            if m in modules and m != name and not name.startswith(m + "."):
                found.add(m)

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "numoracle":
                    add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)] if node.level > 1 else base
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "numoracle":
                continue
            add(target)
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in modules:
                    add(sub)
    return found


def _cycles(graph: dict) -> list:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def import_graph() -> dict:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def test_no_import_cycle_in_the_package():
    graph = import_graph()
    cycles = _cycles(graph)
    detail = "\n".join(
        "  " + " <-> ".join(c) + "\n" + "\n".join(f"    {a} imports {sorted(graph[a] & set(c))}" for a in c)
        for c in cycles)
    assert not cycles, f"{len(cycles)} import cycle(s):\n{detail}"


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def _documented_names() -> list:
    import re
    text = (ROOT.parent / "docs" / "design.md").read_text()
    block = text.split("<!-- public-names -->", 1)[1].split("<!-- /public-names -->", 1)[0]
    return re.findall(r"`([A-Za-z_][A-Za-z_0-9]*)`", block)


def test_the_public_names_are_the_documented_ones():
    documented = _documented_names()
    assert len(documented) == len(set(documented)), "a name is listed twice in docs/design.md §3"
    assert sorted(numoracle.__all__) == sorted(documented), (
        f"exported, not documented: {sorted(set(numoracle.__all__) - set(documented))}; "
        f"documented, not exported: {sorted(set(documented) - set(numoracle.__all__))}")


def test_every_public_name_resolves():
    for name in numoracle.__all__:
        assert getattr(numoracle, name) is not None, name


def test_every_public_function_says_what_it_does():
    """``help(no.matmul)`` is where a user writing a reference looks first."""
    bare = [name for name in numoracle.__all__
            if callable(getattr(numoracle, name)) and not (getattr(numoracle, name).__doc__ or "").strip()]
    assert not bare, f"public callables without a docstring: {bare}"


def test_importing_a_submodule_never_replaces_a_public_function():
    """Python binds a submodule to its package's attribute of the same name when it is first
    imported: a module ``plan/skeleton.py`` imported lazily by the function ``plan.skeleton``
    replaced that function after its first call."""
    import subprocess
    import sys
    script = (
        "import importlib, pkgutil, types, sys, numoracle\n"
        "def functions():\n"
        "    return {f'{p}.{n}' for p, m in list(sys.modules.items()) if p.startswith('numoracle')\n"
        "            for n in getattr(m, '__all__', ()) if not isinstance(getattr(m, n, None), types.ModuleType)}\n"
        "found = list(pkgutil.walk_packages(numoracle.__path__, 'numoracle.'))\n"
        "for m in found:\n"
        "    if m.ispkg:\n"
        "        importlib.import_module(m.name)\n"
        "before = functions()\n"
        "for m in found:\n"
        "    if not m.name.endswith('__main__'):\n"
        "        importlib.import_module(m.name)\n"
        "print(len(before), sorted(before - functions()))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT.parent, check=True)
    count, replaced = out.stdout.split(" ", 1)
    assert int(count) > 100 and replaced.strip() == "[]", out.stdout
