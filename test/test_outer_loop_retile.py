"""Outer-loop fusion with re-tiled kernels and split consumer loops.

Each test compiles a normalization-like program, checks it against eager and
checks the loop structure of the generated C++: with
``cpp.outer_loop_fusion_retile`` the whole program runs as one loop nest over
rows (or groups).  The flags-off numbers are stock torch 2.13.0's; the tests
that compile both ways show the difference the overlay makes.
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from torch._inductor import config, metrics
from torch._inductor.codegen.cpp_fusion import costs
from compile_utils import compile_and_run
from compile_utils import compile_shipped_and_inspect as compile_and_inspect
from compile_utils import LOOP_ORDERING_OFF, requires_vectors, SEED_CONFIG
from compile_utils import vector_lanes
from compile_utils import recording, run_independent
from torch.testing import FileCheck


from torch._inductor.codegen.cpp_fusion.outer_loop.split import split_for_outer_extent

TWO_THREADS = {"cpp.threads": 2}


def setup_module():
    torch.manual_seed(0)


def layer_norm(width: int, dtype=torch.float32):
    return torch.nn.LayerNorm(width).to(dtype)


# --- stock vs patched: the reported cases ---------------------------------


@requires_vectors  # stock's fallback comes from vector tiling
def test_layernorm_one_nest_instead_of_four():
    ln = layer_norm(1000)  # 1000 = 62 vectors + a tail of 8
    x = torch.randn(37, 1000)
    stock = compile_and_inspect(ln, (x,), overlay=False)
    patched = compile_and_inspect(ln, (x,))
    assert stock.nests == [4]
    assert patched.nests == [1]
    assert patched.retiled == 1


@requires_vectors  # stock's fallback comes from vector tiling
def test_seed_groupnorm_with_seed_config_one_nest_instead_of_seven():
    gn = torch.nn.GroupNorm(2, 16)
    x = torch.randn(2, 16, 32, 32)
    # two threads: the retile's cost guard weighs the groups per thread
    config = {**SEED_CONFIG, **TWO_THREADS}
    stock = compile_and_inspect(gn, (x,), overlay=False, extra_config=config)
    patched = compile_and_inspect(gn, (x,), extra_config=config)
    assert stock.nests == [7]
    assert patched.nests == [1]
    assert patched.retiled == 1


def test_seed_groupnorm_default_config_one_nest():
    gn = torch.nn.GroupNorm(2, 16)
    patched = compile_and_inspect(
        gn, (torch.randn(2, 16, 32, 32),), extra_config=TWO_THREADS
    )
    assert patched.nests == [1]


def _affine_groupnorm():
    gn = torch.nn.GroupNorm(4, 32)
    torch.nn.init.normal_(gn.weight)
    torch.nn.init.normal_(gn.bias)
    return gn


def test_groupnorm_affine_odd_sizes_split_into_groups():
    x = torch.randn(2, 32, 7, 9)
    patched = compile_and_inspect(
        _affine_groupnorm(), (x,), extra_config=LOOP_ORDERING_OFF
    )
    assert patched.nests == [1]
    # the affine output loop was split from (N*C, H*W) to (N*G, C/G, H*W)
    assert "x0<static_cast<int64_t>(8L)" in patched.code


def test_groupnorm_affine_odd_sizes_share_open_loops():
    # Under loop ordering after fusion the loops stay (N, G, ...) until
    # fusion: the statistics and the affine output share them, no split.
    x = torch.randn(2, 32, 7, 9)
    patched = compile_and_inspect(_affine_groupnorm(), (x,))
    assert patched.nests == [1]
    FileCheck().check("x0<static_cast<int64_t>(2L)").check(
        "x1<static_cast<int64_t>(4L)"
    ).check("x2<static_cast<int64_t>(8L)").run(patched.code)


@requires_vectors  # stock's fallback comes from vector tiling
def test_bias_gelu_layernorm_one_nest_and_erf_once():
    ln = layer_norm(768)
    bias = torch.randn(768)

    def bias_gelu_layernorm(x):
        return ln(F.gelu(x + bias))

    x = torch.randn(16, 768)
    stock = compile_and_inspect(bias_gelu_layernorm, (x,), overlay=False)
    patched = compile_and_inspect(bias_gelu_layernorm, (x,))
    assert stock.nests == [4]
    assert patched.nests == [1]
    # stock inlines GELU into each LayerNorm pass: erf three times per
    # element; the overlay stores GELU's row once and re-reads it from cache
    assert stock.code.count(".erf()") == 3
    assert patched.code.count(".erf()") == 1


def test_rmsnorm_and_softmax_stay_one_nest():
    weight = torch.randn(512)

    def rms_then_softmax(x):
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight
        return torch.softmax(y, -1)

    patched = compile_and_inspect(rms_then_softmax, (torch.randn(24, 512),))
    assert patched.total_nests <= 2


@requires_vectors  # stock's fallback comes from vector tiling
def test_layernorm_bfloat16():
    ln = layer_norm(1000, torch.bfloat16)
    patched = compile_and_inspect(ln, (torch.randn(32, 1000, dtype=torch.bfloat16),))
    assert patched.nests == [1]
    assert patched.retiled == 1


def test_layernorm_training_outputs_mean_and_rstd():
    ln = layer_norm(1000)

    def forward_with_stats(x):
        return torch.ops.aten.native_layer_norm(x, [1000], ln.weight, ln.bias, 1e-5)

    patched = compile_and_inspect(forward_with_stats, (torch.randn(37, 1000),))
    assert patched.nests == [1]


def test_layernorm_dynamic_shapes():
    ln = layer_norm(96)
    patched = compile_and_inspect(ln, (torch.randn(33, 96),), dynamic=True)
    assert patched.nests == [1]
    assert "ks0" in patched.code or "s0" in patched.code  # really symbolic


# --- guards and rollback ----------------------------------------------------


def test_thread_guard_rolls_back_to_stock_loops():
    # 3 rows over 2 threads: the fused outer loop could not be balanced,
    # so the re-tiled merge is rejected and stock's 4 nests come back.
    ln = layer_norm(1000)
    x = torch.randn(3, 1000)
    # (the rotating accumulators of 0008 and the loads moved before the
    # loop by 0010 would change the loop bodies)
    patched = compile_and_inspect(
        ln, (x,),
        extra_config={
            "cpp.threads": 2,
            "cpp.multi_accumulator_reductions": False,
            "cpp.hoist_invariant_loads": False,
        },
    )  # fmt: skip
    stock = compile_and_inspect(
        ln, (x,), overlay=False, extra_config={"cpp.threads": 2}
    )
    assert patched.retiled == 0
    assert patched.nests == stock.nests == [4]
    assert patched.kernels == stock.kernels


@pytest.mark.parametrize(
    "sizes, outer, expected",
    [
        ((2, 16), (4,), [4, 8]),
        ((32, 1024), (4,), [4, 8, 1024]),
        ((2, 2, 8), (4,), [4, 8]),
        ((2048, 3136), (256,), [256, 8, 3136]),
        ((4, 8), (4,), None),  # already shares the outer loop
        ((6, 10), (4,), None),  # would put the inner index under div/mod
        ((6, 10), (12,), [12, 5]),
        ((3, 7), (4,), None),
    ],
)
def test_split_is_exact_only(sizes, outer, expected):
    assert split_for_outer_extent(sizes, outer) == expected


# --- the local-buffer miscompile of stock 2.13.0 ------------------------------


def _stacked_terms(feats, rates, shift, scale):
    # A strided column feeds a pointwise chain whose result is centered per
    # row and stacked: the chain becomes an outer-loop local buffer, and the
    # strided column makes every kernel vector-tile the outer (row) loop.
    col = feats[..., 16]
    shape = F.softplus(col) + 1e-4
    lg = torch.special.gammaln(shape + shift)
    e = torch.special.erf(col * scale)
    mix = torch.logaddexp(lg, torch.special.xlogy(shape, F.softplus(rates) + 1e-4))
    centered = mix - mix.mean(dim=-1, keepdim=True)
    return torch.stack([centered, e, centered * e], dim=-1)


def _stacked_terms_args():
    torch.manual_seed(0)
    return (
        torch.randn(4, 8, 64) * 0.1,
        torch.randn(4, 8) * 0.1,
        torch.randn(8) * 0.1,
        torch.zeros(8),
    )


@requires_vectors  # stock's fallback comes from vector tiling
def test_no_local_buffer_under_a_vector_tiled_outer_loop():
    args = _stacked_terms_args()
    expected = _stacked_terms(*args)
    stock_out, stock = compile_and_run(_stacked_terms, args, overlay=False)
    if hasattr(config.cpp, "outer_loop_local_buffer_check"):
        # stock before upstream's fix (#185855): all rows share one local
        # buffer slot set -> wrong values
        assert "local_buffer" in stock.code
        assert not torch.allclose(stock_out[0], expected, atol=1e-6)
    else:
        # upstream's fix: stock falls back to unfused code, right values
        assert "local_buffer" not in stock.code
        torch.testing.assert_close(stock_out[0], expected)
    # patched: the attempt is dropped, results match eager
    patched = compile_and_inspect(_stacked_terms, args)
    assert "local_buffer" not in patched.code


@requires_vectors
@pytest.mark.skipif(
    not hasattr(config.cpp, "outer_loop_local_buffer_check"),
    reason="this release's stock has the check (upstream #185855), its series no flag",
)
def test_the_local_buffer_check_needs_no_retiling():
    # cpp.outer_loop_local_buffer_check alone: the attempt is dropped and
    # stock's fallback (separate loop nests) matches eager
    args = _stacked_terms_args()
    only_the_check = compile_and_inspect(
        _stacked_terms,
        args,
        overlay=False,
        extra_config={"cpp.outer_loop_local_buffer_check": True},
    )
    assert "local_buffer" not in only_the_check.code


def test_groupnorm_dynamic_shapes_compile_and_stay_unsplit():
    # Symbolic ranges have no order (shared outer levels are found by
    # equality) and are never split: exact splits need static sizes.
    gn = torch.nn.GroupNorm(4, 32)
    args = (torch.randn(3, 32, 5, 6),)
    patched = compile_and_inspect(
        gn, args, dynamic=True, extra_config=LOOP_ORDERING_OFF
    )
    assert patched.nests == [3]


def test_groupnorm_dynamic_shapes_share_open_loops():
    # Loops left open until fusion need no split: (N, G) are shared as they
    # are, symbolic N included.
    gn = torch.nn.GroupNorm(4, 32)
    patched = compile_and_inspect(gn, (torch.randn(3, 32, 5, 6),), dynamic=True)
    assert patched.nests == [1]
    FileCheck().check("x0<static_cast<int64_t>(ks0)").check(
        "x1<static_cast<int64_t>(4L)"
    ).run(patched.code)


# --- lowering choices under fusion (patch 0004) -------------------------------


def test_groupnorm_rows_of_4k_use_two_step_variance():
    gn = torch.nn.GroupNorm(16, 64)  # 64 rows of 4 * 32 * 32 = 4096 elements
    x = torch.randn(4, 64, 32, 32)
    stock = compile_and_inspect(gn, (x,), overlay=False)
    patched = compile_and_inspect(gn, (x,))
    assert "welford" in stock.code
    assert "welford" not in patched.code
    assert patched.nests == [1]


def test_rows_the_fusion_would_refuse_keep_welford():
    # 16 rows of 8192 on 4 threads (4 rows each): the parallelism guard
    # refuses the fused loop, and unfused, two steps would read the data
    # twice from memory.
    gn = torch.nn.GroupNorm(8, 64)
    x = torch.randn(2, 64, 32, 32)
    four_threads = {"cpp.threads": 4}
    stock = compile_and_inspect(gn, (x,), overlay=False, extra_config=four_threads)
    patched = compile_and_inspect(gn, (x,), extra_config=four_threads)
    assert "welford" in patched.code
    assert patched.total_nests <= stock.total_nests


@pytest.mark.parametrize("threads, nests", [(2, [1]), (8, [2])])
def test_long_rows_fuse_when_every_thread_gets_eight(threads, nests):
    # 32 rows of 16384: the first inner loop is more than 300x the outer
    # loop, which stock leaves to parallel inner loops.  With 2 threads each
    # gets 16 rows (in cache between the passes): fused; with 8, only 4.
    fn, args = layer_norm(16384), (torch.randn(32, 16384),)
    patched = compile_and_inspect(fn, args, extra_config={"cpp.threads": threads})
    assert patched.nests == nests


def test_diffusion_unet_groups_fuse_with_their_silu():
    # GroupNorm(32, 320) + SiLU over two 64x64 latents: 64 groups of 40960
    # elements (160 KiB, in L2 between the passes), 32 rows per thread.
    # Stock leaves the statistics to parallel inner loops: 3 nests.
    fn = torch.nn.Sequential(torch.nn.GroupNorm(32, 320), torch.nn.SiLU())
    args = (torch.randn(2, 320, 64, 64),)
    two_threads = {"cpp.threads": 2}
    stock = compile_and_inspect(fn, args, overlay=False, extra_config=two_threads)
    patched = compile_and_inspect(fn, args, extra_config=two_threads)
    assert stock.total_nests == 3
    assert patched.nests == [1]
    assert "welford" not in patched.code  # two steps: the group is re-read from L2


@pytest.fixture
def cache_of(monkeypatch):
    def set_size(nbytes: int) -> None:
        monkeypatch.setattr(costs, "last_level_cache_bytes", lambda: nbytes)

    return set_size


@pytest.mark.parametrize(
    ("width", "nests"),
    [(128, 1), (160, 3)],  # groups of 131072 (512 KiB) fuse; of 163840 do not
)
def test_rows_fuse_up_to_half_of_l2(cache_of, width, nests):
    cache_of(1 << 20)  # a last-level cache that holds no longer row
    fn = torch.nn.GroupNorm(16, 64)  # 16 groups of 4 * 256 * width elements
    args = (torch.randn(1, 64, 256, width),)
    patched = compile_and_inspect(fn, args, extra_config={"cpp.threads": 2})
    assert patched.total_nests == nests


@pytest.mark.parametrize(
    ("cache_mib", "nests", "welford"),
    # 8 rows of 262144 floats (1 MiB), 1 thread: a row takes a quarter of a
    # 4 MiB last-level cache, a half of a 2 MiB one
    [(4, [1], False), (2, [2], True)],
)
def test_rows_longer_than_l2_fuse_while_they_stay_in_the_last_level_cache(
    cache_of, cache_mib, nests, welford
):
    cache_of(cache_mib << 20)
    fn, args = torch.nn.LayerNorm((64, 64, 64)), (torch.randn(8, 64, 64, 64),)
    patched = compile_and_inspect(fn, args, extra_config={"cpp.threads": 1})
    assert patched.nests == nests
    # two steps where the second pass reads the row from cache
    assert ("welford" in patched.code) == welford


def test_few_large_groups_keep_parallel_inner_loops():
    # 4 groups of 32768 (upstream's test_group_norm_large_input): too few
    # rows for 2 threads to share, so stock's parallel reduction stays.
    fn, args = torch.nn.GroupNorm(2, 64), (torch.randn(2, 64, 32, 32),)
    patched = compile_and_inspect(fn, args, extra_config={"cpp.threads": 2})
    assert patched.outer_fused == 0
    assert metrics.parallel_reduction_count == 1


def test_rows_the_fused_loop_refuses_keep_welford():
    # 3 groups of 30 * 20 * 20 = 12000 elements: more than 300 x the number
    # of rows, so the outer-loop fusion is refused and two steps would read
    # the data from memory twice.
    gn = torch.nn.GroupNorm(3, 90)
    patched = compile_and_inspect(gn, (torch.randn(1, 90, 20, 20),))
    assert "welford" in patched.code


def test_short_rows_keep_welford():
    gn = torch.nn.GroupNorm(3, 90)  # 6 groups of 30 * 6 * 6 = 1080 elements
    patched = compile_and_inspect(gn, (torch.randn(2, 90, 6, 6),))
    assert "welford" in patched.code and patched.nests == [1]


def test_rows_of_2048_take_two_steps():
    fn, args = layer_norm(2048), (torch.randn(64, 2048),)
    stock = compile_and_inspect(fn, args, overlay=False)
    patched = compile_and_inspect(fn, args)
    assert "welford" in stock.code and "welford" not in patched.code
    assert patched.nests == [1]


def test_no_split_under_a_reduction_over_strided_memory():
    # LayerNorm over the channels of an NCHW tensor reduces across a strided
    # dimension; joining its kernels in one tiled outer loop was slower than
    # stock's separate nests, so the split is refused.
    ln = layer_norm(64)
    x = torch.randn(2, 64, 12, 12)

    def channels_layernorm(x):
        return ln(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

    stock = compile_and_inspect(channels_layernorm, (x,), overlay=False)
    patched = compile_and_inspect(
        channels_layernorm, (x,), extra_config=LOOP_ORDERING_OFF
    )
    assert patched.nests == stock.nests


@requires_vectors  # the reductions' vector accumulators and the tile
def test_channels_layernorm_shares_open_loops_without_a_split():
    # Under loop ordering after fusion the statistics and the normalized
    # output keep the unmerged (N, H, W) loops they share: one nest, W
    # vectorized for the reductions over the strided channels, the output
    # written through a transposed tile.  No split is needed.
    ln = layer_norm(64)
    x = torch.randn(2, 64, 12, 12)

    def channels_layernorm(x):
        return ln(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

    patched = compile_and_inspect(channels_layernorm, (x,))
    assert patched.nests == [1]
    FileCheck().check("x1<static_cast<int64_t>(12L)").check(
        "x2<static_cast<int64_t>(12L)"
    ).check("tmp_acc0_vec").check("transpose_mxn").run(patched.code)


# --- the fallbacks of a failed merge: one loop -----------------------------


class _Fallback:
    """A fallback whose attempts record the kernel counters they start from."""

    def __init__(self, name, enabled, results, seen):
        self.name, self._enabled = name, enabled
        self._results, self._seen = results, seen

    def enabled(self):
        return self._enabled

    def attempts(self, failed):
        for result in self._results:
            yield lambda result=result: self._try(result)

    def _try(self, result):
        self._seen.append(
            (
                self.name,
                metrics.generated_cpp_vec_kernel_count,
                metrics.generated_kernel_count,
                torch._inductor.config.inplace_buffers,
            )
        )
        metrics.generated_cpp_vec_kernel_count += 5  # a discarded attempt's kernels
        metrics.generated_kernel_count += 5
        return result


class KernelGroupArgs:
    class args:  # noqa: N801 - a kernel group's args with no buffer stored
        output_buffers: dict = {}


def _run(fallbacks):
    from torch._inductor.codegen.cpp_fusion.outer_loop.fallbacks import FailedMerge

    class Scheduling:
        kernel_group = KernelGroupArgs()

    metrics.generated_cpp_vec_kernel_count = 7
    metrics.generated_kernel_count = 9
    merge = lambda node, retile: False  # noqa: E731
    return FailedMerge(Scheduling(), None, [], merge, (1, 2), tuple(fallbacks)).run()


def test_fallbacks_run_in_order_from_the_counters_before_the_node():
    seen: list = []
    fused = _run(
        [
            _Fallback("off", False, [True], seen),
            _Fallback("a", True, [False, False], seen),
            _Fallback("b", True, [True], seen),
            _Fallback("c", True, [True], seen),
        ]
    )
    assert fused
    # a disabled fallback is skipped, the first success ends the search, and
    # every attempt starts from the counters and with in-place buffers off
    assert seen == [("a", 1, 2, False)] * 2 + [("b", 1, 2, False)]


def test_no_fallback_generates_the_node():
    seen: list = []
    assert not _run([_Fallback("a", True, [False], seen)])
    assert seen == [("a", 1, 2, False)]
    # stock's separate nests then count from the counters before the node,
    # not after the failed attempt's kernels
    counters = (metrics.generated_cpp_vec_kernel_count, metrics.generated_kernel_count)
    assert counters == (1, 2)


def test_with_every_fallback_off_the_counters_stay_stocks():
    seen: list = []
    assert not _run([_Fallback("off", False, [True], seen)])
    assert seen == []
    counters = (metrics.generated_cpp_vec_kernel_count, metrics.generated_kernel_count)
    assert counters == (7, 9)


@requires_vectors  # the stock attempt's vector tiling is what fails to merge
def test_a_regrouped_head_with_a_local_buffer_passes_no_removed_buffer():
    # Found by the fuzzer: softmax over dim 1 of (4, 4, 1) bfloat16, dynamic
    # sizes.  The whole node fails to merge, its kernels having stored buf0;
    # the regrouped head keeps buf0 in a local buffer, removed from the graph,
    # and the kernel still took it as an argument: NameError in the wrapper.
    def softmax_dim1(x):
        return torch.softmax(x, dim=1)

    x = torch.randn(4, 4, 1).to(torch.bfloat16)
    patched = compile_and_inspect(
        softmax_dim1, (x,), extra_config=SEED_CONFIG, dynamic=True
    )
    assert patched.outer_fused == 1
    FileCheck().check("local_buffer_data_0").run(patched.code)


# --- attempts the cost guard refuses before their kernels are generated -----


def _two_small_linears():
    # Upstream's PR-time ListOfLinears, one step: each Linear(10, 10) on a
    # vector is a reduction over 10 per output, the sum a vectorized epilogue
    # over the outer loop alone, which the re-tile would leave scalar.
    torch.manual_seed(0)
    first, second = torch.nn.Linear(10, 10), torch.nn.Linear(10, 10)
    return lambda x: first(x) + second(x), (torch.randn(10),)


def _recorder(cls, name: str) -> tuple:
    """``cls.name`` wrapped to record its calls' arguments, and that record."""
    calls: list = []
    return recording(getattr(cls, name), calls), calls


