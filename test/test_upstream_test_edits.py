"""patches/upstream-tests/: the series' edits of upstream tests, and their export.

Upstream's test files are not kept in this repo, so the export is checked on
a stand-in: for each upstream file, the text every hunk of every edit
expects to find there (its context and removed lines), one hunk after the
other.  No compiles: git over a partial tree, as in test_pr_export.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tools import pr
from tools.upstream_expectations import EXPECTED_CHANGES
from tools.upstream_test_edits import (
    FILE_OF_CLASS,
    UpstreamEditError,
    load_edits,
    parse_edit,
    read_test_files,
)

IDENTITY = ("Test Author", "test@example.com")
DATE = "2025-01-02T03:04:05+00:00"
EDITS = load_edits()

needs_stock = pytest.mark.skipif(
    not pr.default_base_roots(), reason="no torch 2.13.0 venv (run `make stock-venv`)"
)


def preimages(edit_text: str) -> dict[str, list[str]]:
    """{file: the lines each hunk expects there, hunk after hunk}."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    in_hunk = False
    for line in edit_text.splitlines():
        header = re.match(r"^diff --git a/(\S+) b/", line)
        if header:
            current = out.setdefault(header[1], [])
            in_hunk = False
        elif line.startswith("@@"):
            in_hunk = True
            if current:
                current.append("# (upstream lines between hunks)")
        elif in_hunk and current is not None and line[:1] in (" ", "-"):
            current.append(line[1:])
        elif in_hunk and current is not None and line == "":
            current.append("")
    return out


def stand_in_tests(root: Path) -> Path:
    """A directory whose upstream test files hold exactly what the edits expect."""
    texts: dict[str, list[str]] = {}
    for edit in EDITS:
        for rel, lines in preimages(edit.path.read_text()).items():
            if texts.get(rel):
                texts[rel].append("# (upstream lines between edits)")
            texts.setdefault(rel, []).extend(lines)
    for rel, lines in texts.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("\n".join(lines) + "\n")
    return root


def test_every_changed_expectation_has_one_edit_in_its_patch():
    covered: dict[str, str] = {}
    for edit in EDITS:
        for test in edit.tests:
            assert test not in covered, f"{test} in {covered.get(test)} and {edit.path}"
            covered[test] = edit.path.name
            change = EXPECTED_CHANGES[test]
            # a change either of two patches makes lands with the first
            assert edit.patch == change.patch.split()[0], edit.path.name
            assert edit.files == (FILE_OF_CLASS[test.split(".")[0]],), edit.path.name
    assert sorted(covered) == sorted(EXPECTED_CHANGES)


def test_a_malformed_edit_is_refused(tmp_path):
    bad = tmp_path / "0022-x.patch"
    bad.write_text("Test: CPUReproTests.test_nothing_like_this\n\ndiff --git a/t b/t\n")
    with pytest.raises(UpstreamEditError, match="not in tools/upstream_expectations"):
        parse_edit(bad)
    unnamed = tmp_path / "edit.patch"
    unnamed.write_text("")
    with pytest.raises(UpstreamEditError, match="NNNN-<test>"):
        parse_edit(unnamed)


def test_missing_upstream_files_are_named(tmp_path):
    with pytest.raises(UpstreamEditError, match="test_cpu_repro.py"):
        read_test_files(tmp_path, ["test/inductor/test_cpu_repro.py"])


@pytest.fixture(scope="module")
def export_with_edits(tmp_path_factory):
    root = tmp_path_factory.mktemp("upstream")
    out = tmp_path_factory.mktemp("pr")
    return pr.export_series(
        out / "patches",
        identity=IDENTITY,
        date=DATE,
        bench_path=out / "no-bench.json",
        upstream_test_summary=out / "none.md",
        upstream_tests=stand_in_tests(root),
    )


def diff_files(patch: Path) -> list[str]:
    return re.findall(r"^diff --git a/(\S+) b/", patch.read_text(), re.M)


@needs_stock
def test_each_edit_lands_in_its_features_commit(export_with_edits):
    upstream_files = {f for e in EDITS for f in e.files}
    for commit, patch in zip(
        export_with_edits.commits, export_with_edits.patches, strict=True
    ):
        text = patch.read_text()
        expected = {f for e in commit.upstream_edits for f in e.files}
        assert upstream_files & set(diff_files(patch)) == expected, patch.name
        for edit in commit.upstream_edits:
            for test, _ in edit.changes:
                assert test in text, (patch.name, test)  # the reason, in the message
    assert any("upstream test edits: " in c for c in export_with_edits.checks)
    # the partial tree the set applies to holds the upstream files, unedited
    assert upstream_files <= set(export_with_edits.base_files)


@needs_stock
def test_an_edit_that_does_not_apply_stops_the_export(tmp_path):
    root = stand_in_tests(tmp_path / "upstream")
    target = root / EDITS[0].files[0]
    target.write_text(target.read_text().replace("check", "verify"))
    with pytest.raises(pr.ExportError, match=EDITS[0].path.name):
        pr.export_series(
            tmp_path / "patches",
            identity=IDENTITY,
            date=DATE,
            bench_path=tmp_path / "no-bench.json",
            upstream_test_summary=tmp_path / "none.md",
            upstream_tests=root,
            check=False,
        )


def test_cli_refuses_an_upstream_tests_dir_without_tests(tmp_path, capsys):
    out = tmp_path / "out"
    code = pr.main(
        ["--out", str(out), "--upstream-tests", str(tmp_path), "--no-step-checks"]
    )
    assert code == 1
    assert "has no test/inductor/" in capsys.readouterr().err
    assert not out.exists()  # refused before exporting anything
