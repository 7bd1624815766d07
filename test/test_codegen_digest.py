"""tools/codegen_digest.py: one digest per ISA, and the comparison that proves a
refactoring left the generated C++ byte for byte as it was."""

from __future__ import annotations

import json

from tools.codegen_digest import compare, digest


def _dump(root, kernels: dict[str, str]):
    root.mkdir(parents=True)
    programs = {"p": {"kernels": sorted(kernels)}}
    (root / "manifest.json").write_text(json.dumps({"programs": programs}))
    for name, text in kernels.items():
        (root / name).write_text(text)
    return root


def test_one_changed_byte_changes_the_digest(tmp_path):
    a = digest(_dump(tmp_path / "a", {"p.0.cpp": "x = 1;", "p.1.cpp": "y;"}))
    b = digest(_dump(tmp_path / "b", {"p.0.cpp": "x = 2;", "p.1.cpp": "y;"}))
    same = digest(_dump(tmp_path / "c", {"p.1.cpp": "y;", "p.0.cpp": "x = 1;"}))
    assert a["programs"] == 1 and a["kernel_files"] == 2
    assert a["sha256"] != b["sha256"]
    assert a == same


def test_a_kernel_moving_to_another_file_changes_the_digest(tmp_path):
    a = digest(_dump(tmp_path / "a", {"p.0.cpp": "xy", "p.1.cpp": ""}))
    b = digest(_dump(tmp_path / "b", {"p.0.cpp": "x", "p.1.cpp": "y"}))
    assert a["sha256"] != b["sha256"]


def test_compare_names_the_isas_that_differ_or_are_missing():
    before = {"avx2": {"sha256": "1"}, "neon": {"sha256": "2"}}
    now = {"avx2": {"sha256": "1"}, "neon": {"sha256": "3"}, "sve256": {"sha256": "4"}}
    assert compare(now, before) == ["neon", "sve256"]
    assert compare(before, before) == []