@pytest.fixture
def retile_attempts(monkeypatch):
    """The re-tiling attempts that generated their kernels (one entry per kernel)."""
    from torch._inductor.codegen.cpp_fusion.outer_loop.retile import OuterLoopRetile

    prepare, calls = _recorder(OuterLoopRetile, "prepare")
    monkeypatch.setattr(OuterLoopRetile, "prepare", prepare)
    return calls


@pytest.fixture
def generated_kernels(monkeypatch):
    """Every member kernel generated (one entry per CppKernelProxy.codegen_nodes)."""
    from torch._inductor.codegen.cpp import CppKernelProxy

    codegen_nodes, calls = _recorder(CppKernelProxy, "codegen_nodes")
    monkeypatch.setattr(CppKernelProxy, "codegen_nodes", codegen_nodes)
    return calls


@pytest.fixture
def stock_first_attempt(monkeypatch):
    """Turns first_attempt.py off: stock's attempt first, the re-tile after."""
    from torch._inductor.codegen.cpp import CppScheduling

    def off():
        monkeypatch.setattr(
            CppScheduling, "outer_loop_first_attempt", lambda self, node: None
        )

    return off


@requires_vectors  # stock's attempt fails on the epilogue's vector tiling
def test_a_refused_retile_generates_no_more_kernels_than_stock(
    retile_attempts, generated_kernels
):
    fn, args = _two_small_linears()
    stock = compile_and_inspect(fn, args, overlay=False)
    stock_kernels = len(generated_kernels)
    patched = compile_and_inspect(fn, args)
    assert patched.retiled == 0
    assert patched.nests == stock.nests
    assert len(generated_kernels) == 2 * stock_kernels
    assert retile_attempts == []


