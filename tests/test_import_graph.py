"""No import circles among triage's modules, read statically from the source.

Every import counts: at module level, inside a function (a lazy import only hides a circle until
that function runs) and under `if TYPE_CHECKING:` (a type-only circle still ties two modules into
one unit that cannot be read, tested or moved alone). `from package import name` is an edge to
`package.name` when that is a module, else to `package`. A package's own `__init__` run before
its submodules is not an edge: that is how every package loads.

Run as a script to print the circles: `python tests/test_import_graph.py [PREFIX]`.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "triage"


def module_files(root: Path = ROOT, package: str = PACKAGE) -> dict[str, Path]:
    """Dotted module name -> its file, for every module of the package."""
    out: dict[str, Path] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _absolute(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute name `from <level dots><target> import ...` refers to inside `module`."""
    if level == 0:
        return target or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that `module` imports anywhere in its source."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.name
                while name and name not in known:
                    name = name.rpartition(".")[0]
                if name:
                    found.add(name)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, is_package, node.level, node.module)
            for alias in node.names:
                child = f"{base}.{alias.name}"
                if child in known:
                    found.add(child)
                elif base in known:
                    found.add(base)
    found.discard(module)
    return found


def import_graph(root: Path = ROOT, package: str = PACKAGE) -> dict[str, set[str]]:
    files = module_files(root, package)
    known = set(files)
    return {name: imports_of(name, path, known) for name, path in files.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    counter = [0]

    def visit(start: str) -> None:
        # iterative, so a deep chain of imports cannot hit the recursion limit
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return sorted(groups)


def circles_touching(prefix: str, graph: dict[str, set[str]] | None = None) -> list[list[str]]:
    graph = import_graph() if graph is None else graph
    return [g for g in circles(graph) if any(m == prefix or m.startswith(prefix + ".") for m in g)]


def test_the_graph_reader_finds_a_circle_and_sees_every_kind_of_import(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import c\n")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n")
    (pkg / "b.py").write_text("def f():\n    from .sub.c import g\n")
    (pkg / "sub" / "c.py").write_text("import pkg.a\n")
    (pkg / "d.py").write_text("from .sub import c\n")
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.d"] == {"pkg.sub.c"} and graph["pkg.sub"] == {"pkg.sub.c"}
    assert circles(graph) == [["pkg.a", "pkg.b", "pkg.sub.c"]]


def test_no_module_of_triage_is_in_an_import_circle():
    found = circles(import_graph())
    assert found == [], "import circles: " + "; ".join(" <-> ".join(group) for group in found)


if __name__ == "__main__":
    prefix = sys.argv[1] if len(sys.argv) > 1 else PACKAGE
    found = circles_touching(prefix)
    for group in found:
        print(" <-> ".join(group))
    print(f"{len(found)} circle(s) touching {prefix}")
