"""Several accumulators for long horizontal vector reductions.

``cpp.multi_accumulator_reductions`` (codegen/cpp_fusion/emitters/accumulators.py)
gives a vectorized sum/max/min along a row four accumulators that rotate
every iteration.  Each test compares with eager and checks the generated
loop body: how many reductions rotate, and whether stock's cascade helper
is still there.
"""

from __future__ import annotations

import re

import pytest
import torch
from compile_utils import (
    NO_CACHES,
    compile_and_inspect,
    compile_and_run,
    overlay_flags,
    requires_vectors,
    vector_lanes,
)
from torch._inductor import config
from torch._inductor.codegen.cpp_fusion.emitters.accumulators import CASCADE_CHUNK
from torch._inductor.codegen.cpp_fusion.costs import (
    ACCUMULATORS,
    MIN_ITERATIONS_PER_ACCUMULATOR,
)

ROTATION = re.compile(r"\{ auto rotated = (\w+);")
# float32 lanes of the vector kernels here (16 with AVX512, 8 with AVX2)
VEC = vector_lanes()
# the accumulators rotate in vector reductions only
pytestmark = requires_vectors


def setup_module():
    torch.manual_seed(0)


def rotated_accumulators(code: str) -> list[str]:
    """Accumulators that rotate; a parallel reduction's per-thread copies
    (``acc_local``) count as their accumulator."""
    return [name.removesuffix("_local") for name in ROTATION.findall(code)]


def row_sum(x):
    return x.sum(-1)


def test_long_row_sum_rotates_four_accumulators():
    x = torch.randn(5, 1000)  # 62 vectors and a masked tail of 8
    patched = compile_and_inspect(row_sum, (x,))
    stock = compile_and_inspect(row_sum, (x,), overlay=False)
    assert rotated_accumulators(patched.code) == ["tmp_acc0_vec"]
    slots = set(re.findall(r"tmp_acc0_vec_slot\d+", patched.code))
    assert len(slots) == ACCUMULATORS - 1
    assert rotated_accumulators(stock.code) == []


def test_short_row_keeps_one_accumulator():
    short = ACCUMULATORS * MIN_ITERATIONS_PER_ACCUMULATOR * VEC - VEC
    x = torch.randn(5, short)
    assert rotated_accumulators(compile_and_inspect(row_sum, (x,)).code) == []


def test_sum_replaces_a_cascade_that_would_not_cascade():
    x = torch.randn(3, 25000)  # stock: CascadeSumHelper over 1562 vectors, depth 0
    stock = compile_and_inspect(row_sum, (x,), overlay=False)
    patched = compile_and_inspect(row_sum, (x,))
    assert "cascade_sum_combine" in stock.code
    assert "cascade_sum_combine" not in patched.code
    assert rotated_accumulators(patched.code) == ["tmp_acc0_vec"]


def test_rows_longer_than_the_cascade_chunk_keep_cascade_summation():
    x = torch.randn(2, ACCUMULATORS * CASCADE_CHUNK * VEC + 10 * VEC)
    patched = compile_and_inspect(row_sum, (x,))
    assert rotated_accumulators(patched.code) == []
    assert "cascade_sum_combine" in patched.code


def _row_sum_errors_in_ulps(overlay: bool, threads: int, inputs) -> torch.Tensor:
    """Each row sum's error against float64, in units of the result's last
    place, with the kernel compiled once for ``threads`` threads."""
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: x.sum(-1), dynamic=False)
    with config.patch({**overlay_flags(overlay), **NO_CACHES, "cpp.threads": threads}):
        code = torch._inductor.utils.run_and_get_cpp_code(compiled, inputs[0])[1]
    errors = []
    for x in inputs:
        exact = x.double().sum(-1)
        nearest = exact.float()
        ulp = (torch.nextafter(nearest, nearest * 2) - nearest).double()
        errors.append((compiled(x).double() - exact).abs() / ulp)
    return torch.cat(errors), code


