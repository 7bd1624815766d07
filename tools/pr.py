"""Export the series as a `git format-patch` set against its PyTorch release tag.

    python -m tools.pr [--out build/pr] [--pytorch-src DIR [--onto REF]]

The export is a partial tree of the release (v2.14.1 by default; make's
TORCH picks another) (only the files the series touches, at
their upstream paths), committed as the base, then one commit per patch:

- the patch itself, applied with `git apply`;
- the overlay modules the patch calls, whole, in the first commit that names
  them (the patch's "Origin:" header, or a relative import in its added lines);
- our tests, moved to upstream's layout and made self-contained, in the commit
  of the last patch of the feature they test (so every commit of the stack
  passes the tests it carries).

Each commit message comes from the patch's DEP-3 header, plus the rows of
bench/results/bench.json (tools/bench.py) for the workloads the description
names.  `git format-patch` writes the set and PR_DESCRIPTION.md goes next to
it.  Before reporting success the set is re-applied with `git am` to a fresh
partial tree, which must end at the same tree.

With --pytorch-src, the set is also applied with `git am --3way` to a commit of
that checkout (--onto REF, default HEAD), in a throwaway sparse clone that
shares its objects, so the checkout itself is never written.  Each patch is
reported as clean, 3-way merged or conflicting; when all apply, the rebased
set is written to build/pr/onto-<ref>/.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from fusion_overlay.overlay import OverlayError, pristine_bytes, read_state
from tools.pr_slice import ModuleSource, SliceError, Slicer, imports_in_text
from tools.pr_steps import PASSED, SKIPPED, StepCheck, StepRunner, format_checks
from tools.upstream_test_edits import (
    DEFAULT_EDITS_DIR,
    TestEdit,
    UpstreamEditError,
    apply_edit,
    commit_notes,
    edits_of_patch,
    load_edits,
    read_test_files,
    touched_files,
)
from tools.pr_tests import (
    TestExportError,
    closure,
    convert_marks,
    drop_absent_flags,
    flags_set,
    source_of,
    test_names,
    to_upstream,
)
from fusion_overlay.patchset import (
    DEFAULT_OVERLAY_DIR,
    DEFAULT_PATCHES_DIR,
    REPO_ROOT,
    Patch,
    Series,
    SeriesError,
    load_overlay_files,
    load_series,
    sha256_bytes,
)

# the upstream tag the series of the default release applies to
UPSTREAM_REF = f"v{DEFAULT_PATCHES_DIR.name}"
DEFAULT_OUT = REPO_ROOT / "build" / "pr"
DEFAULT_BENCH = REPO_ROOT / "bench" / "results" / "bench.json"
DEFAULT_UPSTREAM_TEST_SUMMARY = REPO_ROOT / "build" / "upstream-test" / "summary.md"
PR_DESCRIPTION = "PR_DESCRIPTION.md"
# The docs page PR_DESCRIPTION.md repeats, under this heading: how the series
# stands against upstream main (tools/rebase_check.py, the upstream PRs it
# meets).
REBASE_STATUS_HEADING = "## Rebase status"
REBASE_STATUS_PAGE = "docs/rebase-status.md"
FALLBACK_IDENTITY = ("Fusion Overlay", "fusion-overlay@users.noreply.github.com")
FALLBACK_DATE = "2025-01-01T00:00:00+00:00"

# The helper module the exported tests import instead of test/compile_utils.py
# and tools/loopnest.py, which exist only in this repo.
HELPER_PATH = "test/inductor/cpp_loop_nests.py"
HELPER_MODULE = "cpp_loop_nests"
HELPER_SOURCES = ("tools/loopnest.py", "test/compile_utils.py")


@dataclasses.dataclass(frozen=True)
class TestExport:
    source: str  # in this repo
    dest: str  # in the upstream tree
    features: tuple[str, ...]  # the overlay modules (stems) whose feature it tests


TEST_EXPORTS = (
    TestExport(
        "test/test_outer_loop_retile.py",
        "test/inductor/test_cpu_outer_loop_retile.py",
        ("retile", "split"),
    ),
    TestExport(
        "test/test_cpu_loop_ordering.py",
        "test/inductor/test_cpu_loop_ordering.py",
        ("loop_ordering",),
    ),
    TestExport(
        "test/test_reduction_accumulators.py",
        "test/inductor/test_cpu_reduction_accumulators.py",
        ("accumulators",),
    ),
    TestExport(
        "test/test_unroll_rotated_reductions.py",
        "test/inductor/test_cpu_unroll_rotated_reductions.py",
        ("accumulators",),
    ),
    TestExport(
        "test/test_outer_block_fusion.py",
        "test/inductor/test_cpu_outer_block_fusion.py",
        ("block_fusion",),
    ),
    TestExport(
        "test/test_invariant_loads.py",
        "test/inductor/test_cpu_invariant_loads.py",
        ("invariant_loads",),
    ),
    TestExport(
        "test/test_block_local_buffers.py",
        "test/inductor/test_cpu_block_local_buffers.py",
        ("block_local_buffers",),
    ),
    TestExport(
        "test/test_outer_loop_regroup.py",
        "test/inductor/test_cpu_outer_loop_regroup.py",
        ("regroup",),
    ),
    TestExport(
        "test/test_outer_loop_shallower.py",
        "test/inductor/test_cpu_outer_loop_shallower.py",
        ("shallower",),
    ),
    TestExport(
        "test/test_outer_block_tiles.py",
        "test/inductor/test_cpu_outer_block_tiles.py",
        ("block_tiles",),
    ),
    TestExport(
        "test/test_outer_block_prepend.py",
        "test/inductor/test_cpu_outer_block_prepend.py",
        ("block_prepend",),
    ),
    TestExport(
        "test/test_softmax_reciprocal.py",
        "test/inductor/test_cpu_softmax_reciprocal.py",
        ("softmax_reciprocal",),
    ),
    TestExport(
        "test/test_group_norm_channel_sums.py",
        "test/inductor/test_cpu_group_norm_channel_sums.py",
        ("group_norm_channel_sums",),
    ),
    TestExport(
        "test/test_outer_reduction_blocks.py",
        "test/inductor/test_cpu_outer_reduction_blocks.py",
        ("outer_reduction_blocks",),
    ),
    TestExport(
        "test/test_streaming_stores.py",
        "test/inductor/test_cpu_streaming_stores.py",
        ("streaming_stores",),
    ),
    TestExport(
        "test/test_outer_loop_prefetch.py",
        "test/inductor/test_cpu_outer_loop_prefetch.py",
        ("prefetch",),
    ),
)


# Runs the named tests of each test file of a partial tree (tools/pr_steps.py):
# (commit label, tree, {test file: [test functions]}) -> {file: {test: status}}.
Runner = Callable[[str, Path, dict[str, list[str]]], dict[str, dict[str, str]]]


class ExportError(Exception):
    """The series cannot be exported (or the export does not re-apply)."""


class LayeringError(ExportError):
    """A step's module uses code of a later step's module (a forward import):
    the per-feature series would not be in layers."""


# --------------------------------------------------------------------------
# DEP-3 headers


@dataclasses.dataclass(frozen=True)
class Dep3:
    summary: str
    body: str  # the description's detail lines, dedented, " ." -> blank line
    fields: dict[str, str]  # every other field, continuation lines joined

    @property
    def origin(self) -> str:
        return self.fields.get("Origin", "")


def parse_dep3(patch: Patch) -> Dep3:
    text = patch.data.decode("utf-8")
    header: list[str] = []
    for line in text.splitlines():
        if line == "---" or line.startswith(("--- ", "diff --git ")):
            break
        header.append(line)
    fields: dict[str, list[str]] = {}
    current = None
    for line in header:
        if line.startswith((" ", "\t")) and current is not None:
            fields[current].append(line[1:])
        elif match := re.match(r"^([A-Za-z][\w-]*):\s?(.*)$", line):
            current = match.group(1)
            fields.setdefault(current, []).append(match.group(2))
        elif line.strip():
            raise ExportError(f"{patch.name}: unexpected DEP-3 header line {line!r}")
    description = fields.pop("Description", None) or fields.pop("Subject", None)
    if not description or not description[0].strip():
        raise ExportError(f"{patch.name}: no DEP-3 Description: line")
    body = "\n".join("" if line.strip() == "." else line for line in description[1:])
    return Dep3(
        summary=description[0].strip(),
        body=body.strip("\n"),
        fields={
            key: " ".join(v.strip() for v in values) for key, values in fields.items()
        },
    )


def commit_subject(summary: str) -> str:
    """'cpp: do x' -> '[inductor][cpp] do x'; anything else -> '[inductor] ...'."""
    match = re.match(r"^(cpp):\s+(.*)$", summary)
    if match:
        return f"[inductor][{match.group(1)}] {match.group(2)}"
    return f"[inductor] {summary}"


# --------------------------------------------------------------------------
# Which overlay modules and tests go with which patch


def module_path_candidates(module: str) -> list[str]:
    base = module.replace(".", "/")
    return [f"{base}.py", f"{base}/__init__.py"]


def resolve_import(importer: str, dots: str, module: str, names: str) -> list[str]:
    """Paths an import statement in `importer` (torch/...) may refer to."""
    if dots:
        package = importer.rsplit("/", 1)[0].split("/")
        package = package[: len(package) - (len(dots) - 1)]
        base = ".".join(package + ([module] if module else []))
    else:
        base = module
    candidates = module_path_candidates(base)
    for name in re.findall(r"\w+", names.split("#", 1)[0]):
        if name != "as":
            candidates += module_path_candidates(f"{base}.{name}")
    return candidates


_FROM_IMPORT = re.compile(r"^\s*from\s+(\.*)([\w.]*)\s+import\s+(.+)$")
_PLAIN_IMPORT = re.compile(r"^\s*import\s+([\w.]+)")


def imported_paths(importer: str, lines: Iterable[str]) -> set[str]:
    found: set[str] = set()
    for line in lines:
        if match := _FROM_IMPORT.match(line):
            found.update(resolve_import(importer, *match.groups()))
        elif match := _PLAIN_IMPORT.match(line):
            found.update(module_path_candidates(match.group(1)))
    return found


def added_lines_by_file(patch: Patch) -> dict[str, list[str]]:
    """The '+' lines of each file section of a patch."""
    result: dict[str, list[str]] = {}
    current = None
    for line in patch.data.decode("utf-8").splitlines():
        if line.startswith("+++ "):
            name = line[4:].split("\t", 1)[0].strip()
            current = None if name == "/dev/null" else name.split("/", 1)[1]
            if current is not None:
                result.setdefault(current, [])
        elif line.startswith("+") and current is not None:
            result[current].append(line[1:])
    return result


_HUNK_CLASS = re.compile(r"^@@ [^@]* @@ class (\w+)")
_CLASS = re.compile(r"^class (\w+)")
_DEF = re.compile(r"^(    )?def ([a-zA-Z]\w*)\(")
_MEMBER = re.compile(r"^    ([A-Z][A-Z0-9_]*) = auto\(\)")
_GRAPH_ATTRIBUTE = re.compile(r"^        self\.([a-z]\w*) = ")


def upstream_interfaces(patch: Patch) -> list[str]:
    """The public names the patch adds to upstream files, as a reviewer looks
    them up: `Class.method` (a method or property of a class), `module.func`
    (a module-level function), `Class.MEMBER` (an enum member), and the
    attributes it gives `V.graph` (graph.py's GraphLowering)."""
    names: list[str] = []
    module = cls = None
    for line in patch.data.decode("utf-8").splitlines():
        if line.startswith("+++ "):
            path = line[4:].split("\t", 1)[0].strip()
            module = path.split("/", 1)[1].removesuffix(".py").replace("/", ".")
            cls = None
            continue
        if module is None or line.startswith(("---", "-")):
            continue
        if header := _HUNK_CLASS.match(line):
            cls = header.group(1)
            continue
        if line.startswith("@@"):
            cls = None
            continue
        text = line[1:]
        if opened := _CLASS.match(text):
            cls = opened.group(1)
        if not line.startswith("+"):
            continue
        graph = module.endswith("_inductor.graph")
        if (found := _DEF.match(text)) and (found.group(1) is None or cls):
            owner = cls if found.group(1) else module.rsplit(".", 1)[-1]
            names.append(f"{owner}.{found.group(2)}")
        elif (member := _MEMBER.match(text)) and cls:
            names.append(f"{cls}.{member.group(1)}")
        elif graph and (attribute := _GRAPH_ATTRIBUTE.match(text)):
            names.append(f"V.graph.{attribute.group(1)}")
    # an override of a hook the same patch adds to BaseScheduling is implied
    hooks = {n.split(".", 1)[1] for n in names if n.startswith("BaseScheduling.")}
    names = [
        n for n in names
        if not (n.startswith("CppScheduling.") and n.split(".", 1)[1] in hooks)
    ]  # fmt: skip
    return list(dict.fromkeys(names))


def modules_named_by(patch: Patch, dep3: Dep3, overlay: dict[str, bytes]) -> list[str]:
    """Overlay modules the patch's Origin header names or its added lines import."""
    named = {
        f"torch/{m}" for m in re.findall(r"overlay/torch/([\w/]+\.py)", dep3.origin)
    }
    for rel in named:
        if rel not in overlay:
            raise ExportError(
                f"{patch.name}: Origin names {rel}, which is not in overlay/"
            )
    for importer, lines in added_lines_by_file(patch).items():
        named |= imported_paths(importer, lines) & set(overlay)
    # `from .cpp_fusion.emitters import prefetch` names prefetch.py, not the
    # package: an __init__.py lands with its package's first module
    return sorted(rel for rel in named if not rel.endswith("/__init__.py"))


def module_stem(rel: str) -> str:
    return Path(rel).stem


@dataclasses.dataclass
class PlannedCommit:
    patch: Patch
    dep3: Dep3
    uses: list[str]  # overlay modules this patch names (Origin: or import)
    modules: dict[str, str]  # overlay modules whose state changes here -> text
    new_modules: list[str]  # ... of which the ones added here
    grown: dict[str, list[str]]  # module -> top-level names added here
    available: dict[str, set[str]]  # module -> names defined after this step
    tests: list[TestExport] = dataclasses.field(default_factory=list)
    test_files: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    helper: bool = False  # this commit adds or changes HELPER_PATH
    check: StepCheck | None = None
    upstream_edits: list[TestEdit] = dataclasses.field(default_factory=list)
    edits_applied: bool = False  # the upstream test files were there to edit


def hook_imports(
    patch: Patch,
    overlay: dict[str, bytes],
    aliases: dict[str, dict[str, str]] | None = None,
) -> dict[str, set[str]]:
    """{overlay module: names} the added lines of the patch import, or call
    through a module alias that they or an earlier patch's lines bound in the
    same file (`aliases`: {upstream file: {alias: module}}, updated)."""
    aliases = {} if aliases is None else aliases
    out: dict[str, set[str]] = {}
    for importer, lines in added_lines_by_file(patch).items():
        bound = aliases.setdefault(importer, {})
        found = imports_in_text(importer, "\n".join(lines), overlay, bound)
        for rel, names in found.items():
            out.setdefault(rel, set()).update(names)
    return out


def package_inits(
    overlay: dict[str, bytes], states: dict[str, str], slicer: Slicer
) -> dict[str, str]:
    """The `__init__.py` of every overlay package a module of `states` is in.

    A package's `__init__.py` defines nothing a hook imports, so the slicer
    never grows it: it lands whole with the first module under its directory
    (and its parent packages' with it)."""
    inits: dict[str, str] = {}
    for rel in overlay:
        if Path(rel).name != "__init__.py":
            continue
        package = Path(rel).parent
        if any(package in Path(module).parents for module in states):
            inits[rel] = slicer.render(rel)
    return inits


def plan_commits(
    series: Series,
    overlay: dict[str, bytes],
    tests: Sequence[TestExport] = TEST_EXPORTS,
) -> list[PlannedCommit]:
    """One commit per patch, each with its overlay modules in their state there.

    A module grows by the definitions the step needs: the names its patch
    imports, and everything those use, in this module or another of ours
    (tools/pr_slice.py).  The last patch that names a module (Origin: or an
    import) completes it with the definitions no later step needs, so a
    module only one patch names lands whole with that patch, a definition no
    hook reaches lands with the module's last naming patch, and one that a
    later feature's module uses (a threshold of the shared cost model) lands
    with that feature.  A name needed before any patch names its module is a
    forward import (a module of an earlier feature uses a later one's code):
    `LayeringError`.
    """
    sources = {rel: data.decode("utf-8") for rel, data in overlay.items()}
    try:
        slicer = Slicer(sources)
    except SyntaxError as error:
        raise ExportError(f"overlay module does not parse: {error}") from error
    patches = series.patches
    named: list[list[str]] = []
    hooks: list[dict[str, set[str]]] = []
    aliases: dict[str, dict[str, str]] = {}
    for patch in patches:
        dep3 = parse_dep3(patch)
        hooks.append(hook_imports(patch, overlay, aliases))
        by_origin = modules_named_by(patch, dep3, overlay)
        named.append(sorted(set(by_origin) | set(hooks[-1])))
    owners: dict[str, list[int]] = {rel: [] for rel in overlay}
    for index, rels in enumerate(named):
        for rel in rels:
            owners[rel].append(index)
    completions = _completions(sources, patches, hooks, owners)
    planned: list[PlannedCommit] = []
    previous: dict[str, str] = {}
    for index, patch in enumerate(patches):
        dep3 = parse_dep3(patch)
        added: list[tuple[str, str, str]] = []
        try:
            for rel, names in sorted(hooks[index].items()):
                added += slicer.add(rel, sorted(names), patch.name)
            for rel, completing in sorted(completions[index].items()):
                added += slicer.add(rel, completing, f"{patch.name} (last to name it)")
        except SliceError as error:
            raise ExportError(f"{patch.name}: {error}") from error
        grown: dict[str, list[str]] = {}
        forward = []
        for rel, name, by in added:
            grown.setdefault(rel, []).append(name)
            first_owner = owners[rel][0] if owners[rel] else None
            if first_owner is None or first_owner > index:
                later = (
                    patches[first_owner].name if first_owner is not None else "no patch"
                )
                forward.append(
                    f"`{name}` of `{rel}` is needed by "
                    f"{by.replace('torch/_inductor/', '')}, but {later} is the "
                    "first patch to name that module"
                )
        if forward:
            raise LayeringError(
                f"{patch.name}: forward import between steps (a module of this "
                "step uses code of a later step's module; move the code into a "
                "module of this step or an earlier one, name the module in this "
                "patch's Origin: line if it belongs here, or let the later "
                "feature register itself through a hook):\n  " + "\n  ".join(forward)
            )
        states = {rel: slicer.render(rel) for rel in overlay if slicer.has(rel)}
        states |= package_inits(overlay, states, slicer)
        changed = {
            rel: text for rel, text in states.items() if previous.get(rel) != text
        }
        planned.append(
            PlannedCommit(
                patch=patch,
                dep3=dep3,
                uses=named[index],
                modules=changed,
                new_modules=sorted(set(changed) - set(previous)),
                grown=grown,
                available={
                    rel: {
                        name
                        for i in slicer.included[rel]
                        for name in slicer.modules[rel].units[i].defines
                    }
                    for rel in overlay
                },
            )
        )
        previous = states
    unclaimed = sorted(rel for rel in overlay if not slicer.complete(rel))
    if unclaimed:
        raise ExportError(
            "overlay modules no patch names or completes (add them to a patch's "
            "Origin: line): " + ", ".join(unclaimed)
        )
    stems = {module_stem(rel) for rel in overlay}
    for test in tests:
        unknown = sorted(set(test.features) - stems)
        if unknown:
            raise ExportError(
                f"{test.source}: features {unknown} are not overlay modules"
            )
        if not any(
            {module_stem(m) for m in c.uses} & set(test.features) for c in planned
        ):
            raise ExportError(f"{test.source}: no patch uses {test.features}")
    return planned


def _completions(
    sources: dict[str, str],
    patches: Sequence[Patch],
    hooks: Sequence[dict[str, set[str]]],
    owners: dict[str, list[int]],
) -> list[dict[str, list[str]]]:
    """Per step, {module: names} that its last naming patch completes it with:
    its definitions that no later step needs.

    Computed from the last step back: a step needs what its hooks import and
    what its completions bring, with everything those use (the same closure
    the export follows)."""
    last = {rel: steps[-1] for rel, steps in owners.items() if steps}
    later: dict[str, set[int]] = {rel: set() for rel in sources}
    out: list[dict[str, list[str]]] = [{} for _ in patches]
    for index in reversed(range(len(patches))):
        probe = Slicer(sources)
        try:
            for rel, imported in sorted(hooks[index].items()):
                probe.add(rel, sorted(imported))
            for rel in sorted(r for r, step in last.items() if step == index):
                source = probe.modules[rel]
                names = sorted(
                    {
                        name
                        for i in source.definitions()
                        if i not in later[rel]
                        for name in source.units[i].defines
                    }
                )
                out[index][rel] = names
                probe.add(rel, names)
        except SliceError as error:
            raise ExportError(f"{patches[index].name}: {error}") from error
        for rel, included in probe.included.items():
            later[rel] |= included
    return out


def ruff_executable() -> str | None:
    for candidate in (Path(sys.executable).parent, REPO_ROOT / ".venv" / "bin"):
        if (candidate / "ruff").exists():
            return str(candidate / "ruff")
    return shutil.which("ruff")


def check_names(rel: str, text: str, label: str) -> None:
    """A cut module or test file must define every name it uses and import
    nothing it does not use (ruff F821, F401, F811), where ruff is installed."""
    ruff = ruff_executable()
    if ruff is None:
        return
    proc = subprocess.run(
        [
            ruff, "check", "--no-cache", "--isolated", "--select", "F401,F811,F821",
            "--output-format", "concise", "--stdin-filename", rel, "-",
        ],
        input=text, capture_output=True, text=True,
    )  # fmt: skip
    if proc.returncode != 0:
        found = [line for line in proc.stdout.splitlines() if rel in line]
        raise ExportError(
            f"{label}: {rel} as cut there:\n"
            + "\n".join(found or [proc.stdout + proc.stderr])
        )


def first_step_of(test: TestExport, commits: Sequence[PlannedCommit]) -> int:
    """The first commit that names one of the modules the test file is about."""
    for index, commit in enumerate(commits):
        if {module_stem(m) for m in commit.uses} & set(test.features):
            return index
    raise ExportError(f"{test.source}: no patch uses {test.features}")


# --------------------------------------------------------------------------
# Tests, made self-contained for the upstream tree


def _split_module(source: str) -> tuple[str | None, list[str], str]:
    """(docstring, top-level import statements, the rest) of a module."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    drop: set[int] = set()
    imports: list[str] = []
    docstring = ast.get_docstring(tree, clean=False)
    body = tree.body
    if docstring is not None:
        first = body[0]
        drop.update(range(first.lineno - 1, first.end_lineno or first.lineno))
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            end = node.end_lineno or node.lineno
            imports.append("".join(lines[node.lineno - 1 : end]).strip())
            drop.update(range(node.lineno - 1, end))
    rest = "".join(line for i, line in enumerate(lines) if i not in drop)
    return docstring, imports, rest


def _import_sort_key(statement: str) -> tuple[int, int, str]:
    module = statement.split()[1]
    section = 0 if module.split(".")[0] in sys.stdlib_module_names else 1
    return (section, 0 if statement.startswith("import ") else 1, module.lower())


def _compose_imports(statements: Iterable[str]) -> str:
    unique = sorted(set(statements), key=_import_sort_key)
    out: list[str] = []
    section = None
    for statement in unique:
        key = _import_sort_key(statement)[0]
        if section is not None and key != section:
            out.append("")
        out.append(statement)
        section = key
    return "\n".join(out)


def _tidy(text: str) -> str:
    return re.sub(r"\n{4,}", "\n\n\n", text).strip("\n") + "\n"


def make_helper_module(
    sources: dict[str, str], flags: Sequence[str] = (), absent: Iterable[str] = ()
) -> str:
    """test/inductor/cpp_loop_nests.py: tools/loopnest.py + test/compile_utils.py.

    `flags` are the config.cpp switches the series has added at this step
    (this repo's fusion_overlay/flags.py lists the final ones) and `absent` the ones
    it has not added yet, whose `False` entries are dropped."""
    imports: list[str] = []
    rests: list[str] = []
    for name in HELPER_SOURCES:
        text, _ = drop_absent_flags(sources[name], set(absent))
        _, statements, rest = _split_module(convert_marks(text))
        imports += [
            s
            for s in statements
            if not s.startswith("from __future__")
            and not re.match(
                r"(from|import)\s+(tools|fusion_overlay|compile_utils)\b", s
            )
        ]
        rests.append(rest.strip("\n"))
    flag_lines = "".join(f'    "cpp.{flag}",\n' for flag in flags)
    rests.insert(
        0,
        "# The switches this series adds to torch._inductor.config.cpp (so far).\n"
        f"OVERLAY_FLAGS: tuple[str, ...] = (\n{flag_lines})\n"
        "\n\n"
        "def config_patch(on: bool) -> dict[str, bool]:\n"
        '    """A config.patch() argument setting every switch of the series."""\n'
        "    return dict.fromkeys(OVERLAY_FLAGS, on)\n"
        "\n\n"
        "def shipped_config() -> dict[str, bool]:\n"
        '    """Every switch at its default: the series turns each on."""\n'
        "    return config_patch(True)",
    )
    body = "\n\n\n".join(rests)
    words = set(re.findall(r"\w+", body))
    imports = [
        s for s in imports if set(re.findall(r"\w+", s.split(" import ")[-1])) & words
    ]
    if "unittest" in words:
        imports.append("import unittest")
    text = (
        '"""Compile a program on the CPU backend and count the loop nests of its C++.\n'
        "\n"
        "Shared by the fusion overlay's tests (test_cpu_outer_loop_retile.py, ...):\n"
        "does a compiled program agree with eager, how many separate outer loop\n"
        "nests did the C++ backend emit per kernel, and what did the outer-loop\n"
        "fusion counters record.  The loop nests are read from the generated\n"
        "code's text.\n"
        '"""\n'
        "\n"
        "from __future__ import annotations\n"
        "\n" + _compose_imports(imports) + "\n\n\n" + body
    )
    return _tidy(text)


def series_flags(commits: Sequence[PlannedCommit]) -> dict[str, int]:
    """config.cpp switches the patches add -> index of the patch adding it."""
    out: dict[str, int] = {}
    for index, commit in enumerate(commits):
        lines = added_lines_by_file(commit.patch).get("torch/_inductor/config.py", [])
        for line in lines:
            if match := re.match(r"^    (\w+)\s*(?::[^=]*)?=", line):
                out.setdefault(match.group(1), index)
    return out


def _signature(source: ModuleSource, units: Iterable[int]) -> str:
    return "\n".join(ast.dump(source.units[i].node) for i in sorted(units))


class TestPlacer:
    """Places each of our test functions in the first commit it can run at.

    A test can run at a commit from the first patch that names a module of
    its file on, once the overlay names it imports are there and every
    config switch it turns on exists (an entry that turns off a switch not
    yet added is dropped).  With a runner, a test that fails there waits for
    the next commit (the last commit takes every test that is left); without
    one it is placed at the first commit it can run at.  Each commit carries
    its tests in that state: the test files are cut to the tests placed so
    far and what they use, then converted to upstream's TestCase form
    (tools/pr_tests.py).  A commit's check runs the tests it adds and the
    tests whose code it changes.
    """

    def __init__(
        self,
        tests: Sequence[TestExport],
        commits: Sequence[PlannedCommit],
        overlay: dict[str, bytes],
        read_source: Callable[[str], str],
        runner: Runner | None,
    ):
        self.tests = list(tests)
        self.commits = commits
        self.overlay_files = set(overlay)
        self.module_names = {
            rel: set(ModuleSource(rel, data.decode("utf-8")).definers)
            for rel, data in overlay.items()
        }
        self.raw = {t.dest: read_source(t.source) for t in tests}
        self.helper_sources = {n: read_source(n) for n in HELPER_SOURCES}
        self.floor = {t.dest: first_step_of(t, commits) for t in tests}
        self.flag_step = series_flags(commits)
        self.placed: dict[str, dict[str, int]] = {t.dest: {} for t in tests}
        self.signature: dict[tuple[str, str], str] = {}
        self.runner = runner
        self.files: dict[str, str] = {}  # test files as last written
        self.helper = ""

    def _blocked(
        self, test: TestExport, source: ModuleSource, name: str, index: int, absent
    ) -> str:
        if index < self.floor[test.dest]:
            return "before its feature"
        units, external = closure(source, [name])
        if flags_set(source, units, absent):
            return "turns on a switch not yet added"
        available = self.commits[index].available
        for module, ref in sorted(external):
            if not available.get(module):
                return f"{module} is not there yet"
            if ref in self.module_names[module] and ref not in available[module]:
                return f"{ref} is not there yet"
        return ""

    def _render(self, test: TestExport, source: ModuleSource, names) -> str:
        units, _ = closure(source, sorted(names))
        cut = source.render(units)
        try:
            text = to_upstream(cut, test.source, test.dest, self.overlay_files)
        except TestExportError as error:
            raise ExportError(str(error)) from error
        check_names(test.dest, text, test.source)
        return text

    def step(self, index: int, work: Path) -> dict[str, str]:
        """The test files (and helper) that change at commit `index`.

        Sets the commit's test_files, helper and check."""
        commit = self.commits[index]
        last = index == len(self.commits) - 1
        absent = {f for f, step in self.flag_step.items() if step > index}
        flags = [f for f, step in self.flag_step.items() if step <= index]
        sources: dict[str, ModuleSource] = {}
        candidates: dict[str, list[str]] = {}
        to_run: dict[str, list[str]] = {}
        signatures: dict[tuple[str, str], str] = {}
        for test in self.tests:
            text, _ = drop_absent_flags(self.raw[test.dest], absent)
            source = source_of(test.source, text, self.overlay_files)
            sources[test.dest] = source
            placed = self.placed[test.dest]
            new, changed = [], []
            for name in test_names(source):
                units, _ = closure(source, [name])
                signatures[(test.dest, name)] = _signature(source, units)
                if name in placed:
                    if (
                        self.signature[(test.dest, name)]
                        != signatures[(test.dest, name)]
                    ):
                        changed.append(name)
                elif last or not self._blocked(test, source, name, index, absent):
                    new.append(name)
            candidates[test.dest] = new
            if new or changed:
                to_run[test.dest] = new + changed
        results: dict[str, dict[str, str]] = {}
        trial: dict[str, str] = {}
        if to_run and self.runner is not None:
            trial = {
                HELPER_PATH: make_helper_module(self.helper_sources, flags, absent)
            }
            for test in self.tests:
                names = [*self.placed[test.dest], *candidates[test.dest]]
                if names:
                    trial[test.dest] = self._render(test, sources[test.dest], names)
            write_files(work, {rel: text.encode() for rel, text in trial.items()})
            started = time.monotonic()
            results = self.runner(commit.patch.name, work, to_run)
            commit.check = StepCheck(results, time.monotonic() - started)
        for dest, names in candidates.items():
            for name in names:
                status = results.get(dest, {}).get(name, PASSED)
                if self.runner is None or last or status in (PASSED, SKIPPED):
                    self.placed[dest][name] = index
                elif commit.check is not None:
                    commit.check.promoted.setdefault(dest, []).append(name)
                    commit.check.results[dest].pop(name, None)
        if commit.check is not None:
            commit.check.results = {d: r for d, r in commit.check.results.items() if r}
        for key in signatures:
            if key[1] in self.placed[key[0]]:
                self.signature[key] = signatures[key]
        out: dict[str, str] = {}
        for test in self.tests:
            if self.placed[test.dest]:
                text = self._render(test, sources[test.dest], self.placed[test.dest])
                if self.files.get(test.dest) != text:
                    out[test.dest] = text
                    self.files[test.dest] = text
        commit.test_files = {
            dest: sorted(n for n, i in self.placed[dest].items() if i == index)
            for dest in out
        }
        commit.tests = [t for t in self.tests if t.dest in out]
        if out:
            helper = make_helper_module(self.helper_sources, flags, absent)
            if helper != self.helper:
                out[HELPER_PATH] = helper
                self.helper = helper
                commit.helper = True
        for rel in set(trial) - set(out):  # back to what the commit before left
            previous = self.helper if rel == HELPER_PATH else self.files.get(rel)
            if previous:
                (work / rel).write_text(previous)
            else:
                (work / rel).unlink()
        return out


def top_level_names(source: str) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


# --------------------------------------------------------------------------
# Measured results (tools/bench.py)


_WORKLOAD_WORDS = ("layernorm", "groupnorm", "softmax", "rmsnorm", "attention")


def load_bench(path: Path) -> dict | None:
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        rows = data["rows"]
        if not isinstance(rows, list):
            raise TypeError("rows is not a list")
        for row in rows:
            _ = (row["workload"], row["threads"], float(row["patched_over_stock"]))
    except (ValueError, KeyError, TypeError) as error:
        print(f"warning: ignoring {path}: {error!r}", file=sys.stderr)
        return None
    return data


def bench_rows_for(text: str, bench: dict) -> list[dict]:
    """The rows whose workload the text names (LayerNorm -> layernorm*, ...)."""
    flat = re.sub(r"[^a-z0-9]", "", text.lower())
    named = {word for word in _WORKLOAD_WORDS if word in flat}
    return [
        row
        for row in bench["rows"]
        if named & {w for w in _WORKLOAD_WORDS if w in row["workload"].replace("_", "")}
    ]


def _ms(row: dict, variant: str) -> float:
    """The best time when bench.py recorded it (its ratios use it), else median."""
    value = row.get(f"{variant}_min_ms", row.get(f"{variant}_median_ms"))
    return float("nan") if value is None else float(value)


def bench_table(rows: list[dict]) -> list[str]:
    best = all(f"{v}_min_ms" in r for r in rows for v in ("eager", "stock", "patched"))
    unit = "ms (best)" if best else "ms (median)"
    lines = [
        f"| workload | threads | eager {unit} | flags off | flags on | on/off "
        "| nests off->on |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['workload']} | {r['threads']} | {_ms(r, 'eager'):.2f} | "
            f"{_ms(r, 'stock'):.2f} | {_ms(r, 'patched'):.2f} | "
            f"{r['patched_over_stock']:.2f} | "
            f"{r.get('stock_nests', '?')}->{r.get('patched_nests', '?')} |"
        )
    return lines


# --------------------------------------------------------------------------
# Commit messages and the PR description


def _short(rel: str) -> str:
    return rel.replace("torch/_inductor/", "")


def module_notes(commit: PlannedCommit) -> list[str]:
    """What the commit does to our modules: new ones, grown ones."""
    notes = []
    for rel in commit.modules:
        names = commit.grown.get(rel, [])
        if rel in commit.new_modules:
            notes.append(f"adds {_short(rel)}")
        else:
            shown = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
            notes.append(f"extends {_short(rel)} ({shown})")
    return notes


def commit_message(commit: PlannedCommit, bench: dict | None) -> str:
    parts = [commit_subject(commit.dep3.summary), "", commit.dep3.body]
    notes = []
    modules = module_notes(commit)
    if modules:
        notes.append("Modules: " + "; ".join(modules) + ".")
    if interfaces := upstream_interfaces(commit.patch):
        notes.append("Upstream interfaces added: " + ", ".join(interfaces) + ".")
    if commit.test_files:
        tests = []
        for dest, names in commit.test_files.items():
            tests.append(f"{dest} ({len(names)} new)" if names else f"{dest} (updated)")
        if commit.helper:
            tests.append(f"{HELPER_PATH} (helpers)")
        notes.append("Tests: " + ", ".join(tests) + ".")
    if "Bug" in commit.dep3.fields:
        notes.append("Context: " + commit.dep3.fields["Bug"])
    if notes:
        parts += [""] + notes
    edit_notes = commit_notes(commit.upstream_edits, commit.edits_applied)
    if edit_notes:
        parts += [""] + edit_notes
    if bench is not None:
        rows = bench_rows_for(commit.dep3.summary + " " + commit.dep3.body, bench)
        if rows:
            parts += [
                "",
                "Measured with the whole stack, both flags on vs off "
                "(not this commit alone):",
                bench.get("header", ""),
                "",
                *bench_table(rows),
            ]
    return "\n".join(parts).rstrip() + "\n"


def upstream_expectation_notes() -> list[str]:
    """The upstream tests whose expectation the series changes, by patch."""
    from tools.upstream_expectations import EXPECTED_CHANGES

    if not EXPECTED_CHANGES:
        return []
    out = [
        "### Upstream tests whose expectation this series changes",
        "",
        "Each passes on stock and fails with the series on a kernel-count or "
        "structure assertion after the values matched; the commit named changes "
        "it for this reason:",
        "",
    ]
    for test_id, change in sorted(EXPECTED_CHANGES.items(), key=lambda i: i[1].patch):
        out.append(f"- `{test_id}` ({change.patch}, {change.kind}): {change.reason}")
    return out + [""]


def pr_description(
    commits: list[PlannedCommit],
    bench: dict | None,
    checks: list[str],
    upstream_tests: str | None,
    rebase_status: str | None = None,
) -> str:
    out = [
        "# [inductor][cpp] Re-tile outer-loop fusion and decide CPU loop orders "
        "after fusion",
        "",
        f"A stack of {len(commits)} commits against {UPSTREAM_REF}, "
        "CPU C++ backend only.",
        "Every change sits behind a config flag (`config.cpp.*`); with the flags off",
        "the generated code is the same as before.",
        "",
        "## Commits",
        "",
    ]
    for i, commit in enumerate(commits, 1):
        first_paragraph = commit.dep3.body.split("\n\n", 1)[0]
        out += [f"{i}. **{commit_subject(commit.dep3.summary)}**", ""]
        out += ["   " + line if line else "" for line in first_paragraph.splitlines()]
        extra = module_notes(commit)
        if interfaces := upstream_interfaces(commit.patch):
            extra.append("adds to upstream " + ", ".join(f"`{n}`" for n in interfaces))
        added = sum(len(n) for n in commit.test_files.values())
        if added:
            extra.append(f"{added} test(s)")
        if extra:
            out += ["", "   " + "; ".join(extra) + "."]
        out.append("")
    out += ["## Measured results", ""]
    if bench is None:
        out += [
            "No bench/results/bench.json: run `python -m tools.bench` in the overlay",
            "repo and `make pr` again.",
        ]
    else:
        out += [
            "tools/bench.py, eager vs the whole stack with both flags off and on:",
            "",
            bench.get("header", ""),
            "",
            *bench_table(bench["rows"]),
        ]
    out += ["", "## Tests", ""]
    dests: dict[str, list[tuple[str, int]]] = {}
    for commit in commits:
        for dest, names in commit.test_files.items():
            dests.setdefault(dest, []).append((commit.patch.name[:4], len(names)))
    for dest, steps in dests.items():
        where = ", ".join(f"{n} in {p}" for p, n in steps if n)
        out.append(f"- `{dest}`: {where}")
    out += [
        f"- `{HELPER_PATH}`: helpers the tests share, generated from the overlay",
        "  repo's test/compile_utils.py and tools/loopnest.py (compile, compare with",
        "  eager, count the outer loop nests of each C++ kernel); its",
        "  `OVERLAY_FLAGS` lists the switches the series has added at that commit.",
        "",
        "Each file holds one `torch._inductor.test_case.TestCase` class; run it",
        "with `python test/inductor/<file>.py` or pytest. Each commit carries the",
        "tests that pass from that commit on, in their state there.",
        "",
    ]
    step_rows = [(c.patch.name[:4], c.check) for c in commits]
    if any(check is not None for _, check in step_rows):
        out += [
            "### Step by step",
            "",
            f"Each commit applied to the partial {UPSTREAM_REF} tree over a pristine "
            "torch",
            f"{UPSTREAM_REF[1:]}, then the tests it adds or changes run there:",
            "",
            *format_checks(step_rows),
            "",
        ]
        waited = [
            f"- {c.patch.name[:4]}: "
            + ", ".join(n for ns in c.check.promoted.values() for n in ns)
            for c in commits
            if c.check is not None and c.check.promoted
        ]
        if waited:
            out += [
                "Tests that failed at the first commit they could run at and "
                "moved on (they need a later commit):",
                "",
                *waited,
                "",
            ]
    out += upstream_expectation_notes()
    if upstream_tests:
        out += ["### Upstream tests, stock vs patched", "", upstream_tests.strip(), ""]
    out += ["## Notes on the export", ""]
    grown = [
        f"- `{rel}`: "
        + ", ".join(c.patch.name[:4] for c in commits if rel in c.modules)
        for rel in sorted({rel for c in commits for rel in c.modules})
        if sum(rel in c.modules for c in commits) > 1
    ]
    if grown:
        out += [
            "Modules that grow over several commits (each commit adds the",
            "definitions its patch and modules import):",
            "",
            *grown,
            "",
        ]
    if rebase_status:
        out += ["", REBASE_STATUS_HEADING, "", rebase_status.strip()]
    out += ["", "## Checks", ""] + [f"- {c}" for c in checks]
    return "\n".join(out).rstrip() + "\n"


def docs_page_body(rel: str) -> str | None:
    """A docs page without its title, its headings one level deeper (so it
    reads as a section of the PR text), or None if there is no such page."""
    path = REPO_ROOT / rel
    if not path.exists():
        return None
    lines = path.read_text().splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    body = ["#" + line if line.startswith("#") else line for line in lines]
    return "\n".join(body).strip() or None


# --------------------------------------------------------------------------
# git


def git_env(identity: tuple[str, str], date: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GIT_") or k in ("GIT_EXEC_PATH",)
    }
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_AUTHOR_NAME=identity[0],
        GIT_AUTHOR_EMAIL=identity[1],
        GIT_COMMITTER_NAME=identity[0],
        GIT_COMMITTER_EMAIL=identity[1],
        GIT_AUTHOR_DATE=date,
        GIT_COMMITTER_DATE=date,
        LC_ALL="C",
    )
    return env


