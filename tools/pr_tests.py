"""Our pytest feature tests, in the state of one step of the series, in the
form upstream's test/inductor/ files take.

A test file of this repo is cut to the tests placed at a step and what they
use (`tools/pr_slice.py`), its config dicts lose the entries that turn off a
flag the series has not added yet (`"cpp.x": False` before the patch adding
``cpp.x``), and it is rewritten mechanically:

- test functions become methods of one ``torch._inductor.test_case.TestCase``
  class, ``run_tests()`` runs them;
- ``pytest.mark.parametrize`` becomes ``common_utils.parametrize`` (``ids``
  become ``name_fn`` or ``subtest`` names) and the class is passed to
  ``instantiate_parametrized_tests``; ``pytest.mark.skipif`` becomes
  ``unittest.skipIf``, a module's ``pytestmark`` a class decorator;
- fixtures become methods the test calls first (a fixture that yields is
  refused: its teardown has no place there); ``monkeypatch.setattr`` /
  ``setenv`` become ``unittest.mock.patch`` contexts of the test;
  ``pytest.raises`` becomes ``assertRaises`` / ``assertRaisesRegex``;
- ``assert`` statements become ``assertEqual``, ``assertIn``, ... and, on
  generated code (``x.code``), ``FileCheck`` checks.
"""

from __future__ import annotations

import ast
import dataclasses
import re

from tools.pr_slice import ModuleSource

HELPER_MODULE = "cpp_loop_nests"


class TestExportError(Exception):
    """A test uses a pytest feature the conversion does not know."""


# --------------------------------------------------------------------------
# Flags that do not exist yet


def drop_absent_flags(text: str, absent: set[str]) -> tuple[str, set[str]]:
    """Remove `"cpp.x": False` entries of dict displays for x in `absent`.

    Returns the new text and the absent flags some entry sets to anything
    but False (a test that needs the flag on cannot run before it exists).
    """
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))

    def pos(lineno: int, col: int) -> int:
        return offsets[lineno - 1] + len(lines[lineno - 1].encode()[:col].decode())

    cuts: list[tuple[int, int]] = []
    needed: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Dict):
            continue
        for key, value in zip(node.keys, node.values):
            if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                continue
            flag = key.value.removeprefix("cpp.")
            if not key.value.startswith("cpp.") or flag not in absent:
                continue
            if isinstance(value, ast.Constant) and value.value is False:
                start = pos(key.lineno, key.col_offset)
                end = pos(value.end_lineno or value.lineno, value.end_col_offset or 0)
                match = re.match(r"\s*,?[ \t]*(#[^\n]*)?\n?[ \t]*", text[end:])
                end += match.end() if match else 0
                cuts.append((start, end))
            else:
                needed.add(flag)
    for start, end in sorted(cuts, reverse=True):
        text = text[:start] + text[end:]
    text = re.sub(r"\{\s*\}", "{}", text)
    text = re.sub(
        r",\s*\}", lambda m: "}" if "\n" not in m.group(0) else m.group(0), text
    )
    ast.parse(text)
    return text, needed


# --------------------------------------------------------------------------
# The tests of a file and what each needs


def source_of(rel: str, text: str, overlay_files: set[str]) -> ModuleSource:
    """A test file as units; a test's parameters count as uses (fixtures), and
    so do the file's autouse fixtures, which pytest runs for every test."""
    source = ModuleSource(rel, text, overlay_files)
    autouse = autouse_fixtures(source)
    for unit in source.units:
        node = unit.node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            unit.uses |= {a.arg for a in node.args.args}
            if node.name.startswith("test"):
                unit.uses |= set(autouse)
    return source


def autouse_fixtures(source: ModuleSource) -> list[str]:
    """The file's ``@pytest.fixture(autouse=True)`` functions, in file order."""
    return [
        u.node.name
        for u in source.units
        if isinstance(u.node, ast.FunctionDef)
        and any(_is_autouse(d) for d in u.node.decorator_list)
    ]