@requires_vectors
def test_without_the_early_refusal_the_attempt_is_generated_and_refused(
    retile_attempts, monkeypatch, stock_first_attempt
):
    # The same program after stock's attempt, the early refusal off: the
    # attempt's kernels are generated, the guard refuses them, and the code
    # is the same.
    from torch._inductor.codegen.cpp_fusion.outer_loop.retile import OuterLoopRetile

    stock_first_attempt()
    fn, args = _two_small_linears()
    early = compile_and_inspect(fn, args)
    monkeypatch.setattr(
        OuterLoopRetile, "refused_before_codegen", lambda self, proxies: False
    )
    late = compile_and_inspect(fn, args)
    assert late.retiled == 0
    assert len(retile_attempts) > 0
    assert run_independent(late.code) == run_independent(early.code)


# --- the first attempt: stock's kernels or the re-tile's, generated once ----


def _without_aliases(code: str) -> list[str]:
    """Code lines with ``auto out_ptrK = in_out_ptrJ;`` resolved: a kernel
    that stores a buffer before a later member takes it in place stores it
    through that alias, and after a failed attempt (which made the in-place
    decision first) through the in-place name itself."""
    lines = run_independent(code)
    declaration = re.compile(r"\s*auto (out_ptr\d+) = (in_out_ptr\d+);$")
    matches = [declaration.match(line) for line in lines]
    alias = dict(match.groups() for match in matches if match)
    kept = "\n".join(line for line, match in zip(lines, matches) if not match)
    for name, inplace in alias.items():
        kept = re.sub(rf"\b{name}\b", inplace, kept)
    return kept.splitlines()


