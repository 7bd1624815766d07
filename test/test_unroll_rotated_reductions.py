"""Unrolled loops for reductions with rotating accumulators.

``cpp.unroll_rotated_reductions`` (codegen/cpp_fusion/emitters/accumulators.py,
patch 0017) puts an unroll pragma for as many iterations as there are
accumulators right before the serial innermost vector loop of a reduction
whose accumulators rotate (``cpp.multi_accumulator_reductions``), so that
the compiler renames the accumulators instead of moving them every
iteration.  Each test compares with eager (compile_and_inspect) and checks
where the pragmas are.
"""

from __future__ import annotations

import re

import pytest
import torch
from compile_utils import compile_and_inspect, requires_vectors
from torch._inductor import cpp_builder
from torch._inductor.codegen.cpp_fusion.costs import ACCUMULATORS
from torch.testing import FileCheck

pytestmark = requires_vectors
ROTATION = re.compile(r"\{ auto rotated = \w+;")
UNROLL = (
    f"#pragma GCC unroll {ACCUMULATORS}"
    if cpp_builder.is_gcc()
    else f"#pragma unroll {ACCUMULATORS}"
)
# the pragma, then the for statement it applies to, nothing between
UNROLLED_LOOP = re.compile(re.escape(UNROLL) + r"\n\s*for\(")
NO_UNROLL = {"cpp.unroll_rotated_reductions": False}


def setup_module():
    torch.manual_seed(0)


def unrolled_loops(code: str) -> int:
    assert code.count(UNROLL) == len(UNROLLED_LOOP.findall(code))
    return code.count(UNROLL)


def test_layernorm_rotating_sums_are_unrolled_in_the_single_nest():
    x = torch.randn(8, 128, 768)  # BERT-base activations
    ln = torch.nn.LayerNorm(768)
    compiled = compile_and_inspect(ln, (x,))
    assert compiled.nests == [1]
    assert len(ROTATION.findall(compiled.code)) == 2  # mean, squared deviations
    assert unrolled_loops(compiled.code) == 2  # the output loop is not


def test_flag_off_keeps_the_rotation_without_pragma():
    x = torch.randn(8, 128, 768)
    ln = torch.nn.LayerNorm(768)
    compiled = compile_and_inspect(ln, (x,), extra_config=NO_UNROLL)
    assert len(ROTATION.findall(compiled.code)) == 2
    assert unrolled_loops(compiled.code) == 0


def test_softmax_unrolls_the_rotating_max_not_the_sum_of_exps():
    x = torch.randn(4, 64, 1024)  # 64 vectors or more per row, any ISA
    compiled = compile_and_inspect(lambda x: torch.softmax(x, -1), (x,))
    assert len(ROTATION.findall(compiled.code)) == 1
    assert unrolled_loops(compiled.code) == 1


def test_masked_tail_row_sum_is_unrolled_and_exact():
    x = torch.randn(5, 1000)  # vectors and a masked tail in the same loop
    compiled = compile_and_inspect(lambda x: x.sum(-1), (x,))
    assert unrolled_loops(compiled.code) == 1


def test_reduction_over_two_loops_unrolls_the_inner_one():
    # GroupNorm(4, 32): each group reduces over 8 channels x 576 pixels
    x = torch.randn(4, 32, 24, 24)
    compiled = compile_and_inspect(torch.nn.GroupNorm(4, 32), (x,))
    assert compiled.nests == [1]
    assert unrolled_loops(compiled.code) == 2


LAMBDA_OPEN, LAMBDA_CALL = "[&]() {", "}();"


@pytest.mark.parametrize("threads, lambdas", [(2, 2), (1, 0)])
def test_rotated_loops_in_a_parallel_region_run_in_a_lambda(threads, lambdas):
    # GCC drops unroll pragmas in the loops of an OpenMP region's outlined
    # function; the body of a lambda called in place is a function of its own
    x = torch.randn(8, 128, 768)  # 1024 rows: the row loop is parallel
    compiled = compile_and_inspect(
        torch.nn.LayerNorm(768), (x,), extra_config={"cpp.threads": threads}
    )
    assert ("#pragma omp parallel" in compiled.code) == (threads > 1)
    assert unrolled_loops(compiled.code) == 2
    assert compiled.code.count(LAMBDA_OPEN) == lambdas
    assert compiled.code.count(LAMBDA_CALL) == lambdas
    if lambdas:
        check = FileCheck().check("#pragma omp parallel").check("#pragma omp for")
        for _ in range(lambdas):
            check = check.check(LAMBDA_OPEN).check_next(UNROLL).check_next("for(")
            check = check.check(LAMBDA_CALL)
        check.run(compiled.code)


def test_parallel_reduction_loop_is_not_unrolled():
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        x = torch.randn(100003)  # one row: the reduction loop itself is parallel
        compiled = compile_and_inspect(torch.sum, (x,))
    finally:
        torch.set_num_threads(threads)
    assert ROTATION.findall(compiled.code)
    assert unrolled_loops(compiled.code) == 0


def test_collapsed_parallel_reduction_loop_is_not_unrolled():
    # rows that cannot merge (a slice of wider rows), fewer than the threads:
    # both reduction loops go under one `omp for collapse(2)`, and a pragma
    # between them is a compile error ("not enough for loops to collapse")
    x = torch.randn(3, 5007)[:, :5000]
    compiled = compile_and_inspect(
        torch.sum, (x,), extra_config={"cpp.threads": 4}
    )
    assert "collapse(2)" in compiled.code
    assert ROTATION.findall(compiled.code)
    assert unrolled_loops(compiled.code) == 0


def test_reductions_without_rotation_are_not_unrolled():
    x = torch.randn(64, 40)  # 5 vectors per row at most: one accumulator
    compiled = compile_and_inspect(lambda x: x.sum(-1), (x,))
    assert not ROTATION.findall(compiled.code)
    assert unrolled_loops(compiled.code) == 0


def test_gcc_builds_register_webs_only_under_the_flag():
    # Without -fweb, GCC keeps the rotation's moves in the unrolled copies.
    from torch._inductor import config
    from torch._inductor.cpp_builder import _get_optimization_cflags, get_cpp_compiler

    compiler = get_cpp_compiler()
    with config.patch({"cpp.unroll_rotated_reductions": True}):
        on, _ = _get_optimization_cflags(compiler)
    with config.patch({"cpp.unroll_rotated_reductions": False}):
        off, _ = _get_optimization_cflags(compiler)
    assert "fweb" not in off
    assert ("fweb" in on) == cpp_builder.is_gcc()
    assert [flag for flag in on if flag != "fweb"] == off


def test_a_compiler_without_unroll_pragmas_gets_none(monkeypatch):
    # MSVC (neither GCC nor Clang) keeps the moves rather than see a pragma
    # of another compiler
    from torch._inductor.codegen.cpp_fusion.emitters.accumulators import _unroll_pragma

    monkeypatch.setattr(cpp_builder, "is_gcc", lambda: False)
    monkeypatch.setattr(cpp_builder, "is_clang", lambda: False)
    assert _unroll_pragma(ACCUMULATORS) is None
    monkeypatch.setattr(cpp_builder, "is_clang", lambda: True)
    assert _unroll_pragma(ACCUMULATORS) == f"#pragma unroll {ACCUMULATORS}"
