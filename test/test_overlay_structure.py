"""The overlay's structure, as a reader meets it: one package, no cycle among
its modules, no private name across modules, no module-level state, and
upstream files that import it at their top."""

from __future__ import annotations

import ast
from pathlib import Path

import torch._inductor

from fusion_overlay import flags
from fusion_overlay.patchset import load_overlay_files
from tools.hooks import NEUTRAL, absolute_module

PACKAGE = "torch._inductor.codegen.cpp_fusion"
PACKAGE_DIR = "torch/_inductor/codegen/cpp_fusion/"
# (upstream file, overlay module) imported inside a function, and why: the
# module imports codegen/cpp.py's classes (a cycle at the top).
LOCAL_IMPORTS = {
    ("codegen/cpp.py", f"{PACKAGE}.outer_loop.fallbacks"),
    ("codegen/cpp.py", f"{PACKAGE}.outer_loop.first_attempt"),
}
if "outer_loop_local_buffer_check" in flags.NAMES:  # 0006, in series before 2.14.1
    LOCAL_IMPORTS.add(("codegen/cpp.py", f"{PACKAGE}.outer_loop.retile"))
PATCHED = (
    "codegen/cpp.py",
    "codegen/common.py",
    "scheduler.py",
    "ir.py",
    "lowering.py",
    "decomposition.py",
    "graph.py",
)


def module_name(rel: str) -> str:
    name = rel.removesuffix(".py").replace("/", ".")
    return name.removesuffix(".__init__")


def overlay_modules() -> dict[str, tuple[str, ast.Module]]:
    files = load_overlay_files()
    return {
        module_name(rel): (rel, ast.parse(data.decode())) for rel, data in files.items()
    }


def imports_of(name: str, rel: str, tree: ast.Module, modules) -> list[tuple[str, str]]:
    """(overlay module, imported name) of every `from ... import` in the module."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = absolute_module(name, node, rel.endswith("__init__.py"))
            for alias in node.names:
                if f"{target}.{alias.name}" in modules:
                    found.append((f"{target}.{alias.name}", ""))
                elif target in modules:
                    found.append((target, alias.name))
    return found


def test_every_overlay_module_is_in_the_package():
    assert all(rel.startswith(PACKAGE_DIR) for rel in load_overlay_files())


def test_no_private_name_crosses_a_module():
    modules = overlay_modules()
    crossing = [
        f"{name} imports {imported} from {target}"
        for name, (rel, tree) in modules.items()
        for target, imported in imports_of(name, rel, tree, modules)
        if imported.startswith("_") and target != name
    ]
    assert not crossing


def test_the_import_graph_of_the_package_has_no_cycle():
    modules = overlay_modules()
    edges = {
        name: {
            target
            for node in tree.body  # top-level imports run at import time
            if isinstance(node, ast.ImportFrom)
            for target, _ in imports_of(name, rel, ast.Module([node], []), modules)
        }
        for name, (rel, tree) in modules.items()
    }
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, " -> ".join((*path, name))
        if name in done:
            return
        for target in edges[name]:
            visit(target, (*path, name))
        done.add(name)

    for name in edges:
        visit(name, ())


def test_no_module_keeps_state_at_module_level():
    # Per-kernel and per-node state is an attribute of the kernel or node;
    # a module-level table or registry would outlive a compile.
    stateful = ("WeakKeyDictionary", "WeakSet", "WeakValueDictionary", "defaultdict")
    found = []
    for name, (_, tree) in overlay_modules().items():
        for node in tree.body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                value = node.value
                mutable = isinstance(value, (ast.Dict, ast.List, ast.Set))
                call = isinstance(value, ast.Call) and ast.unparse(value.func).split(
                    "."
                )[-1] in (*stateful, "dict", "list", "set")
                if mutable or call:
                    found.append(f"{name}: {ast.unparse(node)[:60]}")
    assert not found


def test_upstream_files_import_the_overlay_at_their_top():
    """Except where a cycle forces an import into a function; the reason is
    written next to it (in the three lines above)."""
    root = Path(torch._inductor.__file__).parent
    local = set()
    for rel in PATCHED:
        importer = module_name(f"torch/_inductor/{rel}")
        text = (root / rel).read_text()
        lines = text.splitlines()
        tree = ast.parse(text)
        top = {id(node) for node in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and id(node) not in top:
                target = absolute_module(importer, node)
                if target.startswith(PACKAGE):
                    local.add((rel, target))
                    above = lines[max(0, node.lineno - 4) : node.lineno - 1]
                    assert any("cycle" in line for line in above), (rel, node.lineno)
    assert local == LOCAL_IMPORTS


# The files every backend runs.  They reach the C++ backend's decisions only
# through its interfaces (BaseScheduling methods, backend features, the
# device's scheduling asked while lowering and decomposing), as upstream does.


def test_backend_neutral_files_neither_import_nor_name_the_cpu_package():
    root = Path(torch._inductor.__file__).parent
    for rel in NEUTRAL:
        text = (root / rel).read_text()
        importer = module_name(f"torch/_inductor/{rel}")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom):
                assert not absolute_module(importer, node).startswith(PACKAGE), rel
        assert "cpp_fusion" not in text, rel