def _first_attempt_against_stocks(fn, args, generated_kernels, stock_first_attempt):
    """The program compiled with the first attempt, then with stock's attempt
    first: both compiles and the kernels each generated."""
    first = compile_and_inspect(fn, args)
    first_kernels = len(generated_kernels)
    stock_first_attempt()
    generated_kernels.clear()
    stock = compile_and_inspect(fn, args)
    return first, first_kernels, stock, len(generated_kernels)


def _one_nest_as_after_stocks_attempt(
    fn, args, generated_kernels, stock_first_attempt, *, retiled: int
):
    """Both compiles make one nest, re-tiled or not alike, from as many
    kernels and the same code (aliases resolved)."""
    first, kernels, stock, stock_kernels = _first_attempt_against_stocks(
        fn, args, generated_kernels, stock_first_attempt
    )
    assert first.nests == stock.nests == [1]
    assert first.retiled == stock.retiled == retiled
    assert kernels == stock_kernels
    assert _without_aliases(first.code) == _without_aliases(stock.code)
    return first, stock


@requires_vectors  # stock's attempt fails on the mean kernel's vector tiling
def test_a_retiled_layernorm_generates_each_member_once(
    generated_kernels, stock_first_attempt
):
    fn, args = layer_norm(1000), (torch.randn(37, 1000),)
    first, kernels, stock, stock_kernels = _first_attempt_against_stocks(
        fn, args, generated_kernels, stock_first_attempt
    )
    assert first.nests == stock.nests == [1]
    assert first.retiled == stock.retiled == 1
    assert stock_kernels == 2 * kernels  # stock's attempt, then the re-tile
    assert _without_aliases(first.code) == _without_aliases(stock.code)