def _is_autouse(decorator: ast.expr) -> bool:
    return (
        isinstance(decorator, ast.Call)
        and _decorator_name(decorator) == "pytest.fixture"
        and any(
            k.arg == "autouse"
            and isinstance(k.value, ast.Constant)
            and k.value.value is True
            for k in decorator.keywords
        )
    )


def test_names(source: ModuleSource) -> list[str]:
    return [
        u.node.name
        for u in source.units
        if isinstance(u.node, ast.FunctionDef) and u.node.name.startswith("test")
    ]


IMPLICIT = ("setup_module", "teardown_module", "pytestmark")


def closure(
    source: ModuleSource, roots: list[str]
) -> tuple[set[int], set[tuple[str, str]]]:
    """Units of `source` the tests `roots` need, and the (overlay module,
    name) pairs those units use (a module used as a whole gives name '')."""
    included: set[int] = set()
    external: set[tuple[str, str]] = set()
    todo = list(roots) + [n for n in IMPLICIT if n in source.definers]
    while todo:
        name = todo.pop()
        for index in source.units_defining(name):
            if index in included:
                continue
            included.add(index)
            unit = source.units[index]
            for module, ref in source.references(unit):
                if module is None:
                    todo.append(ref)
                else:
                    external.add((module, ref))
            for alias in unit.uses:
                binding = source.bindings.get(alias)
                if binding is not None and binding.module and binding.name is None:
                    external.add((binding.module, ""))
                    strings = {
                        n.value
                        for n in ast.walk(unit.node)
                        if isinstance(n, ast.Constant) and isinstance(n.value, str)
                    }
                    external |= {
                        (binding.module, s) for s in strings if s.isidentifier()
                    }
    return included, external


def flags_set(source: ModuleSource, units: set[int], flags: set[str]) -> set[str]:
    """Flags of `flags` that a dict display in `units` names (any value)."""
    found = set()
    for index in units:
        for node in ast.walk(source.units[index].node):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                name = node.value.removeprefix("cpp.")
                if node.value.startswith("cpp.") and name in flags:
                    found.add(name)
    return found


# --------------------------------------------------------------------------
# Rewriting into upstream's form


@dataclasses.dataclass
class _Edit:
    start: int
    end: int
    text: str


