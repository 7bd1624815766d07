"""tools/upstream_test.py: refusals, result parsing, and one end-to-end run.

The end-to-end run uses a fake checkout whose only test file tells stock from
patched torch by a config flag, so it compiles nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PATCHED_VENV, REPO_ROOT, STOCK_VENV

from tools import upstream_test as ut


def make(*args: str) -> subprocess.CompletedProcess:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("MAKE") and k != "PYTORCH_SRC"
    }
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(REPO_ROOT), "upstream-test"]
        + [f"PYTHON={sys.executable}", *args],
        capture_output=True,
        text=True,
        env=env,
    )


@pytest.mark.parametrize(
    "src, message",
    [
        (None, "set PYTORCH_SRC"),
        ("missing", "is not a directory"),
        ("", "has no test/inductor/"),
    ],
    ids=["unset", "not-a-dir", "no-test-inductor"],
)
def test_make_upstream_test_refuses(tmp_path, src, message):
    args = [] if src is None else [f"PYTORCH_SRC={tmp_path / src}"]
    result = make(*args)
    assert result.returncode != 0
    assert message in result.stderr
    assert "pip install" not in result.stdout  # refused before building venvs


def test_missing_test_file_is_refused(tmp_path):
    (tmp_path / "test" / "inductor").mkdir(parents=True)
    with pytest.raises(ut.UsageError, match="has no test/inductor/test_cpu_repro.py"):
        ut.check_source(str(tmp_path), [ut.DEFAULT_TESTS])


def test_variants():
    assert ut.parse_variants("") == []
    assert ut.parse_variants("A=1 B=0; C=x") == [{"A": "1", "B": "0"}, {"C": "x"}]
    with pytest.raises(ut.UsageError, match="NAME=VALUE"):
        ut.parse_variants("A")


JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="test_cpu_repro.CPUReproTests" name="test_a" time="1"/>
<testcase classname="test_cpu_repro.CPUReproTests" name="test_b" time="1">
<failure message="boom">trace</failure></testcase>
<testcase classname="test_cpu_repro.CPUReproTests" name="test_c" time="0">
<skipped message="no"/></testcase>
<testcase classname="test_cpu_repro.CPUReproTests" name="test_d" time="1">
<error message="setup"/></testcase>
</testsuite></testsuites>
"""


def fake_run(label: str, outcomes: dict[str, str], code: int = 1) -> ut.RunResult:
    return ut.RunResult(label, outcomes, code, 1.0, Path("x.log"), "torch")


def test_junit_and_comparison(tmp_path):
    (tmp_path / "r.xml").write_text(JUNIT)
    outcomes = ut.parse_junit(tmp_path / "r.xml")
    prefix = "test_cpu_repro.CPUReproTests."
    assert outcomes == {
        prefix + "test_a": "passed",
        prefix + "test_b": "failed",
        prefix + "test_c": "skipped",
        prefix + "test_d": "failed",
    }
    stock = fake_run("stock", {"a": "passed", "b": "failed", "c": "passed"})
    patched = fake_run("patched", {"a": "failed", "b": "passed", "c": "passed"})
    text, ok = ut.report("header", [ut.Comparison(stock, patched)])
    assert not ok
    assert "new failures (pass on stock, fail on patched): a" in text
    assert "new passes (fail on stock, pass on patched): b" in text
    assert "| stock | 2 | 1 | 0 |" in text and "| patched | 2 | 1 | 0 |" in text

    crashed = fake_run("patched", {}, code=2)
    text, ok = ut.report("header", [ut.Comparison(stock, crashed)])
    assert not ok and "not comparable: pytest exited 2" in text


FAKE_TEST = """
import os

import torch._inductor.config as config

PATCHED = hasattr(config.cpp, "outer_loop_fusion_retile")


def test_same_on_both():
    pass


def test_fixed_by_the_overlay():
    assert PATCHED


def test_broken_by_loop_ordering():
    flag = os.environ.get("TORCHINDUCTOR_CPP_LOOP_ORDERING_AFTER_FUSION") == "1"
    assert not (PATCHED and flag)


def test_not_selected():
    raise AssertionError("deselected by -k")
"""


@pytest.mark.skipif(
    not (PATCHED_VENV / "bin/python").exists()
    or not (STOCK_VENV / "bin/python").exists(),
    reason="needs .venv and .venv-stock",
)
def test_end_to_end_on_a_fake_checkout(tmp_path):
    src = tmp_path / "pytorch"
    (src / "test" / "inductor").mkdir(parents=True)
    (src / "test" / "inductor" / "test_fake.py").write_text(FAKE_TEST)
    # An unbuilt torch/ in the checkout must not shadow the venvs' torch.
    (src / "torch").mkdir()
    (src / "torch" / "__init__.py").write_text("raise ImportError('source tree')\n")
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            str(PATCHED_VENV / "bin/python"), "-m", "tools.upstream_test",
            "--pytorch-src", str(src), "--tests", "test/inductor/test_fake.py",
            "-k", "not not_selected", "--out", str(out),
            "--variants", "TORCHINDUCTOR_CPP_LOOP_ORDERING_AFTER_FUSION=1",
        ],
        cwd=REPO_ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the variant breaks one
    summary = (out / "summary.md").read_text()
    assert "| stock | 2 | 1 | 0 |" in summary
    assert "| patched | 3 | 0 | 0 |" in summary
    assert (
        "| patched TORCHINDUCTOR_CPP_LOOP_ORDERING_AFTER_FUSION=1 | 2 | 1 |" in summary
    )
    fixed = "test_fake.test_fixed_by_the_overlay"
    broken = "test_fake.test_broken_by_loop_ordering"
    plain, variant = summary.split("**patched TORCHINDUCTOR")

    def line(text: str, start: str) -> str:
        return next(x for x in text.splitlines() if x.startswith(f"- {start}"))

    assert line(plain, "new passes").endswith(f".{fixed}")  # pytest adds a prefix
    assert line(plain, "new failures").endswith(": none")
    assert line(variant, "new failures").endswith(f".{broken}")
    # Overlay-only flags do not change stock: its run is reused, not repeated.
    assert not (
        out / "stock_TORCHINDUCTOR_CPP_LOOP_ORDERING_AFTER_FUSION_1.xml"
    ).exists()
