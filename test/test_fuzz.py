"""The fusion fuzzer (tools/fuzz): its parts, the `ci` profile, a mutant it must catch.

The `ci` run compiles 32 random programs twice each (overlay flags off
and on) in two worker processes; the mutant test runs the fuzzer against a
temporary copy of the installed cpp_outer_loop_split.py with an off-by-one,
imported in place of the real module by a sitecustomize on PYTHONPATH.  The
real tree and .venv are never modified.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import REPO_ROOT
from hypothesis import HealthCheck, given, settings

from tools.fuzz import check
from tools.fuzz.check import CheckResult, check_case, compare
from tools.fuzz.overlay_coverage import site_root
from tools.fuzz.program import FuzzCase, InputSpec
from tools.fuzz.repro import known_crashes, signature, write_repro
from tools.fuzz.runner import _crashed_workers, case_to_json, run_fuzz
from tools.fuzz.strategy import fuzz_cases

SPLIT_MODULE = "torch._inductor.codegen.cpp_outer_loop_split"
SPLIT_FILE = "torch/_inductor/codegen/cpp_outer_loop_split.py"
# Off by one in the exact split: the consumer loops over one slice too few per
# outer iteration, so part of its output is never written (reads stay in bounds).
MUTATION = (
    "remainder = size // (target // before)\n",
    "remainder = size // (target // before) - 1\n",
)

RELU_SOURCE = (
    "import torch\nimport torch.nn.functional as F\n\n\n"
    "def program(x0):\n    v1 = torch.relu(x0)\n    return (v1,)\n"
)


# --- parts (no compiling) ---------------------------------------------------


@pytest.mark.parametrize(
    "layout, contiguous",
    [("contiguous", True), ("channels_last", False), ("transposed", False),
     ("strided", False), ("offset", False), ("expanded", False)],
)  # fmt: skip
def test_input_layouts(layout, contiguous):
    spec = InputSpec((3, 4, 5, 6), layout=layout)
    a = spec.make(torch.Generator().manual_seed(1))
    b = spec.make(torch.Generator().manual_seed(1))
    meta = spec.make(None, device="meta")
    assert a.shape == meta.shape == (3, 4, 5, 6)
    assert a.stride() == meta.stride()
    assert a.is_contiguous() is contiguous
    assert torch.equal(a, b)  # inputs come from the seed


@settings(max_examples=120, derandomize=True, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))  # fmt: skip
@given(fuzz_cases())
def test_generated_programs_run_eagerly(case):
    out = case.build()(*case.make_inputs())
    assert isinstance(out, tuple) and all(isinstance(t, torch.Tensor) for t in out)
    assert case.source.startswith("import torch\n")
    assert case.digest() == FuzzCase(**case.__dict__).digest()


def test_compare_is_relative_to_magnitude():
    want = (torch.tensor([1000.0, 1.0]),)
    assert compare((torch.tensor([1000.05, 1.0]),), want, 1e-4).ok  # 0.05 < 1e-4 * 1000
    assert not compare((torch.tensor([1000.0, 1.2]),), want, 1e-4).ok
    assert not compare((torch.tensor([1000.0, float("nan")]),), want, 1e-4).ok
    assert not compare((torch.zeros(3),), (torch.zeros(2),), 1e-4).ok


@pytest.mark.parametrize(
    "off_delta, on_delta, status",
    [(0.0, 0.0, "ok"), (0.0, 0.5, "ours"), (0.5, 0.5, "stock"), (0.5, 0.0, "stock"),
     (0.0, "raise", "ours"), ("raise", "raise", "stock"), (0.0, 1e-4, "ours"),
     (4e-5, -4e-5, "noise")],
)  # fmt: skip
def test_classification(monkeypatch, off_delta, on_delta, status):
    """Flags on is blamed only where flags off agrees with eager, and only when
    it is less accurate than flags off (float64 reference), not just different."""

    def fake_compile_and_run(fn, args, *, overlay, dynamic, extra_config):
        delta = on_delta if overlay else off_delta
        if delta == "raise":
            raise RuntimeError("C++ compile error")
        outputs = tuple(t + delta for t in fn(*args))
        return outputs, _FakeCompiled()

    monkeypatch.setattr(check.compile_utils, "compile_and_run", fake_compile_and_run)
    result = check_case(FuzzCase(RELU_SOURCE, (InputSpec((4, 5)),)))
    assert result.status == status, result


class _FakeCompiled:
    nests, total_nests, outer_fused, retiled, reordered, kernels = [1], 1, 0, 0, 0, []
    code = ""


def test_repro_file_rebuilds_the_case(tmp_path):
    case = FuzzCase(
        RELU_SOURCE, (InputSpec((2, 3), "bfloat16", "transposed"),), 7, True, "seed"
    )
    path = write_repro(
        case, "flags on disagrees with flags off", "detail one; detail two", tmp_path
    )
    assert path.name == f"test_fuzz_{case.digest()}.py"
    spec = importlib.util.spec_from_file_location("fuzz_repro", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.CASE == case
    assert hasattr(module, f"test_fuzz_{case.digest()}")


def test_known_crashes_are_xfail_repros_of_crashes(tmp_path):
    case = FuzzCase(RELU_SOURCE, (InputSpec((2, 3)),))
    other = FuzzCase(RELU_SOURCE, (InputSpec((3, 3)),))
    crash = "InductorError: AssertionError: buf11"
    write_repro(case, "crash with flags on", crash, tmp_path, xfail="known bug")
    write_repro(other, "crash with flags on", "RuntimeError: 3 != 4", tmp_path)
    # buffer numbers differ from program to program
    assert signature("crash with flags on", "InductorError: AssertionError: buf5") in (
        known_crashes(tmp_path)
    )
    assert len(known_crashes(tmp_path)) == 1  # the repro without xfail is not known


def test_a_dead_worker_leaves_a_repro_of_its_last_program(tmp_path):
    """A segfault in generated code kills the worker; its last program is kept."""
    case = FuzzCase(RELU_SOURCE, (InputSpec((2, 3)),))
    records = [
        {"type": "example", "worker": 0},
        {"type": "start", "worker": 0, "case": case_to_json(case)},
    ]
    dead = subprocess.CompletedProcess([], returncode=-11)
    crashed = _crashed_workers([dead], records, tmp_path, tmp_path / "repros")
    assert len(crashed) == 1 and "signal 11" in crashed[0]
    assert (tmp_path / "repros" / f"test_fuzz_{case.digest()}.py").exists()


# --- the ci profile ---------------------------------------------------------


def test_fuzz_ci_profile(tmp_path):
    """`make test`'s share of fuzzing: no overlay failure; the overlay was reached."""
    lines: list[str] = []
    summary = run_fuzz("ci", seed=0, workers=min(2, os.cpu_count() or 1),
                       out_dir=tmp_path / "run", log=lines.append)  # fmt: skip
    report = "\n".join(lines)
    print(report)
    assert summary.ok, report
    stats = summary.stats()
    assert stats["checked"] >= 20, report
    reached = stats["programs_with"]
    assert reached.get("code_differs", 0) > 0, report
    assert reached.get("splits", 0) + reached.get("retiled", 0) > 0, report