class _Text:
    """Offsets of (line, col) positions in a text, for span edits."""

    def __init__(self, text: str):
        self.text = text
        self.lines = text.splitlines(keepends=True)
        self.offsets = [0]
        for line in self.lines:
            self.offsets.append(self.offsets[-1] + len(line))

    def pos(self, lineno: int, col: int) -> int:
        line = self.lines[lineno - 1]
        return self.offsets[lineno - 1] + len(line.encode()[:col].decode())

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (
            self.pos(node.lineno, node.col_offset),  # type: ignore[attr-defined]
            self.pos(node.end_lineno, node.end_col_offset),  # type: ignore[attr-defined]
        )

    def seg(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.text[start:end]


def _apply(text: str, edits: list[_Edit]) -> str:
    for edit in sorted(edits, key=lambda e: e.start, reverse=True):
        text = text[: edit.start] + edit.text + text[edit.end :]
    return text


def _is_code(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "code") or (
        isinstance(node, ast.Name) and node.id == "code"
    )


def _assert_call(node: ast.Assert, t: _Text, used: set[str]) -> str | None:
    """The self.assert*/FileCheck statement for an assert, or None."""
    if node.msg is not None:
        return None
    test = node.test
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, op, right = test.left, test.ops[0], test.comparators[0]
        a, b = t.seg(left), t.seg(right)
        is_literal = isinstance(left, ast.Constant) and isinstance(left.value, str)
        if isinstance(op, (ast.In, ast.NotIn)) and is_literal and _is_code(right):
            used.add("FileCheck")
            check = "check" if isinstance(op, ast.In) else "check_not"
            return f"FileCheck().{check}({a}).run({b})"
        if (
            isinstance(op, ast.Eq)
            and isinstance(left, ast.Call)
            and isinstance(left.func, ast.Attribute)
            and left.func.attr == "count"
            and _is_code(left.func.value)
            and len(left.args) == 1
            and isinstance(left.args[0], ast.Constant)
        ):
            used.add("FileCheck")
            code, literal = t.seg(left.func.value), t.seg(left.args[0])
            return f"FileCheck().check_count({literal}, {b}, exactly=True).run({code})"
        method = {
            ast.Eq: "assertEqual",
            ast.NotEq: "assertNotEqual",
            ast.In: "assertIn",
            ast.NotIn: "assertNotIn",
            ast.Lt: "assertLess",
            ast.LtE: "assertLessEqual",
            ast.Gt: "assertGreater",
            ast.GtE: "assertGreaterEqual",
            ast.Is: "assertIs",
            ast.IsNot: "assertIsNot",
        }.get(type(op))
        return f"self.{method}({a}, {b})" if method else None
    if isinstance(test, ast.Compare):
        return None  # chained comparison: stays an assert
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return f"self.assertFalse({t.seg(test.operand)})"
    return f"self.assertTrue({t.seg(test)})"


def _pytest_call(node: ast.Call, t: _Text, name: str) -> bool:
    func = node.func
    dotted = []
    while isinstance(func, ast.Attribute):
        dotted.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        dotted.append(func.id)
    return ".".join(reversed(dotted)) == name


def _kw(node: ast.Call, name: str) -> ast.expr | None:
    for keyword in node.keywords:
        if keyword.arg == name:
            return keyword.value
    return None


def _skipif(node: ast.Call, t: _Text, used: set[str]) -> str:
    used.add("unittest")
    args = [t.seg(a) for a in node.args]
    reason = _kw(node, "reason")
    if reason is not None:
        args.append(t.seg(reason))
    return f"unittest.skipIf({', '.join(args)})"


def _parametrize(node: ast.Call, t: _Text, used: set[str]) -> str:
    used.add("parametrize")
    names, values = node.args[0], node.args[1]
    if isinstance(names, (ast.Tuple, ast.List)):
        arg_str = ",".join(
            str(e.value) for e in names.elts if isinstance(e, ast.Constant)
        )
        names_text = repr(arg_str)
    else:
        names_text = t.seg(names)
    ids = _kw(node, "ids")
    if ids is None:
        return f"parametrize({names_text}, {t.seg(values)})"
    if isinstance(ids, ast.Lambda):
        return f"parametrize({names_text}, {t.seg(values)}, name_fn={t.seg(ids)})"
    used.add("subtest")
    if isinstance(ids, (ast.List, ast.Tuple)) and isinstance(
        values, (ast.List, ast.Tuple)
    ):
        items = [
            f"subtest({t.seg(v)}, name={t.seg(i)})"
            for v, i in zip(values.elts, ids.elts, strict=True)
        ]
        return f"parametrize({names_text}, [{', '.join(items)}])"
    return (
        f"parametrize({names_text}, [subtest(value, name=name) for value, name "
        f"in zip({t.seg(values)}, {t.seg(ids)}, strict=True)])"
    )


def _rewrite_body(
    func: ast.FunctionDef, t: _Text, used: set[str], fixtures: set[str]
) -> list[_Edit]:
    """Edits inside one test or fixture function (positions in t)."""
    edits: list[_Edit] = []
    for node in ast.walk(func):
        if isinstance(node, ast.Assert):
            call = _assert_call(node, t, used)
            if call is not None:
                start, end = t.span(node)
                edits.append(_Edit(start, end, call))
        elif isinstance(node, ast.Call):
            func_node = node.func
            if (
                isinstance(func_node, ast.Attribute)
                and isinstance(func_node.value, ast.Name)
                and func_node.value.id == "monkeypatch"
            ):
                start, end = t.span(node)
                args = ", ".join(t.seg(a) for a in node.args)
                used.add("mock")
                if func_node.attr == "setattr":
                    text = f"self.enterContext(mock.patch.object({args}))"
                elif func_node.attr == "setenv":
                    used.add("os")
                    key, value = (t.seg(a) for a in node.args)
                    text = (
                        "self.enterContext("
                        f"mock.patch.dict(os.environ, {{{key}: {value}}}))"
                    )
                else:
                    raise TestExportError(
                        f"monkeypatch.{func_node.attr} not convertible"
                    )
                edits.append(_Edit(start, end, text))
            elif _pytest_call(node, t, "pytest.raises"):
                start, end = t.span(node)
                match = _kw(node, "match")
                exc = t.seg(node.args[0])
                text = (
                    f"self.assertRaisesRegex({exc}, {t.seg(match)})"
                    if match is not None
                    else f"self.assertRaises({exc})"
                )
                edits.append(_Edit(start, end, text))
        elif isinstance(node, ast.Name) and node.id == "monkeypatch":
            pass  # checked after the edits
    return edits


def _indent(text: str) -> str:
    return "".join(
        ("    " + line) if line.strip() else line
        for line in text.splitlines(keepends=True)
    )


def class_name(dest: str) -> str:
    stem = dest.rsplit("/", 1)[-1].removesuffix(".py").removeprefix("test_")
    words = stem.split("_")
    special = {"cpu": "CPU"}
    return "".join(special.get(w, w.capitalize()) for w in words) + "Tests"


def _is_generator(func: ast.FunctionDef) -> bool:
    """Whether func's own body yields (nested functions do not count)."""
    stack: list[ast.AST] = list(func.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return True
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))
    return False


