"""tools/upstream_test.py: refusals, result parsing, and one end-to-end run.

The end-to-end run uses a fake checkout whose only test file tells stock from
patched torch by a config flag, so it compiles nothing.
"""

from __future__ import annotations

import json
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
        ut.check_source(str(tmp_path), list(ut.SUITES))


def test_shard_argument():
    assert ut.parse_shard("2/3") == (2, 3)
    for bad in ("3/2", "0/2", "1", "a/b"):
        with pytest.raises(ut.UsageError, match="I/N"):
            ut.parse_shard(bad)


def test_shards_split_test_ids_without_overlap():
    from tools.upstream_compat import in_shard

    ids = [f"inductor/test_x.py::T::test_{i}" for i in range(200)]
    shards = [{t for t in ids if in_shard(t, i, 3)} for i in (1, 2, 3)]
    assert set().union(*shards) == set(ids)
    assert sum(map(len, shards)) == len(ids)
    assert all(len(s) > 40 for s in shards)  # a hash, not a prefix split


def test_per_file_selection():
    chosen = ut.selection(list(ut.SUITES), None)
    assert chosen["test/inductor/test_torchinductor.py"] == "CpuTests"
    assert "float32" in chosen["test/inductor/test_torchinductor_opinfo.py"]
    assert ut.selection(["a.py"], "x") == {"a.py": "x"}


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


def label(name: str, outcomes: dict[str, str], problems=()) -> ut.LabelResult:
    counts = {o: sum(v == o for v in outcomes.values()) for o in ut.COUNTED}
    return ut.LabelResult(
        name, dict(outcomes), {"f.py": 1.0}, {"f.py": counts}, list(problems)
    )


def test_junit_and_comparison(tmp_path, monkeypatch):
    (tmp_path / "r.xml").write_text(JUNIT)
    outcomes = ut.parse_junit(tmp_path / "r.xml")
    prefix = "test_cpu_repro.CPUReproTests."
    assert outcomes == {
        prefix + "test_a": "passed",
        prefix + "test_b": "failed",
        prefix + "test_c": "skipped",
        prefix + "test_d": "failed",
    }
    (tmp_path / "cut.xml").write_text(JUNIT[:200])  # a run killed mid-write
    assert ut.parse_junit(tmp_path / "cut.xml") == {}

    monkeypatch.setattr(
        ut, "EXPECTED_CHANGES", {"T.e": ut.ExpectedChange("0099", "kind", "why")}
    )
    stock = label(
        "stock", {"a": "passed", "b": "failed", "c": "passed", "m.T.e": "passed"}
    )
    patched = label(
        "patched", {"a": "failed", "b": "passed", "c": "passed", "m.T.e": "failed"}
    )
    labels = {"stock": stock, "patched": patched}
    text, ok = ut.report("header", labels, [("stock", "patched")], [])
    assert not ok
    assert "new failures (pass on stock, fail on patched), unexplained: a" in text
    assert "new failure explained by 0099: m.T.e: why" in text
    assert "new passes (fail on stock, pass on patched): b" in text
    assert "| stock | `f.py` | 3 | 1 | 0 |" in text
    assert "| patched | `f.py` | 2 | 2 | 0 |" in text

    # only explained failures: ok
    patched.outcomes["a"] = "passed"
    assert ut.report("header", labels, [("stock", "patched")], [])[1]

    crashed = ["f.py [1/1]: pytest exited 2"]
    labels["patched"] = label("patched", patched.outcomes, crashed)
    text, ok = ut.report("header", labels, [("stock", "patched")], [])
    assert not ok and "not comparable: f.py [1/1]: pytest exited 2" in text


FAKE_TEST = """
import os

import pytest
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


@pytest.mark.parametrize("i", range(12))
def test_many(i):
    pass
"""

needs_venvs = pytest.mark.skipif(
    not (PATCHED_VENV / "bin/python").exists()
    or not (STOCK_VENV / "bin/python").exists(),
    reason="needs .venv and .venv-stock",
)


