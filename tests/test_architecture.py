"""The floor plan as rules (issue 32), read from the source with ``ast``.

- no package holds more than :data:`MAX_MODULES` modules;
- no module is longer than :data:`MAX_MODULE_LINES` lines, no class than :data:`MAX_CLASS_LINES`;
- no import circle between project modules, counting imports inside functions (only
  ``if TYPE_CHECKING:`` blocks are left out: they never run);
- ``partitioning/`` imports no PySpark, anywhere;
- the arrows between packages are the ones ``docs/architecture.md`` draws, no more and no
  fewer, and each package's ``__init__.py`` docstring names every module in it (its map).

Each rule is also run against a small made-up tree that breaks it, so none can pass vacuously.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TOP = ("partitioning", "pipelines")
MAX_MODULES = 15
MAX_MODULE_LINES = 400
MAX_CLASS_LINES = 250
DOC = REPO / "docs" / "architecture.md"


def modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module under the project's top packages."""
    out = {}
    for top in TOP:
        for path in sorted((root / top).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _runtime_nodes(tree: ast.Module) -> Iterable[ast.AST]:
    """Every node that can run: ``if TYPE_CHECKING:`` bodies are skipped."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                stack.extend(child.orelse)
                continue
            stack.append(child)


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules ``name`` imports (``from pkg import mod`` is an import of ``mod``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def resolve(dotted: str) -> str | None:
        while dotted and dotted not in known:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    found: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for target in targets:
            resolved = resolve(target)
            if resolved is not None and resolved != name:
                found.add(resolved)
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    known = modules(root)
    return {name: imports(name, path, known) for name, path in known.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def node_of(module: str, known: Iterable[str]) -> str:
    """A module's place on the floor plan: its sub-package, or itself at a top level."""
    parts = module.split(".")
    package = ".".join(parts[:2])
    return package if len(parts) > 2 or any(m.startswith(package + ".") for m in known) else module


# Modules every package may import (not drawn): the error root, progress lines, and the
# Spark session helpers. What *they* import is drawn like any other arrow.
BASE = frozenset(
    {
        "partitioning.errors",
        "partitioning.progress",
        "pipelines.jar",
        "pipelines.read_options",
        "pipelines.session",
        "pipelines.session_calls",
        "pipelines.shared_roots",
        "pipelines.spark_errors",
        "pipelines.tasks",
    }
)


def package_arrows(graph: dict[str, set[str]], base: frozenset[str] = BASE) -> set[tuple[str, str]]:
    """Arrows between places on the floor plan within one top package. Left out: the public
    ``__init__`` re-exports, arrows into :data:`BASE`, and ``pipelines`` -> ``partitioning``
    (Spark's side sits on the whole core; the reverse is :func:`upward_imports`)."""
    return {
        (node_of(a, graph), node_of(b, graph))
        for a, targets in graph.items()
        for b in targets
        if node_of(a, graph) != node_of(b, graph)
        and a not in TOP
        and node_of(b, graph) not in base
        and a.split(".")[0] == b.split(".")[0]
    }


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Imports of ``pipelines`` from ``partitioning``: the core knows nothing of Spark's side."""
    return sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets if a < "pipelines" <= b)