def to_upstream(text: str, rel: str, dest: str, overlay_files: set[str]) -> str:
    """A (cut) pytest test file of ours as an upstream TestCase file."""
    source = source_of(rel, text, overlay_files)
    t = _Text(text)
    used: set[str] = set()
    fixtures = {
        u.node.name
        for u in source.units
        if isinstance(u.node, ast.FunctionDef)
        and any(
            _decorator_name(d) in ("pytest.fixture",) for d in u.node.decorator_list
        )
    }
    # pytest runs these before every test; the TestCase form calls them first
    autouse = [name for name in autouse_fixtures(source) if name in source.definers]
    module_parts: list[str] = []
    class_parts: list[str] = []
    class_decorators: list[str] = []
    has_setup_module = False
    for unit in source.units:
        chunk_start = t.offsets[unit.start]
        chunk_end = t.offsets[unit.end]
        node = unit.node
        if unit.kind in ("import", "future", "doc"):
            continue  # imports are composed below
        if isinstance(node, ast.Assign) and any(
            isinstance(x, ast.Name) and x.id == "pytestmark" for x in node.targets
        ):
            value = node.value
            if isinstance(value, ast.Call) and _pytest_call(
                value, t, "pytest.mark.skipif"
            ):
                class_decorators.append("@" + _skipif(value, t, used))
                continue
            if isinstance(value, ast.Name):  # a skip mark defined elsewhere
                class_decorators.append("@" + value.id)
                continue
            raise TestExportError(f"{rel}: pytestmark {t.seg(value)!r} not convertible")
        if isinstance(node, ast.FunctionDef) and node.name == "setup_module":
            has_setup_module = True
        is_test = isinstance(node, ast.FunctionDef) and node.name.startswith("test")
        is_fixture = isinstance(node, ast.FunctionDef) and node.name in fixtures
        edits: list[_Edit] = []
        # pytest marks anywhere at module level (requires_vectors = ...)
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call) and _pytest_call(sub, t, "pytest.mark.skipif"):
                start, end = t.span(sub)
                edits.append(_Edit(start, end, _skipif(sub, t, used)))
        if not (is_test or is_fixture):
            module_parts.append(
                _apply_chunk(text, chunk_start, chunk_end, edits).strip("\n")
            )
            continue
        assert isinstance(node, ast.FunctionDef)
        if is_fixture and _is_generator(node):
            # self.fixture() would return a generator: its setup would never
            # run and the test would get the generator, not the value
            raise TestExportError(
                f"{rel}: fixture {node.name} yields; write it as a context "
                "manager the test enters, or return its value"
            )
        edits = [e for e in edits if not _inside_decorators(e, node, t)]
        for decorator in node.decorator_list:
            start, end = t.span(decorator)
            name = _decorator_name(decorator)
            if name == "pytest.fixture":
                line_start = t.offsets[decorator.lineno - 1]
                edits.append(
                    _Edit(
                        line_start,
                        t.offsets[decorator.end_lineno or decorator.lineno],
                        "",
                    )
                )
            elif name == "pytest.mark.parametrize":
                assert isinstance(decorator, ast.Call)
                edits.append(_Edit(start, end, _parametrize(decorator, t, used)))
            elif name == "pytest.mark.skipif":
                assert isinstance(decorator, ast.Call)
                edits.append(_Edit(start, end, _skipif(decorator, t, used)))
            elif name.startswith("pytest"):
                raise TestExportError(f"{rel}: decorator {name} not convertible")
        edits += _rewrite_body(node, t, used, fixtures)
        # the parameters: self, and fixtures called first
        params = [a.arg for a in node.args.args]
        args_node = node.args
        first = node.body[0]
        if (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
            and len(node.body) > 1
        ):
            first = node.body[1]
        indent = " " * first.col_offset
        calls = "".join(
            f"self.{name}()\n{indent}"
            for name in autouse
            if is_test and name not in params
        )
        calls += "".join(f"{p} = self.{p}()\n{indent}" for p in params if p in fixtures)
        line_start = t.offsets[first.lineno - 1] + first.col_offset
        if calls:
            edits.append(_Edit(line_start, line_start, calls))
        for p in params:
            if (
                p not in fixtures
                and p != "monkeypatch"
                and not _is_parametrized(node, p)
            ):
                raise TestExportError(f"{rel}: {node.name} takes fixture {p!r}")
        kept = [p for p in params if p not in fixtures and p != "monkeypatch"]
        sig_start, sig_end = _args_span(node, t, args_node)
        edits.append(_Edit(sig_start, sig_end, ", ".join(["self", *kept])))
        method = _apply_chunk(text, chunk_start, chunk_end, edits)
        if re.search(r"\bmonkeypatch\b", method):
            raise TestExportError(
                f"{rel}: {node.name} uses monkeypatch beyond setattr/setenv"
            )
        class_parts.append(_indent(method.strip("\n")))
    name = class_name(dest)
    header = "".join(f"{d}\n" for d in class_decorators)
    if has_setup_module:
        class_parts.insert(
            0,
            "    @classmethod\n    def setUpClass(cls):\n        super().setUpClass()\n"
            "        setup_module()",
        )
    body = re.sub(r"\n{3,}", "\n\n", "\n\n".join(class_parts)) + "\n"
    klass = f"{header}class {name}(TestCase):\n{body}"
    if "parametrize" in used:
        klass += f"\n\ninstantiate_parametrized_tests({name})\n"
        used.add("instantiate_parametrized_tests")
    rest = "\n\n\n".join(module_parts)
    imports = _imports(source, t, used, rest + klass)
    doc = ""
    if source.units and source.units[0].kind == "doc":
        doc = "".join(t.lines[: source.units[0].end]).strip("\n") + "\n\n"
    main = '\n\nif __name__ == "__main__":\n    run_tests()\n'
    out = (
        doc
        + imports
        + "\n\n"
        + rest.strip("\n")
        + "\n\n\n"
        + klass.rstrip("\n")
        + "\n"
        + main
    )
    out = re.sub(r"\n{4,}", "\n\n\n", out).strip("\n") + "\n"
    ast.parse(out)
    return out


