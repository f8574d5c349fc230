"""The package layout holds: no import cycle anywhere, and pyspark only inside ``splitsource.spark``.

The import graph is read from the source (every ``import`` statement, also those inside functions), so a lazy
import cannot hide a cycle or a pyspark dependency.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("splitsource", "connectors", "serializers", "pyspark_splitsource", "pyspark_bucketing")


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, pathlib.Path]:
    return {_module_name(p): p for package in PACKAGES for p in (ROOT / package).rglob("*.py")}


def _imports(name: str, path: pathlib.Path, known: set[str]) -> set[str]:
    """The project modules ``name`` imports (a ``from package import name`` of a submodule counts as it)."""
    found: set[str] = set()
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        for target in targets:
            if target in known:
                found.add(target)
            elif target.startswith("pyspark"):
                found.add("pyspark")
    found.discard(name)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(name, path, known) for name, path in modules.items()}


def _package_of(module: str) -> str:
    """A module's room: ``core`` (``splitsource._api``, ``_errors`` ...), a subpackage (``splitsource.runtime``
    ...), ``splitsource.cli`` (the user's calls, above both engines: the command, and ``_copy_call``'s copy()), the
    facade ``splitsource`` (its ``__init__``, which re-exports every tier and so
    sits above them all), or a top-level package (``connectors``, ``serializers``)."""
    parts = module.split(".")
    if parts[0] != "splitsource":
        return parts[0]
    if len(parts) == 1:
        return "splitsource"
    if parts[1] in ("__main__", "_copy_call"):  # python -m splitsource; copy(), the command's call in Python
        return "splitsource.cli"
    if parts[1].startswith("_"):
        return "core"
    return f"splitsource.{parts[1]}"


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in graph:
                continue
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return out


def test_the_module_graph_has_no_cycle() -> None:
    graph = _graph()
    assert len(graph) > 40, "the walk found too few modules: it is not reading the project"
    assert "splitsource.copyjob._failures" in graph["splitsource.copyjob._local"], "the walk misses imports"
    assert not any("splitsource.copyjob._job" in graph[engine] for engine in ("splitsource.copyjob._local",
                                                                             "splitsource.spark._copy")), \
        "an engine imports from the job module"
    assert _cycles(graph) == []


def test_the_package_graph_has_no_cycle() -> None:
    """Rooms depend one way: core <- runtime <- sink <- copyjob <- spark <- cli <- the facade ``splitsource``."""
    graph = _graph()
    packages: dict[str, set[str]] = {}
    for module, targets in graph.items():
        here = _package_of(module)
        packages.setdefault(here, set()).update(_package_of(t) for t in targets if _package_of(t) != here)
    assert _cycles(packages) == [], packages
    assert "splitsource.spark" not in packages["splitsource.copyjob"], "the copy job must not need Spark"
    assert "splitsource.copyjob._local" in graph["splitsource._copy_call"] \
        and "splitsource.spark._copy" in graph["splitsource._copy_call"], "copy() names the engines it makes"
    assert packages["core"] <= {"serializers"}, packages["core"]


def test_pyspark_is_imported_only_by_the_spark_package() -> None:
    graph = _graph()
    importers = sorted(m for m, targets in graph.items() if "pyspark" in targets)
    assert importers, "the walk found no pyspark import at all: it is not reading the project"
    assert [m for m in importers if not m.startswith(("splitsource.spark", "pyspark_"))] == []


def test_the_detector_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.slow
def test_local_copy_and_verify_run_with_pyspark_unimportable(tmp_path: Path) -> None:
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "pyspark.py").write_text("raise ImportError('pyspark is made unimportable by this test')\n")
    env_path = f"{blocker}:{ROOT}"
    probe = subprocess.run([sys.executable, "-c", "import pyspark"], env={"PYTHONPATH": env_path, "PATH": ""},
                           capture_output=True, text=True)
    assert "made unimportable" in probe.stderr, "the blocker does not block"
    import os

    env = {**os.environ, "PYTHONPATH": env_path}
    source = ["--connector", "generator", "-o", "rows=20000", "-o", "split_rows=2500"]
    out = tmp_path / "out"
    copied = subprocess.run([sys.executable, "-m", "splitsource.cli", "copy", "--engine", "local", "--workers", "2",
                             "--quiet", *source, "--output", str(out)], env=env, capture_output=True, text=True,
                            timeout=300)
    assert copied.returncode == 0, copied.stderr
    assert "20,000 rows" in copied.stdout
    verified = subprocess.run([sys.executable, "-m", "splitsource.cli", "verify", *source, "--output", str(out)],
                              env=env, capture_output=True, text=True, timeout=300)
    assert verified.returncode == 0, verified.stderr + verified.stdout
    assert "MATCH" in verified.stdout


def _documented_layout(root: str = "splitsource/") -> set[str]:
    """The files of ``root`` (a top-level folder) as the listing at the top of docs/architecture.md names them."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text.split("## Layout", 1)[1].split("```", 2)[1]
    names: set[str] = set()
    folder, inner, section = "", "", ""
    for line in block.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if not line.startswith(" "):
            section = stripped.split()[0]
            continue
        if section != root:
            continue
        indent = len(line) - len(line.lstrip())
        first = stripped.split()[0]
        if indent == 2:
            folder, inner = (first if first.endswith("/") else ""), ""
            if not folder:
                names.add(first)
        elif indent == 4 and folder:
            inner = first if first.endswith("/") else ""
            if not inner:
                names.update(f"{folder}{token}" for token in stripped.split("  ")[0].split())
        elif indent == 6 and folder and inner:  # a folder inside a subpackage (sink/formats/)
            names.update(f"{folder}{inner}{token}" for token in stripped.split("  ")[0].split())
    return names


