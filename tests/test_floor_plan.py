"""The library's floor plan: one folder per part of the book, no private name taken across
folders, no import cycle in ``lib/`` or ``tools/`` (issue 41's acceptance, parsed from the source,
nothing imported)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIB = ROOT / "lib"
FOLDERS = {"engine", "ssm", "poisoning", "networks", "book"}


def _lib_modules() -> dict[str, Path]:
    """Dotted name -> file, for every module of lib (packages by their __init__)."""
    out = {}
    for path in sorted(LIB.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _lib_modules()


def _imports(path: Path, package: str) -> list[tuple[str, list[str], int]]:
    """(module, names taken from it, line) of every import statement, at any depth (a lazy import
    inside a function counts: it is the same dependency). ``from lib.ssm import s4d`` is the
    module ``lib.ssm.s4d`` with no names."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(a.name, [], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for a in node.names:
                if f"{base}.{a.name}" in MODULES or (package == "" and False):
                    out.append((f"{base}.{a.name}", [], node.lineno))
                else:
                    out.append((base, [a.name], node.lineno))
    return out


def _folder(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[0] == "lib" else None


def test_every_module_lives_in_a_folder():
    flat = sorted(p.name for p in LIB.glob("*.py") if p.name != "__init__.py")
    assert flat == [], f"modules outside the folders: {flat}"
    folders = {p.name for p in LIB.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == FOLDERS


def _private_crossings() -> list[str]:
    bad = []
    for name, path in MODULES.items():
        own = _folder(name)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        aliases: dict[str, str] = {}  # local name -> module of another folder
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for module, names, line in _imports(path, package):
            other = _folder(module)
            if other is None or other == own:
                continue
            if any(part.startswith("_") for part in module.split(".")):
                bad.append(f"{name}:{line} imports the private module {module}")
            bad += [f"{name}:{line} imports the private {module}.{n}" for n in names
                    if n.startswith("_")]
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("lib"):
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    if full in MODULES and _folder(full) not in (None, own):
                        aliases[a.asname or a.name] = full
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname and _folder(a.name) not in (None, own):
                        aliases[a.asname] = a.name
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases and node.attr.startswith("_")
                    and not node.attr.startswith("__")):
                bad.append(f"{name}:{node.lineno} uses {aliases[node.value.id]}.{node.attr}")
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                    and not node.attr.startswith("__")):
                chain, value = [node.attr], node.value
                while isinstance(value, ast.Attribute):
                    chain.append(value.attr)
                    value = value.value
                if isinstance(value, ast.Name) and value.id == "lib":
                    dotted = ".".join(["lib", *reversed(chain)])
                    if _folder(dotted) not in (None, own):
                        bad.append(f"{name}:{node.lineno} uses {dotted}")
    return bad


def test_no_private_name_crosses_a_folder():
    assert _private_crossings() == []


def test_the_check_finds_a_crossing(tmp_path):
    """The parser sees the three ways to reach a private name (the test above could pass on a
    parser that sees none)."""
    fake = tmp_path / "lib"
    for folder in ("engine", "ssm"):
        (fake / folder).mkdir(parents=True)
        (fake / folder / "__init__.py").write_text("")
    (fake / "__init__.py").write_text("")
    (fake / "engine" / "validation.py").write_text("def _hidden():\n    pass\n")
    (fake / "ssm" / "_kernels.py").write_text("X = 1\n")
    (fake / "ssm" / "user.py").write_text(
        "from lib.engine.validation import _hidden\nfrom lib.engine import validation\n"
        "validation._hidden()\n"
    )
    (fake / "engine" / "user.py").write_text("from lib.ssm import _kernels\n")
    global ROOT, LIB, MODULES
    saved = ROOT, LIB, MODULES
    try:
        ROOT, LIB = tmp_path, fake
        MODULES = _lib_modules()
        found = _private_crossings()
    finally:
        ROOT, LIB, MODULES = saved
    assert any("imports the private lib.engine.validation._hidden" in f for f in found)
    assert any("uses lib.engine.validation._hidden" in f for f in found)
    assert any("private module lib.ssm._kernels" in f for f in found)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every elementary cycle found by a depth-first search (one per back edge)."""
    found, state, stack = [], {}, []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                found.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def _lib_graph() -> dict[str, set[str]]:
    graph = {}
    for name, path in MODULES.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = {m for m, _, _ in _imports(path, package) if m in MODULES and m != name
                       and not name.startswith(m + ".")}  # a module's parents are not edges
    return graph


def test_no_import_cycle_in_lib():
    assert _cycles(_lib_graph()) == []


def test_no_import_cycle_in_tools():
    tools = {p.stem: p for p in (ROOT / "tools").glob("*.py")}
    graph = {name: {m.split(".")[0] for m, _, _ in _imports(path, "") if m.split(".")[0] in tools
                    and m.split(".")[0] != name} for name, path in tools.items()}
    assert _cycles(graph) == []


def test_the_cycle_search_finds_one():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