def git(
    cwd: Path,
    *args: str,
    env: dict[str, str],
    check: bool = True,
    input: str | None = None,
) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, input=input
    )
    if check and proc.returncode != 0:
        raise ExportError(
            f"git {' '.join(args)} failed in {cwd}:\n"
            + (proc.stdout + proc.stderr).strip()
        )
    return proc


def repo_identity() -> tuple[str, str]:
    def config(key: str) -> str:
        proc = subprocess.run(
            ["git", "config", key], cwd=REPO_ROOT, capture_output=True, text=True
        )
        return proc.stdout.strip() if proc.returncode == 0 else ""

    name, email = config("user.name"), config("user.email")
    return (name, email) if name and email else FALLBACK_IDENTITY


def repo_date() -> str:
    """The date of the last commit to what we export: stable between runs."""
    proc = subprocess.run(
        ["git", "log", "-1", "--format=%cI", "--", "patches", "overlay", "test"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    return proc.stdout.strip() or FALLBACK_DATE


def init_repo(root: Path, env: dict[str, str]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "--quiet", "--initial-branch=main", env=env)
    for key, value in (
        ("core.autocrlf", "false"),
        ("commit.gpgsign", "false"),
        ("am.threeWay", "false"),
    ):
        git(root, "config", key, value, env=env)


def write_files(root: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)


def commit_base(root: Path, base: dict[str, bytes], env: dict[str, str]) -> str:
    init_repo(root, env)
    write_files(root, base)
    git(root, "add", "--", *sorted(base), env=env)
    git(
        root,
        "commit",
        "--quiet",
        "-m",
        f"{UPSTREAM_REF} (partial: the files the series touches)",
        env=env,
    )
    return git(root, "rev-parse", "HEAD", env=env).stdout.strip()


# --------------------------------------------------------------------------
# Pristine files of the release


def default_base_roots() -> list[Path]:
    roots = []
    # every venv of the repo: read_pristine_files keeps only the pinned bytes
    for venv in sorted(REPO_ROOT.glob(".venv*")):
        found = sorted(venv.glob("lib/python3*/site-packages"))
        if found and (found[0] / "torch").is_dir():
            roots.append(found[0])
    return roots


def read_pristine_files(series: Series, roots: Sequence[Path]) -> dict[str, bytes]:
    """Pristine bytes of every upstream file the series touches, hash-checked."""
    if not roots:
        raise ExportError(
            f"no torch {series.release} to copy pristine files from: run "
            "`make stock-venv` "
            "or pass --base-from SITE_PACKAGES"
        )
    created = series.created_paths()
    files: dict[str, bytes] = {}
    for rel in series.touched_paths():
        if rel in created:
            continue
        expected = series.manifest.get(rel)
        if expected is None:
            raise ExportError(f"{rel} is touched by the series but not pinned")
        for root in roots:
            try:
                data = pristine_bytes(root, read_state(root), rel)
            except OverlayError:
                continue
            if sha256_bytes(data) == expected and data is not None:
                files[rel] = data
                break
        else:
            raise ExportError(
                f"no pristine {rel} (sha256 {expected}) under "
                + ", ".join(str(r) for r in roots)
            )
    return files


# --------------------------------------------------------------------------
# The export


def attach_upstream_edits(
    commits: Sequence[PlannedCommit],
    edits_dir: Path,
    upstream_tests: Path | None,
    base: dict[str, bytes],
) -> tuple[list[TestEdit], str | None]:
    """Give each commit its upstream test edits; add the files they edit to base.

    Returns the edits and where the upstream files came from (None: none
    given, so the commits only name their edits)."""
    try:
        edits = load_edits(edits_dir)
    except UpstreamEditError as error:
        raise ExportError(str(error)) from None
    numbers = {c.patch.name.split("-", 1)[0] for c in commits}
    stray = [e.path.name for e in edits if e.patch not in numbers]
    if stray:
        raise ExportError(f"upstream test edits of no patch in the series: {stray}")
    label = None
    if upstream_tests is not None and edits:
        try:
            files, label = read_test_files(
                upstream_tests, touched_files(edits), UPSTREAM_REF
            )
        except UpstreamEditError as error:
            raise ExportError(str(error)) from None
        base.update(files)
    for commit in commits:
        commit.upstream_edits = edits_of_patch(commit.patch.name, edits)
        commit.edits_applied = label is not None
    return edits, label


@dataclasses.dataclass
class Export:
    out_dir: Path
    patches: list[Path]
    commits: list[PlannedCommit]
    base_files: dict[str, bytes]
    final_tree: str
    checks: list[str]


def read_repo_text(rel: str) -> str:
    return (REPO_ROOT / rel).read_text()


def export_sources() -> list[str]:
    """What the export reads from this repo, besides the venvs."""
    return [
        "patches",
        "overlay",
        *HELPER_SOURCES,
        *(t.source for t in TEST_EXPORTS),
    ]


def uncommitted_sources() -> list[str]:
    proc = subprocess.run(
        ["git", "status", "--porcelain", "--", *export_sources()],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    return [line[3:] for line in proc.stdout.splitlines() if line.strip()]


def checkout_rev(rev: str, dest: Path) -> Path:
    """patches/, overlay/, test/ and tools/ as committed at `rev`, under dest."""
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "archive", "--format=tar", rev, "patches", "overlay", "test", "tools"],
        cwd=REPO_ROOT,
        capture_output=True,
    )
    if archive.returncode != 0:
        raise ExportError(f"git archive {rev}: {archive.stderr.decode().strip()}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def export_series(
    out_dir: Path = DEFAULT_OUT,
    *,
    patches_dir: Path = DEFAULT_PATCHES_DIR,
    overlay_dir: Path = DEFAULT_OVERLAY_DIR,
    base_roots: Sequence[Path] | None = None,
    bench_path: Path = DEFAULT_BENCH,
    upstream_test_summary: Path = DEFAULT_UPSTREAM_TEST_SUMMARY,
    read_source: Callable[[str], str] = read_repo_text,
    identity: tuple[str, str] | None = None,
    date: str | None = None,
    check: bool = True,
    runner: Runner | None = None,
    tests: Sequence[TestExport] = TEST_EXPORTS,
    upstream_tests: Path | None = None,
    edits_dir: Path = DEFAULT_EDITS_DIR,
) -> Export:
    """Export the series; with `runner`, check each commit's tests at it.

    With `upstream_tests` (a PyTorch checkout or a directory holding
    upstream's test/inductor/), the base also holds the upstream test files
    the series edits, and each edit lands in its feature's commit."""
    series = load_series(patches_dir)
    overlay = load_overlay_files(overlay_dir)
    commits = plan_commits(series, overlay, tests)
    base = read_pristine_files(
        series, default_base_roots() if base_roots is None else base_roots
    )
    edits, edits_label = attach_upstream_edits(commits, edits_dir, upstream_tests, base)
    bench = load_bench(bench_path)
    env = git_env(identity or repo_identity(), date or repo_date())
    placer = TestPlacer(tests, commits, overlay, read_source, runner)

    with tempfile.TemporaryDirectory(prefix="fusion-overlay-pr-") as tmp:
        work = Path(tmp) / "pytorch"
        base_commit = commit_base(work, base, env)
        for index, commit in enumerate(commits):
            proc = git(
                work,
                "apply", "--index", "--whitespace=nowarn", str(commit.patch.path),
                env=env, check=False,
            )  # fmt: skip
            if proc.returncode != 0:
                raise ExportError(
                    f"{commit.patch.name} does not apply to {UPSTREAM_REF} "
                    f"+ the patches before it:\n{proc.stderr.strip()}"
                )
            if commit.edits_applied:
                for edit in commit.upstream_edits:
                    try:
                        apply_edit(work, edit, lambda *a, **k: git(*a, env=env, **k))
                    except UpstreamEditError as error:
                        raise ExportError(str(error)) from None
            for rel, text in commit.modules.items():
                check_names(rel, text, commit.patch.name)
            files = {rel: text.encode() for rel, text in commit.modules.items()}
            write_files(work, files)
            files.update(
                (rel, text.encode()) for rel, text in placer.step(index, work).items()
            )
            write_files(work, files)
            git(work, "add", "--all", "--", ".", env=env)
            git(
                work, "commit", "--quiet", "-F", "-",
                env=env, input=commit_message(commit, bench),
            )  # fmt: skip
        for rel, data in overlay.items():
            if (work / rel).read_bytes() != data:
                raise ExportError(f"the last commit's {rel} is not overlay/{rel}")
        final_tree = git(work, "rev-parse", "HEAD^{tree}", env=env).stdout.strip()

        out_dir.mkdir(parents=True, exist_ok=True)
        for old in out_dir.glob("*.patch"):
            old.unlink()
        listing = git(
            work,
            "format-patch", "--quiet", "--zero-commit", "--no-signature",
            "--no-numbered", "-o", str(out_dir.resolve()), f"{base_commit}..HEAD",
            env=env,
        ).stdout  # fmt: skip
        patches = [Path(line) for line in listing.splitlines() if line.strip()]
        if not patches:
            patches = sorted(out_dir.glob("*.patch"))

    export = Export(out_dir, patches, commits, base, final_tree, [])
    if check:
        check_am(export, env)
        export.checks.append(
            f"`git am` of the {len(patches)} patches on a fresh partial "
            f"{UPSTREAM_REF} tree: applies, same final tree ({final_tree[:12]})"
        )
    if edits:
        export.checks.append(
            f"upstream test edits: {len(edits)} applied to {edits_label}, each in "
            "its feature's commit"
            if edits_label
            else f"upstream test edits: {len(edits)} in patches/upstream-tests/, "
            "not in this export (no upstream test files: --upstream-tests or "
            "PYTORCH_SRC); each commit message names its own"
        )
    if runner is not None:
        export.checks.append(step_check_line(commits))
    summary = (
        upstream_test_summary.read_text() if upstream_test_summary.is_file() else None
    )
    write_description(export, bench, summary)
    return export


def step_check_line(commits: Sequence[PlannedCommit]) -> str:
    checks = [(c.patch.name[:4], c.check) for c in commits if c.check is not None]
    run = sum(len(t) for _, check in checks for t in check.results.values())
    red = [name for name, check in checks if not check.green]
    line = (
        f"step by step: {len(checks)} of {len(commits)} commits add or change "
        f"tests; {run} test functions ran at the commit that carries them"
    )
    return line + (f"; FAILED at {', '.join(red)}" if red else ", all passed")


def steps_green(export: Export) -> bool:
    return all(c.check is None or c.check.green for c in export.commits)


def write_description(export: Export, bench: dict | None, summary: str | None) -> None:
    text = pr_description(
        export.commits,
        bench,
        export.checks,
        summary,
        rebase_status=docs_page_body(REBASE_STATUS_PAGE),
    )
    (export.out_dir / PR_DESCRIPTION).write_text(text)


def check_am(export: Export, env: dict[str, str]) -> None:
    """A fresh partial release tree + `git am` must reach the exported tree."""
    with tempfile.TemporaryDirectory(prefix="fusion-overlay-am-") as tmp:
        root = Path(tmp) / "pytorch"
        commit_base(root, export.base_files, env)
        proc = git(
            root, "am", "--quiet", *[str(p.resolve()) for p in export.patches],
            env=env, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            raise ExportError(
                f"git am of the export failed:\n{proc.stdout}{proc.stderr}"
            )
        tree = git(root, "rev-parse", "HEAD^{tree}", env=env).stdout.strip()
        if tree != export.final_tree:
            raise ExportError(
                f"git am of the export reached tree {tree}, "
                f"expected {export.final_tree}"
            )


# --------------------------------------------------------------------------
# Against a PyTorch checkout: --pytorch-src [--onto REF]


@dataclasses.dataclass
class PatchResult:
    patch: str
    status: str  # "clean", "3-way merged", "conflict", "failed"
    files: list[str]  # conflicting files
    detail: str = ""

    @property
    def applied(self) -> bool:
        return self.status in ("clean", "3-way merged")


def is_git_repo(path: Path) -> bool:
    proc = subprocess.run(
        ["git", "-C", str(path), "rev-parse", "--git-dir"], capture_output=True
    )
    return proc.returncode == 0


def exported_paths(export: Export) -> list[str]:
    paths = set(export.base_files)
    for commit in export.commits:
        paths.update(c.path for c in commit.patch.changes)
        paths.update(commit.modules)
        paths.update(t.dest for t in commit.tests)
        if commit.helper:
            paths.add(HELPER_PATH)
    return sorted(paths)


def apply_onto(
    src: Path, ref: str, export: Export, env: dict[str, str], out_dir: Path | None
) -> tuple[str, list[PatchResult]]:
    """`git am --3way` of each patch onto REF of the checkout `src`.

    Works in a throwaway clone that borrows src's objects (`--shared`) and
    checks out only the paths the series touches, so src is only read.  A
    patch that fails is skipped and the next one tried on top of the others.
    """
    src = src.resolve()
    with tempfile.TemporaryDirectory(prefix="fusion-overlay-onto-") as tmp:
        clone = Path(tmp) / "pytorch"
        if is_git_repo(src):
            proc = git(
                src, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}",
                env=env, check=False,
            )  # fmt: skip
            if proc.returncode != 0:
                raise ExportError(f"{ref!r} is not a commit in {src}")
            commit = proc.stdout.strip()
            git(Path(tmp), "clone", "--quiet", "--shared", "--no-checkout",
                str(src), str(clone), env=env)  # fmt: skip
            for key, value in (("core.autocrlf", "false"), ("commit.gpgsign", "false")):
                git(clone, "config", key, value, env=env)
            git(clone, "sparse-checkout", "set", "--no-cone",
                *["/" + p for p in exported_paths(export)], env=env)  # fmt: skip
            git(clone, "checkout", "--quiet", "-b", "onto", commit, env=env)
            described = git(
                src, "describe", "--tags", "--always", commit, env=env, check=False
            ).stdout.strip()
            label = f"{ref} ({described or commit[:12]}, {commit[:12]})"
        else:
            # A source tree without git (a release tarball): its files, as a base.
            if ref != "HEAD":
                raise ExportError(f"--onto needs a git checkout; {src} is not one")
            files = {
                rel: (src / rel).read_bytes()
                for rel in export.base_files
                if (src / rel).is_file()
            }
            commit = commit_base(clone, files, env)
            label = f"the files of {src} (not a git checkout)"
        results = [am_one(clone, patch, env) for patch in export.patches]
        if out_dir is not None:
            for old in out_dir.glob("*.patch"):
                old.unlink()  # a stale rebased set must not outlive a conflict
        if out_dir is not None and all(r.applied for r in results):
            out_dir.mkdir(parents=True, exist_ok=True)
            git(clone, "format-patch", "--quiet", "--zero-commit", "--no-signature",
                "-o", str(out_dir.resolve()), f"{commit}..HEAD", env=env)  # fmt: skip
    return label, results


def am_one(clone: Path, patch: Path, env: dict[str, str]) -> PatchResult:
    name = patch.name
    proc = git(clone, "am", "--3way", str(patch.resolve()), env=env, check=False)
    output = proc.stdout + proc.stderr
    if proc.returncode == 0:
        merged = "Falling back to patching base and 3-way merge" in output
        return PatchResult(name, "3-way merged" if merged else "clean", [])
    conflicts = sorted(set(re.findall(r"CONFLICT \([^)]*\): .*? in (\S+)", output)))
    if not conflicts:
        conflicts = sorted(set(re.findall(r"error: patch failed: ([^:\s]+)", output)))
    git(clone, "am", "--abort", env=env, check=False)
    status = "conflict" if conflicts else "failed"
    return PatchResult(name, status, conflicts, output.strip())


def format_results(label: str, results: list[PatchResult], bullet: str = "") -> str:
    """One summary line, then a line per patch (indented, `bullet` in front)."""
    bad = [r for r in results if not r.applied]
    lines = [
        f"`git am --3way` onto {label}: {len(results) - len(bad)} of "
        f"{len(results)} apply" + (f", {len(bad)} need rebasing by hand" if bad else "")
    ]
    for r in results:
        line = f"  {bullet}{r.patch}: {r.status}"
        if r.files:
            line += " in " + ", ".join(r.files)
        lines.append(line)
    return "\n".join(lines)


def safe_ref_name(ref: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", ref).strip("_") or "ref"


# --------------------------------------------------------------------------
# Command line


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.pr", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument(
        "--pytorch-src",
        default=os.environ.get("PYTORCH_SRC") or None,
        help="a PyTorch checkout to check the set against (default: $PYTORCH_SRC)",
    )
    parser.add_argument(
        "--onto", default=None, help="a commit of --pytorch-src to rebase onto (HEAD)"
    )
    parser.add_argument(
        "--base-from",
        type=Path,
        action="append",
        help="site-packages dir holding the pristine release (default: the venvs)",
    )
    parser.add_argument(
        "--upstream-tests",
        type=Path,
        default=None,
        help="a PyTorch checkout or a directory holding upstream's test/inductor/: "
        "the series' edits of upstream tests (patches/upstream-tests/) land in "
        "their features' commits (default: --pytorch-src)",
    )
    parser.add_argument("--bench", type=Path, default=DEFAULT_BENCH)
    parser.add_argument(
        "--no-step-checks",
        action="store_true",
        help="do not run each commit's tests at that commit (tests then land "
        "at the first commit they can import and configure at, unchecked)",
    )
    parser.add_argument(
        "--rev",
        default=None,
        help="export patches/, overlay/ and the tests as committed at REV "
        "(default: the working tree)",
    )
    return parser


def make_runner(args: argparse.Namespace) -> StepRunner | None:
    if args.no_step_checks:
        return None
    roots = step_check_roots(args.base_from or default_base_roots())
    if not roots:
        raise ExportError(f"no stock torch {UPSTREAM_REF[1:]} for the step checks")
    return StepRunner(roots[0])


def step_check_roots(roots: Sequence[Path]) -> list[Path]:
    """The site-packages whose torch is the series' release, a stock venv's
    first: the step checks run the partial tree over that torch, whose other
    files must be the same release's (a newer config.py does not import over
    an older torch) and pristine (no overlay module of a patched venv)."""
    from fusion_overlay.patchset import release_of
    from fusion_overlay.target import read_torch_version

    release = UPSTREAM_REF[1:]
    same = [r for r in roots if release_of(read_torch_version(r)[0]) == release]
    return sorted(same, key=lambda r: "stock" not in str(r))


def _export_from(
    args: argparse.Namespace, tmp: Path, runner: StepRunner | None = None
) -> Export:
    if args.rev is None:
        dirty = uncommitted_sources()
        if dirty:
            print(
                "warning: exporting uncommitted changes (use --rev HEAD for the "
                "committed state): " + ", ".join(dirty),
                file=sys.stderr,
            )
        return export_series(
            args.out,
            base_roots=args.base_from,
            bench_path=args.bench,
            runner=runner,
            upstream_tests=upstream_tests_of(args),
        )
    root = checkout_rev(args.rev, tmp)
    return export_series(
        args.out,
        patches_dir=root / "patches",
        overlay_dir=root / "overlay",
        base_roots=args.base_from,
        bench_path=args.bench,
        read_source=lambda rel: (root / rel).read_text(),
        runner=runner,
        upstream_tests=upstream_tests_of(args),
        edits_dir=root / "patches" / "upstream-tests",
    )


def upstream_tests_of(args: argparse.Namespace) -> Path | None:
    """--upstream-tests, else a --pytorch-src that holds test/inductor/."""
    if args.upstream_tests is not None:
        return args.upstream_tests
    if args.pytorch_src and (Path(args.pytorch_src) / "test" / "inductor").is_dir():
        return Path(args.pytorch_src)
    return None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.onto and not args.pytorch_src:
        print("error: --onto needs --pytorch-src (or PYTORCH_SRC)", file=sys.stderr)
        return 2
    if shutil.which("git") is None:
        print("error: git is needed", file=sys.stderr)
        return 2
    if args.upstream_tests and not (args.upstream_tests / "test" / "inductor").is_dir():
        print(
            f"error: --upstream-tests {args.upstream_tests} has no test/inductor/",
            file=sys.stderr,
        )
        return 1
    if args.pytorch_src and not (Path(args.pytorch_src) / "torch").is_dir():
        # before the export and its step checks: bad input changes nothing
        print(
            f"error: PYTORCH_SRC={args.pytorch_src} has no torch/: "
            "not a PyTorch checkout",
            file=sys.stderr,
        )
        return 1
    try:
        runner = make_runner(args)
        try:
            with tempfile.TemporaryDirectory(prefix="fusion-overlay-rev-") as tmp:
                export = _export_from(args, Path(tmp), runner)
        finally:
            if runner is not None:
                runner.close()
        print(f"wrote {len(export.patches)} patches to {export.out_dir}:")
        for patch in export.patches:
            print(f"  {patch.name}")
        for line in export.checks:
            print(f"check: {line}")
        code = 0 if steps_green(export) else 1
        if args.pytorch_src:
            src = Path(args.pytorch_src)
            ref = args.onto or "HEAD"
            env = git_env(repo_identity(), repo_date())
            onto_dir = args.out / f"onto-{safe_ref_name(ref)}"
            label, results = apply_onto(src, ref, export, env, onto_dir)
            print(format_results(label, results))
            clean = all(r.applied for r in results)
            if clean:
                print(f"rebased set: {onto_dir}")
            export.checks.append(format_results(f"{label} of {src}", results, "- "))
            write_description(
                export,
                load_bench(args.bench),
                DEFAULT_UPSTREAM_TEST_SUMMARY.read_text()
                if DEFAULT_UPSTREAM_TEST_SUMMARY.is_file()
                else None,
            )
            code = code if clean else 1
        print(f"description: {export.out_dir / PR_DESCRIPTION}")
        return code
    except (ExportError, SeriesError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