def test_the_documented_layout_is_the_real_one() -> None:
    real = {str(p.relative_to(ROOT / "splitsource")) for p in (ROOT / "splitsource").rglob("*.py")}
    assert _documented_layout() == real
    cassandra = {f"cassandra/{p.name}" for p in (ROOT / "connectors" / "cassandra").glob("*.py")}
    assert {n for n in _documented_layout("connectors/") if n.startswith("cassandra/")} == cassandra


def _functions(folder: str) -> list[tuple[str, int, int]]:
    """``(module:function, lines of code after its docstring, parameters besides self)`` for every function."""
    found = []
    for path in sorted((ROOT / folder).glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            body = node.body[1:] if ast.get_docstring(node) is not None else node.body
            lines = (node.body[-1].end_lineno or 0) - body[0].lineno + 1 if body else 0
            a = node.args
            params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *([a.vararg] if a.vararg else []),
                      *([a.kwarg] if a.kwarg else [])]
            if params and params[0].arg in ("self", "cls"):
                params = params[1:]
            found.append((f"{path.stem}:{node.name}", lines + 1, len(params)))  # + the def line
    return found


def test_the_copy_job_reads_as_short_steps() -> None:
    """No function of the copy job runs past 40 lines of code (its docstring aside), and none but the public
    ``copy()`` and ``verify()`` takes more than 6 parameters."""
    functions = [*_functions("splitsource/copyjob"),
                 *(f for f in _functions("splitsource") if f[0].startswith("_copy_call:"))]
    assert len(functions) > 50 and "_copy_call:copy" in {name for name, _, _ in functions}  # the walk found them
    assert [(name, lines) for name, lines, _ in functions if lines > 40] == []
    assert [(name, params) for name, _, params in functions
            if params > 6 and name not in ("_copy_call:copy", "_verify:verify")] == []


def test_connectors_neither_downcast_a_split_state_nor_silence_the_type_checker() -> None:
    """The emitter is typed by the connector's own split state (``RecordEmitter[RawT, StateT]``), so no connector
    needs ``isinstance`` on a state or a ``# type: ignore``."""
    found = [f"{path.relative_to(ROOT)}:{n}" for path in sorted((ROOT / "connectors").rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if "type: ignore" in line or "isinstance(state" in line]
    assert found == []