def fake_checkout(tmp_path: Path) -> Path:
    src = tmp_path / "pytorch"
    (src / "test" / "inductor").mkdir(parents=True)
    (src / "test" / "inductor" / "test_fake.py").write_text(FAKE_TEST)
    # An unbuilt torch/ in the checkout must not shadow the venvs' torch.
    (src / "torch").mkdir()
    (src / "torch" / "__init__.py").write_text("raise ImportError('source tree')\n")
    return src


def upstream_test(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(PATCHED_VENV / "bin/python"), "-m", "tools.upstream_test", *args],
        cwd=REPO_ROOT, capture_output=True, text=True,
    )  # fmt: skip


def fake_run(src: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return upstream_test(
        "run", "--pytorch-src", str(src), "--tests", "test/inductor/test_fake.py",
        "-k", "not not_selected", "--out", str(out), *extra,
    )  # fmt: skip


def line(text: str, start: str) -> str:
    return next(x for x in text.splitlines() if x.startswith(f"- {start}"))


@needs_venvs
def test_end_to_end_on_a_fake_checkout(tmp_path):
    src = fake_checkout(tmp_path)
    out = tmp_path / "out"
    proc = fake_run(
        src, out, "--variants", "TORCHINDUCTOR_CPP_LOOP_ORDERING_AFTER_FUSION=1"
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the variant breaks one
    summary = (out / "summary.md").read_text()
    assert "| stock | `test_fake.py` | 14 | 1 | 0 |" in summary
    assert "| patched | `test_fake.py` | 15 | 0 | 0 |" in summary
    variant_row = "| patched TORCHINDUCTOR_CPP_LOOP_ORDERING_AFTER_FUSION=1 | "
    assert f"{variant_row}`test_fake.py` | 14 | 1 |" in summary
    fixed = "test_fake.test_fixed_by_the_overlay"
    broken = "test_fake.test_broken_by_loop_ordering"
    plain, variant = summary.split("**patched TORCHINDUCTOR")
    assert line(plain, "new passes").endswith(f".{fixed}")  # pytest adds a prefix
    assert line(plain, "new failures").endswith(": none")
    assert line(variant, "new failures").endswith(f".{broken}")
    # Overlay-only flags do not change stock: its run is reused, not repeated.
    runs = json.loads((out / "run.json").read_text())["runs"]
    assert [r["label"] for r in runs] == [
        "stock", "patched", "patched TORCHINDUCTOR_CPP_LOOP_ORDERING_AFTER_FUSION=1"
    ]  # fmt: skip


@pytest.mark.slow  # four sharded runs of the fake checkout: make test-slow
@needs_venvs
def test_shards_merge_into_the_unsharded_report(tmp_path):
    src = fake_checkout(tmp_path)
    # shard 2 through pytest-xdist: the shard is chosen the same in its workers
    for i, extra in ((1, ()), (2, ("-n", "2"))):
        proc = fake_run(src, tmp_path / f"s{i}", "--shard", f"{i}/2", *extra)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    shard_ids = [
        ut.parse_junit(tmp_path / f"s{i}" / "patched" / "test_fake.xml") for i in (1, 2)
    ]
    assert shard_ids[0] and shard_ids[1]
    assert not set(shard_ids[0]) & set(shard_ids[1])

    shards = [str(tmp_path / "s1"), str(tmp_path / "s2")]
    merged = upstream_test("merge", *shards, "--out", str(tmp_path / "m"))
    assert merged.returncode == 0, merged.stdout + merged.stderr
    merged_labels, _, problems = ut.load_runs([tmp_path / "s1", tmp_path / "s2"])
    assert not problems
    # what the unsharded run reports (test_end_to_end_on_a_fake_checkout)
    patched = merged_labels["patched"].outcomes
    assert len(patched) == 15 and set(patched.values()) == {"passed"}
    stock_failed = [
        t for t, o in merged_labels["stock"].outcomes.items() if o != "passed"
    ]
    assert len(merged_labels["stock"].outcomes) == 15
    assert [t.split(".")[-1] for t in stock_failed] == ["test_fixed_by_the_overlay"]
    summary = (tmp_path / "m" / "summary.md").read_text()
    assert "| patched | `test_fake.py` | 15 | 0 | 0 |" in summary
    assert line(summary, "new passes").endswith(".test_fixed_by_the_overlay")

    # a missing shard fails the merge; the same shard twice is refused
    partial = upstream_test("merge", str(tmp_path / "s1"), "--out", str(tmp_path / "p"))
    assert partial.returncode == 1 and "missing shard(s) 2/2" in partial.stdout
    twice = upstream_test("merge", str(tmp_path / "s1"), str(tmp_path / "s1"))
    assert twice.returncode == 2 and "shard 1/2 given twice" in twice.stderr


@pytest.mark.slow  # three runs of the fake checkout: make test-slow
@needs_venvs
def test_one_side_runs_merge_with_the_other_sides_runs(tmp_path):
    """Stock whole, patched in shards (a long patched run split after the
    stock one finished): the merge compares the tests both sides ran and
    says which shards of which side are missing."""
    src = fake_checkout(tmp_path)
    stock = fake_run(src, tmp_path / "stock", "--sides", "stock")
    patched = fake_run(src, tmp_path / "p1", "--sides", "patched", "--shard", "1/2")
    assert stock.returncode == 0 and patched.returncode == 0, patched.stdout
    runs = json.loads((tmp_path / "p1" / "run.json").read_text())["runs"]
    assert [r["label"] for r in runs] == ["patched"]
    merged = upstream_test("merge", str(tmp_path / "stock"), str(tmp_path / "p1"))
    assert merged.returncode == 1
    assert "patched test_fake.py: missing shard(s) 2/2" in merged.stdout
    assert "stock test_fake.py: missing" not in merged.stdout
    labels, _, _ = ut.load_runs([tmp_path / "p1"])
    assert len(labels["patched"].outcomes) < 15
    assert "ran on one side only: " in merged.stdout


def test_merge_refuses_a_directory_without_a_run(tmp_path):
    assert ut.main(["merge", str(tmp_path)]) == 2


def test_older_test_files_import_against_the_pin():
    """The compat plugin gives 2.13.0 what older upstream test files use:
    placeholders for names 2.13.0 lacks, aliases for moved ones, an empty
    list for the OpInfo file's tensor_dunder_fns registration."""
    code = (
        "import torch, torch._dynamo.variables.torch as dv\n"
        "import torch.testing._internal.common_utils as cu\n"
        "dv.tensor_dunder_fns.append(cu.disable_functorch)\n"
        "print(len(dv.tensor_dunder_fns), callable(cu.dtype_abbrs.get))\n"
    )
    assert _printed_with_the_compat_plugin(code) == ["1", "True"]


def _printed_with_the_compat_plugin(code: str) -> list[str]:
    """What ``code`` prints in the patched venv once the plugin configured."""
    setup = (
        "from tools import upstream_compat\nupstream_compat.pytest_configure(None)\n"
    )
    out = subprocess.run(
        [str(PATCHED_VENV / "bin" / "python"), "-c", setup + code], cwd=REPO_ROOT,
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return out.split()


def test_the_older_opinfo_file_imports_against_the_installed_torch():
    """The older OpInfo file imports ``HAS_CUDA`` (now ``HAS_CUDA_AND_TRITON``) and the
    three-argument ``skipOps`` of common_methods_invocations: the plugin
    aliases the one and adapts the other to common_device_type's, which
    still turns each skip tuple into a skip of the decorated test (read from
    its qualified name), which ``@ops`` applies."""
    code = (
        "import unittest\n"
        "from torch.testing._internal.inductor_utils import HAS_CUDA\n"
        "from torch.testing._internal.common_methods_invocations import (\n"
        "    op_db, skipOps)\n"
        "class TestInductorOpInfo(unittest.TestCase):\n"
        "    @skipOps('TestInductorOpInfo', 'test_comprehensive',\n"
        "             {('abs', '', 'cpu', (), False)})\n"
        "    def test_comprehensive(self):\n"
        "        pass\n"
        "(skip,) = TestInductorOpInfo.test_comprehensive._op_overrides['abs']\n"
        "print(HAS_CUDA, skip.cls_name, skip.test_name, skip.device_type)\n"
    )
    printed = _printed_with_the_compat_plugin(code)
    assert printed == ["False", "TestInductorOpInfo", "test_comprehensive", "cpu"]