@requires_vectors  # every member tiles the same fused level
def test_kernels_that_merge_with_stocks_tiling_keep_it(
    generated_kernels, stock_first_attempt
):
    # LayerNorm over the channels of an NCHW map: each member's stock tiling
    # lies on the pixel loop, a fused level, and they all agree there.
    def fn(x):
        return F.layer_norm(x.permute(0, 2, 3, 1), (64,))

    args = (torch.randn(2, 64, 16, 16),)
    first, stock = _one_nest_as_after_stocks_attempt(
        fn, args, generated_kernels, stock_first_attempt, retiled=0
    )
    assert run_independent(first.code) == run_independent(stock.code)


@requires_vectors
def test_a_member_that_took_stocks_tiling_first_leaves_the_retile_to_the_fallback(
    generated_kernels, stock_first_attempt
):
    # A per-row scale tiles the row loop (the fused level), the row sum after
    # it its columns, and the product after that the rows again: stock's
    # attempt fails once the sum is selected, after the scale took stock's
    # tiling, and the product takes the re-tile's.  Neither attempt's
    # kernels: the fallbacks go on as after stock's attempt.
    def fn(x, s):
        r = torch.sigmoid(s) * 2
        t = (x * r[:, None]).sum(-1)
        return r, t * r

    args = (torch.randn(256, 512), torch.randn(256))
    _one_nest_as_after_stocks_attempt(
        fn, args, generated_kernels, stock_first_attempt, retiled=1
    )


