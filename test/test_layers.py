"""The package's import graph: no cycle, and no import against the layer order declared in .importlinter.

Function-level imports count: a lower layer that reaches up inside a function (the INT8 gate once
imported the quantiser from an encoder this way) is the same coupling as one at the top of the file.
import-linter's graph (grimp) reads them; the last test shows it does, on a deliberate violation.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from openclaw_vision.core import children

grimp = pytest.importorskip("grimp", reason="import-linter (the dev extra) reads the graph")
ROOT = Path(__file__).resolve().parents[1]


def _lint_imports() -> str:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    assert exe, "import-linter is not installed (pip install -e '.[dev]')"
    return exe


def test_no_import_breaks_the_declared_layer_order():
    res = children.run([_lint_imports(), "--no-cache"], timeout=300, cwd=ROOT)
    assert res.ok, res.tail(80)
    assert "Contracts: 5 kept, 0 broken." in res.stdout, res.tail(40)


def _cycles(graph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            advanced = False
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.find_modules_directly_imported_by(nxt)))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_the_package_has_no_import_cycle():
    graph = grimp.build_graph("openclaw_vision", include_external_packages=False)
    cycles = _cycles(graph)
    details = []
    for comp in cycles:
        members = set(comp)
        for m in comp:
            for dep in sorted(graph.find_modules_directly_imported_by(m) & members):
                lines = {d["line_number"] for d in graph.get_import_details(importer=m, imported=dep)}
                details.append(f"{m} -> {dep} (l.{', '.join(map(str, sorted(lines)))})")
    assert not cycles, "import cycles:\n" + "\n".join(details)


def test_the_checks_see_an_import_inside_a_function(tmp_path):
    """A deliberate violation: `low` imports `high` only inside a function; both checks must catch it."""
    pkg = tmp_path / "layered"
    (pkg / "low").mkdir(parents=True)
    (pkg / "high").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "high" / "__init__.py").write_text("from ..low import helper\n")
    (pkg / "low" / "__init__.py").write_text("def helper():\n    from ..high import other  # reaching up\n")
    config = tmp_path / "contracts.ini"
    config.write_text(
        "[importlinter]\nroot_package = layered\n\n[importlinter:contract:l]\nname = l\ntype = layers\n"
        "containers = layered\nlayers =\n    high\n    low\n"
    )
    res = children.run([_lint_imports(), "--no-cache", "--config", str(config)], timeout=120, cwd=tmp_path,
                       env={"PYTHONPATH": str(tmp_path)})  # fmt: skip
    assert not res.ok and "layered.low -> layered.high (l.2)" in res.stdout, res.tail(40)
    sys.path.insert(0, str(tmp_path))
    try:
        graph = grimp.build_graph("layered")
    finally:
        sys.path.remove(str(tmp_path))
    assert _cycles(graph) == [["layered.high", "layered.low"]]