def _is_parametrized(node: ast.FunctionDef, param: str) -> bool:
    for decorator in node.decorator_list:
        if (
            isinstance(decorator, ast.Call)
            and _decorator_name(decorator) == "pytest.mark.parametrize"
        ):
            names = decorator.args[0]
            if isinstance(names, ast.Constant) and param in [
                s.strip() for s in str(names.value).split(",")
            ]:
                return True
            if isinstance(names, (ast.Tuple, ast.List)) and any(
                isinstance(e, ast.Constant) and e.value == param for e in names.elts
            ):
                return True
    return False


def _args_span(node: ast.FunctionDef, t: _Text, args: ast.arguments) -> tuple[int, int]:
    """The text between the parentheses of `def name(...)`."""
    start = t.pos(node.lineno, node.col_offset)
    open_paren = t.text.index("(", t.text.index("def " + node.name, start))
    depth, i = 0, open_paren
    while True:
        ch = t.text[i]
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return open_paren + 1, i
        i += 1


def _inside_decorators(edit: _Edit, node: ast.FunctionDef, t: _Text) -> bool:
    for decorator in node.decorator_list:
        start, end = t.span(decorator)
        if start <= edit.start < end:
            return True
    return False


def _decorator_name(node: ast.expr) -> str:
    if isinstance(node, ast.Call):
        node = node.func
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _apply_chunk(text: str, start: int, end: int, edits: list[_Edit]) -> str:
    local = [
        _Edit(e.start - start, e.end - start, e.text)
        for e in edits
        if start <= e.start < end
    ]
    return _apply(text[start:end], local)


