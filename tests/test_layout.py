"""The house: the tree shows the flow (DESIGN.md), and the layering holds.

target -> collect -> snapshot -> evidence -> checks -> triage -> report, with parsers beside the
collectors (pasted text becomes a snapshot), engines and knowledge as rooms of data that evidence,
checks and triage read, and the command line on top. Each layer may import only the layers named
in LAYERS; only target and collect touch the outside world (psutil, nvidia-ml-py, asyncssh).

These read the source (``ast``), never import it: a cycle or a stray import fails here even when
it is inside a function.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 700  # the limit; modules are meant to stay near 600

FOUNDATION = {"errors", "textsafe", "redact", "outfile", "bounded"}  # hangdoctor/<name>.py, stdlib only
# layer -> the layers it may import (itself always)
LAYERS: dict[str, set[str]] = {
    "foundation": set(),
    "collect": {"foundation"},  # ships in the probe: stdlib, psutil, pynvml, itself, redact
    "reach": {"collect", "foundation"},
    "snapshot": {"foundation"},
    "parsers": {"snapshot", "foundation"},
    "engines": set(),
    "knowledge": {"foundation"},
    "evidence": {"engines", "knowledge", "snapshot", "foundation"},
    "checkapi": {"evidence", "knowledge", "foundation"},
    "checks": {"checkapi", "evidence", "engines", "knowledge", "foundation"},
    "triage": {"checkapi", "evidence", "engines", "knowledge", "snapshot", "parsers", "foundation"},
    "report": {"foundation"},  # reads the analysis model (report/MODEL.md), nothing else
    "bundle": {"report", "triage", "snapshot", "foundation"},
    "scenarios": set(),  # standalone hung servers for the demo and tests (stdlib, torch)
    "cli": {"*"},
}
# third-party imports and the only layers that may use them
EXTERNAL = {
    "psutil": {"collect", "reach"},
    "pynvml": {"collect"},
    "asyncssh": {"reach"},
    "click": {"cli"},
    "jinja2": {"report"},
    "torch": {"scenarios"},
}


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted((ROOT / "hangdoctor").rglob("*.py")) + sorted((ROOT / "checks").glob("*.py")):
        rel = p.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[0] == "checks":
            parts = ["hangdoctor", "checks"] + parts[1:]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def layer_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "foundation"  # hangdoctor/__init__.py: the version
    if len(parts) == 2 and not (ROOT / "hangdoctor" / parts[1]).is_dir() and parts[1] != "checks":
        name = parts[1]
        if name in FOUNDATION:
            return "foundation"
        if name in ("bundle", "watch"):
            return "bundle"
        if name == "__main__":
            return "cli"
        raise AssertionError(f"hangdoctor/{name}.py belongs to no layer: add it to LAYERS")
    return parts[1]


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str) -> list[tuple[str, int]]:
    """(imported name, line) for every import in the module, function-level ones included."""
    path = MODULES[module]
    pkg = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            for a in node.names:
                full = f"{base}.{a.name}"
                out.append((full if _resolve(full) == full else base, node.lineno))
    return out


def internal_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for m in MODULES:
        for name, _ in imports_of(m):
            if name == "hangdoctor" or name.startswith("hangdoctor."):
                t = _resolve(name)
                if t and t != m and not m.startswith(t + "."):  # a package's own __init__
                    graph[m].add(t)
    return graph


def test_every_module_belongs_to_a_layer() -> None:
    for m in MODULES:
        assert layer_of(m) in LAYERS, m


def test_layers_import_only_what_they_may() -> None:
    bad = []
    for m in MODULES:
        mine = layer_of(m)
        allowed = LAYERS[mine] | {mine}
        for name, line in imports_of(m):
            if name == "hangdoctor" or name.startswith("hangdoctor."):
                t = _resolve(name)
                if t is None or t == m:
                    continue
                theirs = layer_of(t)
                if "*" not in allowed and theirs not in allowed:
                    bad.append(f"{MODULES[m].relative_to(ROOT)}:{line}: {mine} imports {t} ({theirs})")
                if mine == "collect" and theirs == "foundation" and t != "hangdoctor.redact":
                    bad.append(f"{MODULES[m].relative_to(ROOT)}:{line}: the probe ships only hangdoctor.redact")
            else:
                top = name.split(".")[0]
                if top in EXTERNAL and mine not in EXTERNAL[top]:
                    bad.append(f"{MODULES[m].relative_to(ROOT)}:{line}: {mine} imports {top}")
    assert bad == [], "\n".join(bad)


def test_checks_triage_and_report_never_touch_the_outside_world() -> None:
    """DESIGN.md: only the target/collect layer imports psutil, nvidia-ml-py or asyncssh."""
    for m in MODULES:
        if layer_of(m) in ("checks", "checkapi", "triage", "report", "evidence", "knowledge", "engines"):
            tops = {n.split(".")[0] for n, _ in imports_of(m)}
            assert not tops & {"psutil", "pynvml", "asyncssh", "subprocess", "socket"}, (m, tops)


def test_no_import_cycle() -> None:
    graph = internal_graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan: strongly connected components
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
                cycles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    assert cycles == [], cycles


def test_no_two_modules_share_a_name() -> None:
    names = Counter(p.name for p in MODULES.values() if p.name != "__init__.py")
    assert [n for n, c in names.items() if c > 1] == []


@pytest.mark.parametrize("module", sorted(MODULES), ids=lambda m: m.replace("hangdoctor.", ""))
def test_module_is_short_and_says_what_it_is(module: str) -> None:
    path = MODULES[module]
    text = path.read_text(encoding="utf-8")
    assert text.count("\n") <= MAX_LINES, f"{path.relative_to(ROOT)}: {text.count(chr(10))} lines"
    doc = ast.get_docstring(ast.parse(text))
    assert doc, f"{path.relative_to(ROOT)}: no module docstring"
    m = re.search(r"^Layer: (\w+); may import: .+", doc, re.M)
    assert m, f"{path.relative_to(ROOT)}: the docstring has no 'Layer: X; may import: ...' line"
    assert m.group(1) == layer_of(module), f"{path.relative_to(ROOT)}: says layer {m.group(1)}, is {layer_of(module)}"


def test_readme_flow_table_matches_the_tree() -> None:
    """Every folder of hangdoctor/ (and checks/, templates/) has its row in the README's flow
    table, and every path the table names exists."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"^## The flow, and where it lives\n(.*?)(?=^## )", readme, re.M | re.S)
    assert m, "README has no '## The flow, and where it lives' section"
    section = m.group(1)
    named = set(re.findall(r"`((?:hangdoctor|checks|templates)/[\w/.]*)`", section))
    for path in named:
        assert (ROOT / path.rstrip("/")).exists(), f"README names {path}, which does not exist"
    folders = {f"hangdoctor/{p.name}/" for p in (ROOT / "hangdoctor").iterdir()
               if p.is_dir() and (p / "__init__.py").exists()} | {"checks/", "templates/"}
    assert folders - named == set(), f"folders missing from the README's flow table: {sorted(folders - named)}"
    for layer in LAYERS:
        if layer not in ("foundation", "bundle", "checks"):
            assert f"`hangdoctor/{layer}/`" in section, layer