@pytest.mark.parametrize("threads", [1, 16, 64])
def test_sum_is_no_less_accurate_than_stock(threads):
    # Four long rows make a parallel reduction split each row over the
    # threads (at 64, about 29 vectors a thread).  There both kernels land
    # within about one unit in the last place, where comparing one row (or
    # a mean) compares the final rounding; so over 64 rows the patched
    # error must be no worse than stock's or within the rounding floor.
    # At 1 thread stock's single chain errs by several units: a real gain.
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        gen = torch.Generator().manual_seed(threads)
        inputs = [torch.rand(4, 30000, generator=gen) * 100 for _ in range(16)]
        stock, _ = _row_sum_errors_in_ulps(False, threads, inputs)
        patched, code = _row_sum_errors_in_ulps(True, threads, inputs)
    finally:
        torch.set_num_threads(previous)
    assert rotated_accumulators(code)
    assert patched.mean() <= max(stock.mean() * 1.1, 1.0)
    assert patched.max() <= max(stock.max(), 2.0)
    if threads == 1:
        assert patched.mean() < stock.mean() * 0.75


def test_max_and_min_propagate_nan_across_accumulators():
    x = torch.randn(6, 777)
    x[2, 500] = float("nan")  # lands in one accumulator of four

    def extremes(x):
        return x.amax(-1), x.amin(-1)

    actual, compiled = compile_and_run(extremes, (x,))
    assert len(rotated_accumulators(compiled.code)) == 2
    for got, want in zip(actual, extremes(x), strict=True):
        torch.testing.assert_close(got, want, equal_nan=True)
    assert actual[0][2].isnan() and actual[1][2].isnan()


def test_softmax_rotates_the_max_but_not_the_sum_of_exps():
    # The sum's body computes exp: bound by the exp, not by the add chain.
    x = torch.randn(16, 4096)
    compiled = compile_and_inspect(lambda x: torch.softmax(x, -1), (x,))
    assert len(rotated_accumulators(compiled.code)) == 1
    assert "at::vec::maximum(tmp_acc0_vec" in compiled.code


def test_bfloat16_rows_accumulate_in_float_with_rotation():
    x = torch.randn(6, 3000).bfloat16()
    compiled = compile_and_inspect(row_sum, (x,))
    assert rotated_accumulators(compiled.code) == ["tmp_acc0_vec"]


def test_parallel_reduction_rotates_per_thread_accumulators():
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        x = torch.randn(100003)  # one row: the reduction loop itself is parallel
        compiled = compile_and_inspect(torch.sum, (x,))
    finally:
        torch.set_num_threads(threads)
    assert "tmp_acc0_vec_local" in ROTATION.findall(compiled.code)
    merge = "tmp_acc0_vec_local = tmp_acc0_vec_local + tmp_acc0_vec_slot1"
    assert merge in compiled.code


def test_dynamic_rows_keep_stock_code():
    x = torch.randn(5, 3000)
    compiled = compile_and_inspect(row_sum, (x,), dynamic=True)
    assert rotated_accumulators(compiled.code) == []


def var_mean(x):
    return torch.var_mean(x, -1)


def test_welford_keeps_one_accumulator():
    # Rotated Welford slots measured slower (var_mean over (512, 2048): 1.29x)
    # var_mean over 2000 lowers to Welford (4 rows: too few for 0004's
    # two steps under the fused loop)
    x = torch.randn(4, 2000)
    compiled = compile_and_inspect(var_mean, (x,))
    assert "welford_combine" in compiled.code
    assert rotated_accumulators(compiled.code) == []


def test_layernorm_statistics_rotate_inside_the_single_nest():
    x = torch.randn(37, 1000)  # up to 1024: two-step variance, two sums
    compiled = compile_and_inspect(torch.nn.LayerNorm(1000), (x,))
    assert compiled.nests == [1]
    assert len(rotated_accumulators(compiled.code)) == 2


def test_groupnorm_statistics_rotate_inside_the_single_nest():
    gn = torch.nn.GroupNorm(4, 32)
    x = torch.randn(4, 32, 24, 24)  # 16 groups of 8 x 576 = 4608: two-step
    compiled = compile_and_inspect(gn, (x,))
    assert compiled.nests == [1]
    assert len(rotated_accumulators(compiled.code)) == 2  # mean, squared deviations