def too_long(root: Path) -> list[str]:
    out = []
    for name, path in modules(root).items():
        text = path.read_text()
        if (lines := len(text.splitlines())) > MAX_MODULE_LINES:
            out.append(f"{name}: {lines} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and (size := node.end_lineno - node.lineno + 1) > MAX_CLASS_LINES:  # type: ignore[operator]
                out.append(f"{name}.{node.name}: {size} lines")
    return out


def crowded(root: Path) -> list[str]:
    out = []
    for top in TOP:
        for folder in [root / top, *(p.parent for p in (root / top).rglob("__init__.py"))]:
            count = len(list(folder.glob("*.py")))
            if count > MAX_MODULES:
                out.append(f"{folder.relative_to(root)}: {count} modules")
    return sorted(set(out))


def spark_imports(root: Path) -> list[str]:
    out = []
    for path in sorted((root / "partitioning").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            out += [f"{path.relative_to(root)}:{node.lineno} {n}" for n in names if n.split(".")[0] == "pyspark"]  # type: ignore[attr-defined]
    return out


def unmapped(root: Path) -> list[str]:
    """Modules (and sub-packages) their package's ``__init__`` docstring does not name."""
    out = []
    for top in TOP:
        for init in sorted((root / top).rglob("__init__.py")):
            doc = ast.get_docstring(ast.parse(init.read_text())) or ""
            members = [m.stem for m in init.parent.glob("*.py") if m.name != "__init__.py"]
            members += [d.name for d in init.parent.iterdir() if (d / "__init__.py").is_file()]
            for member in sorted(members):
                if not re.search(rf"\b{member}\b", doc):
                    out.append(f"{init.relative_to(root)} does not name {member}")
    return out


def drawn_arrows(doc: str) -> set[tuple[str, str]]:
    """The arrows of the architecture page's ``mermaid`` diagrams: ``a --> b`` per line."""
    blocks = re.findall(r"```mermaid\n(.*?)```", doc, flags=re.S)
    assert blocks, "no mermaid diagram"
    return {arrow for block in blocks for arrow in re.findall(r"^\s*([\w.]+)\s*-->\s*([\w.]+)\s*$", block, flags=re.M)}


# -- the rules on this tree


def test_no_import_circle() -> None:
    assert circles(import_graph(REPO)) == []


def test_no_module_or_class_too_long() -> None:
    assert too_long(REPO) == []


def test_no_package_too_crowded() -> None:
    assert crowded(REPO) == []


def test_partitioning_imports_no_pyspark_and_nothing_of_pipelines() -> None:
    assert spark_imports(REPO) == []
    assert upward_imports(import_graph(REPO)) == []


def test_every_package_docstring_maps_its_modules() -> None:
    assert unmapped(REPO) == []


def test_the_packages_import_only_along_the_drawn_arrows() -> None:
    actual = package_arrows(import_graph(REPO))
    drawn = drawn_arrows(DOC.read_text())
    assert sorted(actual - drawn) == [], "arrows the code has and the architecture page does not draw"
    assert sorted(drawn - actual) == [], "arrows the architecture page draws and the code no longer has"


# -- each rule fails on a tree that breaks it


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for top in TOP:
        (tmp_path / top).mkdir(exist_ok=True)
        (tmp_path / top / "__init__.py").touch()
    return tmp_path


def test_a_circle_through_an_import_inside_a_function_is_found(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "partitioning/a/__init__.py": '"""a: x"""\n',
            "partitioning/a/x.py": "from partitioning.b import y\n",
            "partitioning/b/__init__.py": '"""b: y"""\n',
            "partitioning/b/y.py": "def f():\n    from partitioning.a.x import g\n",
        },
    )
    assert circles(import_graph(root)) == [["partitioning.a.x", "partitioning.b.y"]]
    assert package_arrows(import_graph(root), frozenset({"partitioning.b"})) == {("partitioning.b", "partitioning.a")}
    assert package_arrows(import_graph(root)) == {
        ("partitioning.a", "partitioning.b"),
        ("partitioning.b", "partitioning.a"),
    }


def test_type_checking_imports_make_no_circle_and_upward_imports_are_found(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "partitioning/x.py": "from partitioning import y\nimport pipelines.z\n",
            "pipelines/z.py": "",
            "partitioning/y.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from partitioning.x import X\n"
            ),
        },
    )
    assert circles(import_graph(root)) == []
    assert upward_imports(import_graph(root)) == ["partitioning.x -> pipelines.z"]


def test_long_modules_long_classes_crowded_folders_pyspark_and_unmapped_modules_are_found(tmp_path: Path) -> None:
    big_class = "class Big:\n" + "    x = 1\n" * MAX_CLASS_LINES
    files = {
        "partitioning/long.py": "x = 1\n" * (MAX_MODULE_LINES + 1),
        "partitioning/cls.py": big_class,
        "partitioning/spark.py": "def f():\n    from pyspark.sql import functions\n",
        "pipelines/crowd/__init__.py": '"""crowd: m0"""\n',
    }
    files |= {f"pipelines/crowd/m{i}.py": "" for i in range(MAX_MODULES)}
    root = _tree(tmp_path, files)
    assert too_long(root) == [
        f"partitioning.cls.Big: {MAX_CLASS_LINES + 1} lines",
        f"partitioning.long: {MAX_MODULE_LINES + 1} lines",
    ]
    assert crowded(root) == [f"pipelines/crowd: {MAX_MODULES + 1} modules"]
    assert spark_imports(root) == ["partitioning/spark.py:2 pyspark.sql"]
    missing = [f"pipelines/crowd/__init__.py does not name m{i}" for i in sorted(range(1, MAX_MODULES), key=str)]
    assert [line for line in unmapped(root) if "crowd/" in line] == missing
    assert "partitioning/__init__.py does not name cls" in unmapped(root)  # a top package's map too
    assert "pipelines/__init__.py does not name crowd" in unmapped(root)  # and its sub-packages


@pytest.mark.parametrize(
    ("diagram", "arrows"),
    [("graph TD\n  partitioning.sql --> partitioning.errors\n", {("partitioning.sql", "partitioning.errors")})],
)
def test_the_drawn_arrows_are_read_from_the_mermaid_block(diagram: str, arrows: set[tuple[str, str]]) -> None:
    assert drawn_arrows(f"# A\n\n```mermaid\n{diagram}```\n") == arrows
