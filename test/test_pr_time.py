"""tools/pr_time.py: upstream's PR-time CPU benchmarks, stock against
patched (the valgrind runs themselves are make bench-compile-time's)."""

from __future__ import annotations

import sys
import textwrap

import pytest

from tools import pr_time

BASE = textwrap.dedent(
    """\
    class BenchmarkBase:
        def __init__(self, category, device):
            self._category = category

        def collect_all(self):
            raise AssertionError("upstream's counting loop needs a CPU counter")

        def append_results(self, path):
            raise AssertionError("nothing is written")
    """
)

FAKE = textwrap.dedent(
    """\
    import sys
    from benchmark_base import BenchmarkBase

    LOG = []

    class Benchmark(BenchmarkBase):
        def __init__(self, name):
            super().__init__(category=name, device="cpu")

        def name(self):
            return self._category

        def _prepare_once(self):
            LOG.append(("once", self.name()))

        def _prepare(self):
            LOG.append(("prepare", self.name()))

        def _work(self):
            LOG.append(("work", self.name()))

    def main():
        assert len(sys.argv) == 2  # upstream's result path
        for name in ("fake_gpu", "fake_cpu"):
            Benchmark(name).collect_all().append_results(sys.argv[1])
    """
)


@pytest.fixture
def fake_src(tmp_path, monkeypatch):
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "benchmark_base.py").write_text(BASE)
    (tmp_path / "benchmarks" / "fake_bench.py").write_text(FAKE)
    (tmp_path / "expected_results.csv").write_text(
        "fake_cpu,compile_time_instruction_count,3324000000,0.015\n\n\n\n"
        "fake_gpu,compile_time_instruction_count,100,0.2\n"
    )
    monkeypatch.setitem(pr_time.CPU_BENCHMARKS, "fake_cpu", "fake_bench")
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    yield tmp_path
    for name in ("benchmark_base", "fake_bench"):
        sys.modules.pop(name, None)
    if str(tmp_path / "benchmarks") in sys.path:
        sys.path.remove(str(tmp_path / "benchmarks"))


def test_the_child_runs_only_the_named_benchmark_as_often_as_asked(fake_src):
    pr_time.child(fake_src, "fake_cpu", 2)
    log = sys.modules["fake_bench"].LOG
    assert log == [
        ("once", "fake_cpu"),
        ("prepare", "fake_cpu"),
        ("work", "fake_cpu"),
        ("prepare", "fake_cpu"),
        ("work", "fake_cpu"),
    ]


def test_margins_come_from_expected_results(fake_src):
    assert pr_time.expected_margins(fake_src)["fake_cpu"] == (3324000000, 0.015)


def test_a_directory_without_the_benchmarks_is_refused(tmp_path, capsys):
    assert pr_time.main(["--src", str(tmp_path), "--only", "symint_sum"]) == 2
    err = capsys.readouterr().err
    assert "PR_TIME_SRC" in err and "benchmark_base.py" in err


def test_the_table_says_whether_each_ratio_is_within_its_margin():
    rows = [
        pr_time.compare("a", {"stock": 10**9, "patched": 1_010_000_000}, 0.015),
        pr_time.compare("b", {"stock": 10**9, "patched": 1_020_000_000}, 0.015),
    ]
    assert [r["within"] for r in rows] == [True, False]
    table = pr_time.markdown(rows).splitlines()
    assert table[2].endswith("| 1.010 | +1.5% | yes |")
    assert table[3].endswith("| 1.020 | +1.5% | **no** |")