# --- a broken overlay must be caught ----------------------------------------


def _mutant_env(tmp_path: Path) -> dict[str, str]:
    """PYTHONPATH with a sitecustomize that imports a mutated split module."""
    installed = (site_root() / SPLIT_FILE).read_text()
    original, mutated = MUTATION
    assert installed.count(original) == 1, (
        f"the mutation site moved: update MUTATION in {__file__} to an off-by-one "
        f"in {SPLIT_FILE} that the ci strategy still reaches"
    )
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "mutant_split.py").write_text(installed.replace(original, mutated))
    (shadow / "sitecustomize.py").write_text(
        textwrap.dedent(
            f"""\
            import importlib.abc
            import importlib.util
            import sys


            class MutantFinder(importlib.abc.MetaPathFinder):
                def find_spec(self, fullname, path=None, target=None):
                    if fullname == {SPLIT_MODULE!r}:
                        return importlib.util.spec_from_file_location(
                            fullname, {str(shadow / "mutant_split.py")!r}
                        )
                    return None


            sys.meta_path.insert(0, MutantFinder())
            """
        )
    )
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(shadow), str(REPO_ROOT)])}


def _run(cmd: list[str], env: dict, timeout: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd,
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_fuzzer_catches_a_broken_split(tmp_path):
    env = _mutant_env(tmp_path)
    repros = tmp_path / "repros"
    fuzz = _run(
        [sys.executable, "-m", "tools.fuzz", "run", "--profile", "ci", "--workers", "1",
         "--seed", "0", "--examples", "24", "--out", str(tmp_path / "run"),
         "--repro-dir", str(repros)],
        env, timeout=600,
    )  # fmt: skip
    output = fuzz.stdout + fuzz.stderr
    assert fuzz.returncode == 1, output
    assert "[flags on disagrees with flags off]" in output, output
    files = sorted(repros.glob("test_fuzz_*.py"))
    assert len(files) == 1, output
    assert "F.group_norm(" in files[0].read_text(), files[0].read_text()

    # The shrunk repro is a standalone test: it fails with the mutant, passes without.
    pytest_cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        str(files[0]),
    ]
    with_mutant = _run(pytest_cmd, env, timeout=300)
    assert with_mutant.returncode == 1, with_mutant.stdout + with_mutant.stderr
    clean_env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    without = _run(pytest_cmd, clean_env, timeout=300)
    assert without.returncode == 0, without.stdout + without.stderr


def test_check_result_flags():
    assert CheckResult("ours", "crash with flags on").crashed
    assert CheckResult("ours", "flags on disagrees with flags off").failed
    assert not CheckResult("stock", "crash with flags on and off").failed
