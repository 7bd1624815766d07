"""The series' edits of upstream's own test files, one per changed expectation.

Where a feature changes what an upstream test asserts (a kernel count, the
text of the generated code: ``tools/upstream_expectations.py`` says which
and why), the exported series changes that test in the commit of the
feature, as an upstream PR must.  Each edit is a git diff in
``patches/upstream-tests/`` named ``NNNN-<test>.patch``: NNNN is the series
patch whose commit carries it.  Its header names the test ids it changes
(``Test:`` lines); the reason is the test's entry in EXPECTED_CHANGES.

Upstream's test files are never kept here: the export reads them from a
PyTorch checkout (the ``v2.13.0`` blob when the tag is there, else the work
tree) or from a directory holding ``test/inductor/`` (``tools.pr
--upstream-tests``).  The edits are not part of the install (site-packages
holds no tests) nor of the wheel.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import textwrap
from collections.abc import Iterable, Sequence
from pathlib import Path

from fusion_overlay.patchset import REPO_ROOT
from tools.upstream_expectations import EXPECTED_CHANGES, ExpectedChange

DEFAULT_EDITS_DIR = REPO_ROOT / "patches" / "upstream-tests"
EDIT_NAME = re.compile(r"^(?P<patch>\d{4})-(?P<slug>[A-Za-z0-9_.-]+)\.patch$")
# The test class each upstream file defines its CPU tests in.
FILE_OF_CLASS = {
    "CPUReproTests": "test/inductor/test_cpu_repro.py",
    "CpuTests": "test/inductor/test_torchinductor.py",
    "DynamicShapesCpuTests": "test/inductor/test_torchinductor.py",
}


class UpstreamEditError(Exception):
    """An edit that is malformed, or that does not apply to the files given."""


@dataclasses.dataclass(frozen=True)
class TestEdit:
    path: Path
    patch: str  # the series patch number whose commit carries the edit
    tests: tuple[str, ...]  # the test ids it changes (EXPECTED_CHANGES keys)
    files: tuple[str, ...]  # the upstream files it changes

    @property
    def changes(self) -> list[tuple[str, ExpectedChange]]:
        return [(t, EXPECTED_CHANGES[t]) for t in self.tests]


def parse_edit(path: Path) -> TestEdit:
    match = EDIT_NAME.match(path.name)
    if not match:
        raise UpstreamEditError(f"{path.name}: not named NNNN-<test>.patch")
    text = path.read_text()
    head = text.split("\ndiff --git ", 1)[0]
    tests = tuple(re.findall(r"^Test: (\S+)$", head, re.M))
    files = tuple(re.findall(r"^diff --git a/(\S+) b/\1$", text, re.M))
    if not tests:
        raise UpstreamEditError(f"{path.name}: no `Test:` line in its header")
    if not files:
        raise UpstreamEditError(f"{path.name}: no `diff --git` section")
    unknown = [t for t in tests if t not in EXPECTED_CHANGES]
    if unknown:
        raise UpstreamEditError(
            f"{path.name}: {', '.join(unknown)} not in tools/upstream_expectations.py"
        )
    return TestEdit(path, match["patch"], tests, files)


def load_edits(edits_dir: Path = DEFAULT_EDITS_DIR) -> list[TestEdit]:
    if not edits_dir.is_dir():
        return []
    return [parse_edit(p) for p in sorted(edits_dir.glob("*.patch"))]


def edits_of_patch(patch_name: str, edits: Iterable[TestEdit]) -> list[TestEdit]:
    return [e for e in edits if patch_name.startswith(e.patch + "-")]


def touched_files(edits: Iterable[TestEdit]) -> list[str]:
    return sorted({f for e in edits for f in e.files})


def read_test_files(
    source: Path, rels: Sequence[str], ref: str = "v2.13.0"
) -> tuple[dict[str, bytes], str]:
    """The upstream test files `rels` from `source`, and where they came from.

    A git checkout that has `ref` gives its blobs at `ref` (the version the
    series is based on); otherwise the files as they are on disk.
    """
    source = Path(source)
    if _has_ref(source, ref):
        files = {rel: _git_show(source, f"{ref}:{rel}") for rel in rels}
        missing = [rel for rel, data in files.items() if data is None]
        label = f"{source} at {ref}"
    else:
        files = {
            rel: (source / rel).read_bytes() for rel in rels if (source / rel).is_file()
        }
        missing = [rel for rel in rels if rel not in files]
        label = f"{source} (files on disk)"
    if missing:
        raise UpstreamEditError(
            f"no {', '.join(missing)} in {label}: --upstream-tests needs a "
            "PyTorch checkout or a directory holding upstream's test/inductor/"
        )
    return {rel: data for rel, data in files.items() if data is not None}, label


def _has_ref(source: Path, ref: str) -> bool:
    proc = subprocess.run(
        ["git", "-C", str(source), "rev-parse", "--verify", "--quiet",
         f"{ref}^{{commit}}"],
        capture_output=True,
    )  # fmt: skip
    return proc.returncode == 0


def _git_show(source: Path, spec: str) -> bytes | None:
    proc = subprocess.run(["git", "-C", str(source), "show", spec], capture_output=True)
    return proc.stdout if proc.returncode == 0 else None


def commit_notes(edits: Sequence[TestEdit], applied: bool) -> list[str]:
    """The commit message's paragraph on the upstream tests the commit changes."""
    if not edits:
        return []
    lead = (
        "Upstream tests this commit changes (the edit is in this commit):"
        if applied
        else "Upstream tests this commit changes (the edits are in "
        "patches/upstream-tests/; not in this export, which had no upstream "
        "test files):"
    )
    lines = textwrap.wrap(lead, 72)
    for edit in edits:
        for test, change in edit.changes:
            lines += textwrap.wrap(
                f"- {test} ({change.kind}): {change.reason}",
                72,
                subsequent_indent="  ",
                break_on_hyphens=False,
                break_long_words=False,
            )
    return lines


def apply_edit(work: Path, edit: TestEdit, git) -> None:
    """`git apply --index` of one edit in the export's tree, or a clear error."""
    proc = git(
        work, "apply", "--index", "--whitespace=nowarn", str(edit.path), check=False
    )
    if proc.returncode != 0:
        raise UpstreamEditError(
            f"{edit.path.name} does not apply to "
            f"{', '.join(edit.files)}:\n{proc.stderr.strip()}"
        )
