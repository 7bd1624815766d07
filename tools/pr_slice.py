"""A Python module cut down to some of its top-level definitions.

`tools/pr.py` exports the series one feature at a time.  An overlay module
that several features use (``cpp_fusion/costs.py``,
``cpp_fusion/emitters/kernel_helpers.py``, a module a later patch extends)
must appear in each commit in the state that commit needs: only the
definitions its patches and the modules it adds import, plus what those
definitions use.  `ModuleSource` splits a module into
its top-level statements ("units": a def, a class, an assignment, an import,
with the comments above it) and renders any subset of them in the original
order; `Slicer` follows the names across modules.  The full set renders the
file unchanged, so the last commit of the series holds the overlay's modules
as they are.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import re
import tokenize
from collections.abc import Iterable


class SliceError(Exception):
    """A module cannot be cut (a name it should define is not there)."""


def package_of(rel: str) -> list[str]:
    """torch/_inductor/codegen/x.py -> ['torch', '_inductor', 'codegen']."""
    parts = rel[: -len(".py")].split("/")
    return parts[:-1] if parts[-1] != "__init__" else parts[:-1]


def resolve_module(importer: str, level: int, module: str | None) -> str:
    """The dotted module an import statement in file `importer` names."""
    if not level:
        return module or ""
    package = package_of(importer)
    package = package[: len(package) - (level - 1)]
    return ".".join(package + ([module] if module else []))


def module_file(dotted: str, files: Iterable[str]) -> str | None:
    base = dotted.replace(".", "/")
    for candidate in (f"{base}.py", f"{base}/__init__.py"):
        if candidate in files:
            return candidate
    return None


@dataclasses.dataclass
class Binding:
    """A name an import statement binds: `alias` -> `name` of `module` (a
    file path when the module is one of ours), or the module itself."""

    alias: str
    module: str | None  # file of ours, None for any other module
    name: str | None  # None: the alias is the module


@dataclasses.dataclass
class Unit:
    index: int
    start: int  # first line (0-based) of its text, comments above included
    end: int  # one past its last line
    node: ast.stmt
    kind: str  # "doc", "future", "import", "typecheck", "def", "other"
    defines: set[str]
    uses: set[str]
    module_attrs: set[tuple[str, str]]  # (alias, attribute)
    bindings: list[Binding]  # names this unit's import statements bind
    inner_imports: list[ast.stmt]  # the imports of a TYPE_CHECKING block


def _is_type_checking_block(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.If)
        and not node.orelse
        and (
            (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
            or (
                isinstance(node.test, ast.Attribute)
                and node.test.attr == "TYPE_CHECKING"
            )
        )
        and all(isinstance(n, (ast.Import, ast.ImportFrom)) for n in node.body)
    )


def _defined_names(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        targets = [node.target]
    names: set[str] = set()
    for target in targets:
        for sub in ast.walk(target):
            if isinstance(sub, ast.Name):
                names.add(sub.id)
    return names


class ModuleSource:
    """One Python file as units; `render(units)` gives a file of a subset."""

    def __init__(self, rel: str, text: str, files: Iterable[str] = ()):
        self.rel = rel
        self.text = text
        self.files = set(files)
        self.tree = ast.parse(text)
        self.lines = text.splitlines(keepends=True)
        self.units: list[Unit] = []
        previous_end = 0
        for index, node in enumerate(self.tree.body):
            end = node.end_lineno or node.lineno
            self.units.append(self._unit(index, previous_end, end, node))
            previous_end = end
        self.tail = "".join(self.lines[previous_end:])
        self.definers: dict[str, list[int]] = {}
        for unit in self.units:
            for name in unit.defines:
                self.definers.setdefault(name, []).append(unit.index)
        self.bindings: dict[str, Binding] = {}
        for unit in self.units:
            for binding in unit.bindings:
                self.bindings[binding.alias] = binding

    # ---------------------------------------------------------------- parsing

    def binding_of(self, node: ast.stmt) -> list[Binding]:
        out = []
        if isinstance(node, ast.ImportFrom):
            dotted = resolve_module(self.rel, node.level, node.module)
            target = module_file(dotted, self.files)
            for alias in node.names:
                sub = module_file(f"{dotted}.{alias.name}", self.files)
                if sub is not None:  # from . import module [as m]
                    out.append(Binding(alias.asname or alias.name, sub, None))
                else:
                    out.append(Binding(alias.asname or alias.name, target, alias.name))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                target = module_file(alias.name, self.files)
                if alias.asname:
                    out.append(Binding(alias.asname, target, None))
                else:
                    out.append(Binding(alias.name.split(".")[0], None, None))
        return out

    def _unit(self, index: int, start: int, end: int, node: ast.stmt) -> Unit:
        kind = "other"
        inner: list[ast.stmt] = []
        if (
            index == 0
            and isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            kind = "doc"
        elif isinstance(node, ast.ImportFrom) and node.module == "__future__":
            kind = "future"
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            kind = "import"
        elif isinstance(node, ast.If) and _is_type_checking_block(node):
            kind = "typecheck"
            inner = list(node.body)
        elif _defined_names(node):
            kind = "def"
        uses: set[str] = set()
        attrs: set[tuple[str, str]] = set()
        bindings: list[Binding] = []
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name):
                uses.add(sub.id)
            elif isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name):
                attrs.add((sub.value.id, sub.attr))
            if isinstance(sub, (ast.Import, ast.ImportFrom)):
                bindings += self.binding_of(sub)
        if kind == "typecheck":
            uses.discard("TYPE_CHECKING")
        return Unit(
            index, start, end, node, kind, _defined_names(node), uses, attrs,
            bindings, inner,
        )  # fmt: skip

    # ------------------------------------------------------------ references

    def references(self, unit: Unit) -> set[tuple[str | None, str]]:
        """(module file or None for this one, name) that `unit` needs.

        Names defined in this module, and names of our other modules that
        the unit imports itself (a function-local import) or through a
        top-level import of this module.
        """
        out: set[tuple[str | None, str]] = set()
        local = {b.alias: b for b in unit.bindings}
        for name in unit.uses - unit.defines:
            binding = local.get(name) or self.bindings.get(name)
            if name in self.definers and name not in local:
                out.add((None, name))
            elif binding is not None and binding.module and binding.name:
                out.add((binding.module, binding.name))
        for alias, attr in unit.module_attrs:
            binding = local.get(alias) or self.bindings.get(alias)
            if binding is not None and binding.module and binding.name is None:
                out.add((binding.module, attr))
        if unit.kind not in ("import", "typecheck"):
            for binding in unit.bindings:  # function-local imports
                if binding.module and binding.name and binding.alias in unit.uses:
                    out.add((binding.module, binding.name))
        return out

    def units_defining(self, name: str) -> list[int]:
        return self.definers.get(name, [])

    def always(self) -> list[int]:
        """Units every non-empty state carries: docstring, `from __future__`,
        and statements that define nothing (registrations, checks)."""
        return [u.index for u in self.units if u.kind in ("doc", "future", "other")]

    def definitions(self) -> list[int]:
        return [u.index for u in self.units if u.kind == "def"]

    # -------------------------------------------------------------- rendering

    def render(self, included: Iterable[int]) -> str:
        chosen = set(included) | set(self.always())
        if set(self.definitions()) <= chosen:
            return self.text  # the whole module, byte for byte
        used: set[str] = set()
        for unit in self.units:
            if unit.index in chosen and unit.kind not in ("import", "typecheck"):
                used |= unit.uses | {alias for alias, _ in unit.module_attrs}
        for unit in self.units:  # a TYPE_CHECKING block that stays needs its test
            if unit.kind == "typecheck" and any(
                (a.asname or a.name.split(".")[0]) in used
                for n in unit.inner_imports
                for a in n.names  # type: ignore[attr-defined]
            ):
                assert isinstance(unit.node, ast.If)
                test = unit.node.test
                used |= {n.id for n in ast.walk(test) if isinstance(n, ast.Name)}
        out: list[str] = []
        for unit in self.units:
            text = "".join(self.lines[unit.start : unit.end])
            if unit.kind in ("import", "typecheck"):
                text = self._render_imports(unit, used)
                if text:
                    out.append(text)
            elif unit.index in chosen:
                out.append(text)
        return _tidy("".join(out) + self.tail)

    def _render_imports(self, unit: Unit, used: set[str]) -> str:
        head = "".join(self.lines[unit.start : unit.node.lineno - 1])
        if unit.kind == "import":
            statement = _filtered_import(unit.node, used, self.lines, "")
            return head + statement if statement else ""
        inner = [
            _filtered_import(n, used, self.lines, "    ") for n in unit.inner_imports
        ]
        inner = [s for s in inner if s]
        if not inner:
            return ""
        first = unit.node.lineno - 1
        return head + self.lines[first] + "".join(inner)


def _filtered_import(
    node: ast.stmt, used: set[str], lines: list[str], indent: str
) -> str:
    assert isinstance(node, (ast.Import, ast.ImportFrom))
    kept = [a for a in node.names if (a.asname or a.name.split(".")[0]) in used]
    if len(kept) == len(node.names):
        return "".join(lines[node.lineno - 1 : node.end_lineno])
    if not kept:
        return ""
    names = [a.name + (f" as {a.asname}" if a.asname else "") for a in kept]
    if isinstance(node, ast.Import):
        return "".join(f"{indent}import {n}\n" for n in names)
    source = "." * node.level + (node.module or "")
    line = f"{indent}from {source} import {', '.join(names)}\n"
    if len(line) <= 89:
        return line
    body = "".join(f"{indent}    {n},\n" for n in names)
    return f"{indent}from {source} import (\n{body}{indent})\n"


def _tidy(text: str) -> str:
    return re.sub(r"\n{4,}", "\n\n\n", text).strip("\n") + "\n"


class Slicer:
    """The states of several modules that reference each other by name."""

    def __init__(self, sources: dict[str, str]):
        files = set(sources)
        self.modules = {
            rel: ModuleSource(rel, text, files) for rel, text in sources.items()
        }
        self.included: dict[str, set[int]] = {rel: set() for rel in sources}

    def add(
        self, rel: str, names: Iterable[str], why: str = ""
    ) -> list[tuple[str, str, str]]:
        """Include `names` of module `rel` and all they need.

        Returns (module, name, needed by) for every definition newly
        included, in the order found."""
        added: list[tuple[str, str, str]] = []
        todo = [(rel, name, why) for name in names]
        while todo:
            module, name, by = todo.pop(0)
            source = self.modules[module]
            indexes = source.units_defining(name)
            if not indexes:
                if name in source.bindings:
                    continue  # re-exported upstream name: nothing of ours
                raise SliceError(f"{module} defines no {name!r} ({by} needs it)")
            fresh = [i for i in indexes if i not in self.included[module]]
            if fresh and not self.included[module]:
                fresh = sorted(
                    set(fresh)
                    | set(source.always())
                    - {u.index for u in source.units if u.kind != "other"}
                )
            for index in fresh:
                self.included[module].add(index)
                unit = source.units[index]
                label = f"{module}:{'/'.join(sorted(unit.defines)) or 'statement'}"
                if unit.defines:
                    added.append((module, sorted(unit.defines)[0], by))
                for target, ref in sorted(source.references(unit), key=str):
                    todo.append((target or module, ref, label))
        return added

    def add_all(self, rel: str, why: str = "") -> list[tuple[str, str, str]]:
        source = self.modules[rel]
        names = sorted(
            {n for i in source.definitions() for n in source.units[i].defines}
        )
        return self.add(rel, names, why)

    def has(self, rel: str) -> bool:
        return bool(self.included[rel])

    def complete(self, rel: str) -> bool:
        return set(self.modules[rel].definitions()) <= self.included[rel]

    def defines_now(self, rel: str, name: str) -> bool:
        source = self.modules[rel]
        return any(i in self.included[rel] for i in source.units_defining(name))

    def render(self, rel: str) -> str:
        return self.modules[rel].render(self.included[rel])


def imports_in_text(
    importer: str,
    text: str,
    files: Iterable[str],
    aliases: dict[str, str] | None = None,
) -> dict[str, set[str]]:
    """{module file of ours: names} that the import statements in `text`
    (a file's added lines, parsed one statement at a time) bring in.
    `from .m import a, b` gives a and b; `import x.m as m` or `from . import
    m` with attribute uses gives every `m.attr` in the text.  `aliases`
    ({alias: module file}) carries the module aliases an earlier patch's
    lines bound in the same file: a later patch that only calls `m.attr`
    uses them; the ones `text` binds are added to it."""
    files = set(files)
    probe = ModuleSource(importer, "", files)
    out: dict[str, set[str]] = {}
    statements = re.findall(
        r"^[ \t]*(from[ \t]+\S+[ \t]+import[ \t]+(?:\([^)]*\)|[^\n]*)"
        r"|import[ \t]+[^\n]+)",
        text,
        flags=re.M,
    )
    aliases = {} if aliases is None else aliases
    for statement in statements:
        try:
            node = ast.parse(statement.strip()).body[0]
        except SyntaxError:
            continue
        for binding in probe.binding_of(node):
            if binding.module is None:
                continue
            if binding.name is None:
                aliases[binding.alias] = binding.module
                out.setdefault(binding.module, set())
            else:
                out.setdefault(binding.module, set()).add(binding.name)
    uses = attribute_uses(text)
    for alias, module in aliases.items():
        if uses.get(alias):
            out.setdefault(module, set()).update(uses[alias])
    return out


def attribute_uses(text: str) -> dict[str, set[str]]:
    """{name: attributes} of every `name.attr` in code, not in a comment or a
    string, nor a file name (`see cpp_fusion/emitters/prefetch.py` in the
    middle of a docstring uses nothing).  `text` may be a fragment (a patch's
    added lines): it is read dedented, and after a token error the reading
    starts again on the next line."""
    lines = [line.lstrip() for line in text.splitlines(keepends=True)]
    tokens: list[tokenize.TokenInfo] = []
    start = 0
    while start < len(lines):
        chunk = io.StringIO("".join(lines[start:]))
        try:
            tokens.extend(tokenize.generate_tokens(chunk.readline))
            break
        except (tokenize.TokenError, SyntaxError) as error:
            failed = error.args[1][0] if len(error.args) > 1 else len(lines)
            start += max(failed, 1)
    uses: dict[str, set[str]] = {}
    for first, dot, attr in zip(tokens, tokens[1:], tokens[2:]):
        if (
            first.type == tokenize.NAME
            and dot.string == "."
            and attr.type == tokenize.NAME
            and attr.string != "py"
        ):
            uses.setdefault(first.string, set()).add(attr.string)
    return uses
