"""tools/bench_counts.py: which variant is compiled, and what is marked."""

from __future__ import annotations

import pytest

from tools import bench_counts
from fusion_overlay.flags import ENV_VARS


def test_stock_turns_every_flag_off_and_patched_takes_the_defaults(
    tmp_path, monkeypatch
):
    monkeypatch.setenv(ENV_VARS[0], "0")  # a caller's setting must not leak in
    stock = bench_counts._env("stock", {}, tmp_path)
    patched = bench_counts._env("patched", {}, tmp_path)
    assert all(stock[var] == "0" for var in ENV_VARS)
    assert not any(var in patched for var in ENV_VARS)
    assert stock["TORCHINDUCTOR_CACHE_DIR"] != patched["TORCHINDUCTOR_CACHE_DIR"]
    assert stock["OMP_NUM_THREADS"] == patched["OMP_NUM_THREADS"] == "1"


@pytest.mark.slow  # two compiles, each in a fresh process: make test-slow
def test_each_variant_compiles_in_its_own_process(tmp_path):
    base = {"ATEN_CPU_CAPABILITY": "avx2"}  # as under valgrind; no valgrind needed
    stock = bench_counts.generated_code(
        "main", "groupnorm_seed", "stock", base, tmp_path
    )
    patched = bench_counts.generated_code(
        "main", "groupnorm_seed", "patched", base, tmp_path
    )
    # the seed GroupNorm: stock's 3 nests, one fused nest as shipped
    assert (stock["nests"], patched["nests"]) == (3, 1)
    assert stock["kernels"] != patched["kernels"]


def test_more_instructions_or_misses_are_marked():
    counts = {"Ir": 100.0, "kernel_Ir": 50.0, "D1_misses": 10.0, "LL_misses": 5.0}
    rows = [
        {"workload": "same", "nests_stock": 2, "nests_patched": 2, "same_code": True},
        {
            "workload": "worse", "nests_stock": 3, "nests_patched": 1,
            "same_code": False, "stock": counts, "patched": counts,
            "Ir_ratio": 1.2, "I1_misses_ratio": 3.0, "D1_misses_ratio": 0.5,
            "LL_misses_ratio": 0.9,
            "worse": ["Ir"], "unmodelled": ["prefetch"],
        },
    ]  # fmt: skip
    table = bench_counts.markdown(rows, "main", 3)
    assert "| same | 2→2 | same |" in table
    row = "| 100 | 1.200 | 3.000 | 0.500 | 5 | 0.900 | more Ir (uses prefetch) |"
    assert row in table