# --- the code guard: a merged body fetched for a few vectors ----------------


@pytest.fixture
def tiny_instruction_cache(monkeypatch):
    """An instruction cache smaller than a LayerNorm's merged body, so that
    the code guard's second condition (vector iterations per kernel) decides."""
    monkeypatch.setattr(costs, "instruction_cache_bytes", lambda: 64)


@requires_vectors  # the retile repairs a vector tiling
def test_short_rows_with_a_body_out_of_the_cache_keep_stocks_nests(
    tiny_instruction_cache,
):
    # Rows of two vectors: each kernel would run two vector iterations per
    # fetch of the whole body.
    width = 2 * vector_lanes()
    x = torch.randn(37, width)
    ln = layer_norm(width)
    stock = compile_and_inspect(ln, (x,), overlay=False)
    patched = compile_and_inspect(ln, (x,))
    assert patched.retiled == 0
    assert patched.nests == stock.nests
    assert patched.nests != [1]


@requires_vectors
def test_long_rows_merge_whatever_the_instruction_cache(tiny_instruction_cache):
    # Rows of 16 vectors: weighted by their ops, LayerNorm's kernels run
    # more than 8 vector iterations each per row (its mean kernel, one).
    width = 16 * vector_lanes()
    patched = compile_and_inspect(layer_norm(width), (torch.randn(37, width),))
    assert patched.retiled == 1
    assert patched.nests == [1]


@requires_vectors
def test_short_rows_merge_while_the_body_fits_the_instruction_cache():
    width = 2 * vector_lanes()
    patched = compile_and_inspect(layer_norm(width), (torch.randn(37, width),))
    assert patched.retiled == 1
    assert patched.nests == [1]


def test_code_guard_needs_both_a_large_body_and_few_iterations(monkeypatch):
    monkeypatch.setattr(costs, "instruction_cache_bytes", lambda: 32 << 10)
    large = 4096  # ops: 64 KiB of code
    assert costs.refetches_code(large, 1.6)
    assert not costs.refetches_code(large, costs.MIN_VECTOR_ITERATIONS_PER_FETCH)
    assert not costs.refetches_code(32, 1.6)


def test_instruction_cache_comes_from_sysfs_or_the_fallback():
    size = costs.instruction_cache_bytes()
    assert size > 0 and size & (size - 1) == 0  # a power of two
    assert size < costs.last_level_cache_bytes()
