"""The fuzzer's branch reach (tools/fuzz/branch_reach.py): how branches are
named and counted per program, and the baseline check of `make test`'s
campaign."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import coverage
from coverage.python import PythonFileReporter

from tools.fuzz import branch_reach
from tools.fuzz.check import case_config
from tools.fuzz.program import FuzzCase

DECISION = textwrap.dedent(
    """\
    def decide(x):
        if x > 0:
            return "split"
        return "stock"
    """
)


class _Program:
    def __init__(self, digest: str):
        self._digest = digest

    def digest(self) -> str:
        return self._digest


def _measure(
    tmp_path: Path, calls, source: str = DECISION
) -> tuple[coverage.Coverage, Path]:
    """Run ``decide`` of ``source`` under coverage, one context per batch of
    programs."""
    path = tmp_path / "decision.py"
    path.write_text(source)
    namespace: dict = {}
    cov = coverage.Coverage(
        data_file=str(tmp_path / ".coverage"), branch=True, include=[str(path)]
    )
    cov.start()
    exec(compile(source, str(path), "exec"), namespace)
    for digests, x in calls:
        branch_reach.switch_context([_Program(d) for d in digests])
        namespace["decide"](x)
    cov.stop()
    cov.save()
    return cov, path


def test_branches_are_named_by_function_and_source_not_line(tmp_path):
    cov, path = _measure(tmp_path, [])
    keys = [b.key for b in branch_reach.branches_of(path, "decision.py", None, cov)]
    assert keys == [
        'decision.py::decide: if x > 0: -> return "split"',
        'decision.py::decide: if x > 0: -> return "stock"',
    ]
    # a line added above moves the branch, not its name
    path.write_text("# a comment\n" + DECISION)
    moved = branch_reach.branches_of(path, "decision.py", None, cov)
    assert [b.key for b in moved] == keys and moved[0].line == 3


def test_each_branch_counts_the_programs_that_took_it(tmp_path):
    # a batch of three programs takes the split, one program the stock path
    cov, path = _measure(tmp_path, [(["a", "b", "c"], 1), (["d"], -1)])
    reporter = PythonFileReporter(str(path), coverage=cov)
    taken = branch_reach.taken_by_programs(cov.get_data(), path, reporter)
    by_target = {
        b.target: taken.get((b.line, b.to), 0)
        for b in branch_reach.branches_of(path, "decision.py", None, cov)
    }
    assert by_target == {'return "split"': 3, 'return "stock"': 1}


WITH_EXIT = textwrap.dedent(
    """\
    import contextlib

    def decide(x):
        for attempt in range(2):
            with contextlib.nullcontext():
                if x > attempt:
                    return "split"
        return "stock"
    """
)


def test_a_branch_out_of_a_with_block_counts_as_taken(tmp_path):
    # Python 3.11 traces the jump out of a ``with`` at the ``with`` line; the
    # report must fold it into the branch's own arc, as coverage's report does
    # x = 0: the test fails twice, leaving the with block each time
    cov, path = _measure(tmp_path, [(["a"], 0)], WITH_EXIT)
    reporter = PythonFileReporter(str(path), coverage=cov)  # fresh: not parsed
    taken = branch_reach.taken_by_programs(cov.get_data(), path, reporter)
    by_target = {
        b.target: taken.get((b.line, b.to), 0)
        for b in branch_reach.branches_of(path, "decision.py", None, cov)
        if b.source == "if x > attempt:"
    }
    assert by_target == {'return "split"': 0, "for attempt in range(2):": 1}


def _data(**programs: int) -> dict:
    return {
        "programs": 4,
        "branches": [{"key": k, "programs": n} for k, n in programs.items()],
    }


def test_the_baseline_check_names_a_branch_no_longer_reached(tmp_path):
    baseline = tmp_path / "baseline.json"
    branch_reach.write_baseline(_data(split=3, stock=1, never=0), baseline, "a run")
    assert json.loads(baseline.read_text())["reached"] == ["split", "stock"]
    assert branch_reach.check_baseline(_data(split=2, stock=1), baseline) == []
    assert branch_reach.check_baseline(_data(split=2, stock=0), baseline) == ["stock"]
    # a machine without a baseline checks nothing
    missing = tmp_path / "none.json"
    assert branch_reach.check_baseline(_data(split=0), missing) == []


def test_no_baseline_from_a_run_of_no_program(tmp_path):
    baseline = tmp_path / "baseline.json"
    branch_reach.write_baseline(_data(split=3), baseline, "a run")
    before = baseline.read_text()
    empty = {"programs": 0, "branches": [{"key": "split", "programs": 0}]}
    try:
        branch_reach.write_baseline(empty, baseline, "nothing ran")
    except ValueError as error:
        assert "no program" in str(error)
    else:
        raise AssertionError("an empty baseline was written")
    assert baseline.read_text() == before


def test_the_branches_command_refuses_a_directory_without_coverage(tmp_path, capsys):
    from tools.fuzz.__main__ import main

    assert main(["branches", str(tmp_path / "missing")]) == 2
    assert "no coverage data" in capsys.readouterr().err


def test_a_case_without_one_flag_compiles_every_other_flag_on():
    case = FuzzCase(source="", inputs=(), flags="without:outer_block_fusion")
    assert case_config(case, overlay=True)["cpp.outer_block_fusion"] is False
    assert "cpp.outer_block_fusion" not in case_config(case, overlay=False)


def test_the_flag_sets_leave_out_every_flag_of_the_release():
    from fusion_overlay.flags import NAMES
    from hypothesis import HealthCheck, given, settings

    from tools.fuzz.strategy import flag_sets

    drawn: set[str] = set()

    @settings(max_examples=600, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(flag_sets())
    def collect(flags):
        drawn.add(flags)

    collect()
    assert drawn == {"all", "shipped", *(f"without:{name}" for name in NAMES)}
