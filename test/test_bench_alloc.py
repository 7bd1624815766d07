"""``make bench-alloc``: each allocator's environment, and the page faults
that make the allocator matter (tools/bench_alloc.py)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from tools import bench, bench_alloc

SETTINGS = {"GLIBC_TUNABLES": "x", "LD_PRELOAD": "y", "MALLOC_CONF": "z", "KEEP": "1"}


def test_default_clears_every_allocator_setting():
    assert bench_alloc.environment("default", SETTINGS) == {"KEEP": "1"}


def test_tuned_sets_the_benches_tunables():
    env = bench_alloc.environment("tuned", SETTINGS)
    assert env == {"KEEP": "1", "GLIBC_TUNABLES": bench.NO_PAGE_FAULT_TUNABLES}


def test_a_preloaded_allocator_names_its_library(monkeypatch):
    monkeypatch.setattr(bench_alloc, "_library", lambda soname: f"/lib/{soname}")
    env = bench_alloc.environment("jemalloc-kept", SETTINGS)
    assert env["LD_PRELOAD"] == "/lib/libjemalloc.so.2"
    assert env["MALLOC_CONF"] == bench_alloc.JEMALLOC_KEPT
    assert "MALLOC_CONF" not in bench_alloc.environment("tcmalloc", SETTINGS)


def test_a_missing_allocator_is_a_clear_error_and_changes_nothing(monkeypatch):
    monkeypatch.setattr(bench_alloc, "_library", lambda soname: None)
    base = dict(SETTINGS)
    with pytest.raises(bench_alloc.AllocatorMissing, match="libtcmalloc-minimal4"):
        bench_alloc.environment("tcmalloc", base)
    assert base == SETTINGS
    with pytest.raises(ValueError, match="unknown allocator"):
        bench_alloc.environment("mimalloc", base)


def test_the_table_compares_each_allocator_with_the_default():
    def row(allocator, ms):
        return {
            "workload": "w", "threads": 1, "allocator": allocator,
            "eager_ms": ms, "stock_ms": ms, "compiled_ms": ms / 2,
            "compiled_over_eager": 0.5, "compiled_over_stock": 0.5,
            "eager_faults": 16385.0, "compiled_faults": 0.0,
        }  # fmt: skip

    text = bench_alloc.markdown([row("default", 40.0), row("tuned", 8.0)], "h")
    row = "| w | 1 | tuned | 8.000 | 8.000 | 4.000 | 0.50 | 0.50 | 0.20 / 0.20 |"
    assert row in text


FAULTS = """
import resource, torch
x = torch.randn(1 << 24)  # a 64 MiB output per call
for _ in range(30):
    x * 2
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    x * 2
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 5)
"""


def _faults_per_call(allocator: str) -> float:
    import os

    env = bench_alloc.environment(allocator, dict(os.environ))
    out = subprocess.run(
        [sys.executable, "-c", FAULTS], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return float(out.stdout.split()[-1])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc")
def test_glibc_faults_a_large_output_in_on_every_call_unless_tuned():
    pages = (64 << 20) // 4096
    assert _faults_per_call("default") >= pages
    assert _faults_per_call("tuned") < pages / 100
