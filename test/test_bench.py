"""make bench times what it says it times.

An earlier bench captured the generated code with run_and_get_cpp_code,
which resets dynamo: the stock variant compiled first was dropped, and the
timing loop recompiled it under the default (patched) config, so "stock"
timed patched code.  These tests pin the fix.
"""

from __future__ import annotations

import pytest
import torch

from tools import bench
from compile_utils import vector_lanes


@pytest.fixture
def layernorm():
    torch._dynamo.reset()
    return torch.nn.LayerNorm(1000), (torch.randn(37, 1000),)


def test_stock_and_patched_stay_compiled_while_timed(layernorm):
    fn, args = layernorm
    stock, stock_nests, _ = bench._compile(fn, args, overlay=False)
    patched, patched_nests, _ = bench._compile(fn, args, overlay=True)
    # without vectors no tiling keeps stock's LayerNorm apart: one nest too
    assert (stock_nests, patched_nests) == ((4, 1) if vector_lanes() else (1, 1))
    variants = {"stock": stock, "patched": patched}
    times = bench._time_interleaved(variants, [args], reps=2)
    assert [len(t) for t in times.values()] == [2, 2]


def test_generated_code_is_timed_inside_the_compiled_call(layernorm):
    fn, args = layernorm
    patched, _, _ = bench._compile(fn, args, overlay=True)
    generated: dict[str, list[float]] = {}
    times = bench._time_interleaved(
        {"eager": fn, "patched": patched}, [args], reps=3, generated=generated
    )
    assert generated["eager"] == [0.0, 0.0, 0.0]
    # the guards and the AOT wrapper run outside the generated code
    assert all(0 < g < t for g, t in zip(generated["patched"], times["patched"]))


def test_a_recompile_while_timing_is_an_error(layernorm):
    fn, args = layernorm
    stock, _, _ = bench._compile(fn, args, overlay=False)
    torch._dynamo.reset()  # what the old code capture did behind our back
    with pytest.raises(RuntimeError, match="recompiled"):
        bench._time_interleaved({"stock": stock}, [args], reps=1)


def test_input_copies_cover_several_page_offsets():
    x = torch.randn(16, 1024)  # 64 KiB: from the heap under either allocator
    copies = bench._staggered_copies((x,))
    assert all(torch.equal(c, x) for (c,) in copies)
    offsets = {c.data_ptr() % 4096 for (c,) in copies}
    assert len(offsets) >= bench.INPUT_COPIES // 2


def test_paired_ratio_is_the_median_of_per_repetition_ratios():
    assert bench.paired_ratio([2.0, 3.0, 10.0], [1.0, 3.0, 5.0]) == 2.0


def test_shapes_suite_builds_each_workload_under_a_unique_name():
    workloads = bench.SUITES["shapes"][1]()
    names = [w.name for w in workloads]
    assert len(set(names)) == len(names) == 22
    for workload in workloads:
        fn, (x,), min_bytes = workload.make()
        assert min_bytes == 2 * x.numel() * x.element_size()
        assert callable(fn)
    groupnorm = next(w for w in workloads if w.name == "groupnorm8_8x64x64x64")
    fn, (x,), _ = groupnorm.make()
    assert fn.num_groups == 8 and x.shape == (8, 64, 64, 64)