_EXTRA_IMPORTS = {
    "unittest": "import unittest",
    "os": "import os",
    "mock": "from unittest import mock",
    "FileCheck": "from torch.testing import FileCheck",
}


def _imports(source: ModuleSource, t: _Text, used: set[str], body: str) -> str:
    """The file's import statements that `body` still uses, plus the ones
    the rewrite needs, sorted as isort would (stdlib, then the rest)."""
    statements: list[str] = []
    words = set(re.findall(r"\w+", body))
    for unit in source.units:
        node = unit.node
        if unit.kind == "future":
            continue
        if unit.kind != "import":
            continue
        assert isinstance(node, (ast.Import, ast.ImportFrom))
        kept = [a for a in node.names if (a.asname or a.name.split(".")[0]) in words]
        if not kept:
            continue
        names = [a.name + (f" as {a.asname}" if a.asname else "") for a in kept]
        if isinstance(node, ast.Import):
            statements += [f"import {n}" for n in names]
        else:
            module = "." * node.level + (node.module or "")
            if module == "compile_utils":
                module = HELPER_MODULE
            statements += [f"from {module} import {n}" for n in names]
    for key, statement in _EXTRA_IMPORTS.items():
        if key in used:
            statements.append(statement)
    statements.append("from torch._inductor.test_case import run_tests, TestCase")
    common = sorted(used & {"instantiate_parametrized_tests", "parametrize", "subtest"})
    if common:
        statements.append(
            "from torch.testing._internal.common_utils import " + ", ".join(common)
        )
    return _compose(statements)


def _compose(statements: list[str]) -> str:
    import sys

    merged: dict[str, list[str]] = {}
    plain: list[str] = []
    for s in statements:
        if s.startswith("from "):
            module, names = re.match(r"from (\S+) import (.+)", s).groups()  # type: ignore[union-attr]
            merged.setdefault(module, [])
            for n in names.split(", "):
                if n not in merged[module]:
                    merged[module].append(n)
        elif s not in plain:
            plain.append(s)

    def section(module: str) -> int:
        top = module.split(".")[0]
        if top in sys.stdlib_module_names:
            return 0
        return 2 if top == HELPER_MODULE else 1

    lines: list[tuple[int, int, str, str]] = []
    for s in plain:
        module = s.split()[1]
        lines.append((section(module), 0, module.lower(), s))
    for module, names in merged.items():
        names = sorted(names, key=str.lower)
        line = f"from {module} import {', '.join(names)}"
        if len(line) > 88:
            line = (
                f"from {module} import (\n"
                + "".join(f"    {n},\n" for n in names)
                + ")"
            )
        lines.append((section(module), 1, module.lower(), line))
    lines.sort()
    out: list[str] = []
    previous = None
    for sec, _, _, line in lines:
        if previous is not None and sec != previous:
            out.append("")
        out.append(line)
        previous = sec
    return "\n".join(out) + "\n"


def convert_marks(text: str) -> str:
    """`pytest.mark.skipif(c, reason=r)` in a module -> `unittest.skipIf(c, r)`."""
    t = _Text(text)
    used: set[str] = set()
    edits = [
        _Edit(*t.span(node), _skipif(node, t, used))
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.Call) and _pytest_call(node, t, "pytest.mark.skipif")
    ]
    return _apply(text, edits)
