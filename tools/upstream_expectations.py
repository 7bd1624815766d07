"""Upstream tests whose expectation the series changes, and why.

``tools.upstream_test`` reports a new failure (passes on stock, fails with
the overlay) listed here as explained, with its reason, and fails on every
other.  An entry names the patch whose feature changes the test's outcome
and says why the new behaviour is right; ``make pr`` carries the reasons
into the PR text.  A key is a test id as junit reports it, or its tail
(``Class.test_name``), which matches in every file.
"""

from __future__ import annotations

from typing import NamedTuple


class ExpectedChange(NamedTuple):
    patch: str  # the patch file's number, e.g. "0023"
    kind: str  # "more vectorized", "fewer kernels", ...
    reason: str


EXPECTED_CHANGES: dict[str, ExpectedChange] = {
    "CPUReproTests.test_group_norm_large_input": ExpectedChange(
        "0022",
        "statistics in their own nests",
        "GroupNorm(2, 64) over channels-last (2, 64, 168, 168) takes 0022's "
        "per-channel sums: the statistics are sums over pixel blocks, then over "
        "the blocks, each a vectorized kernel in an outer-loop fused nest (9 "
        "vectorized kernels in 4 nests, no parallel reduction) where stock runs "
        "one parallel var_mean over each group's masked slices (3 kernels in 3 "
        "nests). No fusion broke apart: more, smaller kernels, all vectorized. "
        "Measured at the test's shape: 0.89 / 0.94 of stock (1 / 2 threads), "
        "0.91 / 0.99 of the overlay without 0022; the contiguous half of the "
        "test is unchanged and passes.",
    ),
    "CPUReproTests.test_transpose_sum_outer": ExpectedChange(
        "0023",
        "more vectorized kernels in the same nest",
        "a.transpose(2, 3).sum(1) over (10, 50, 50, 50) reduces 50 rows 10 KB "
        "apart: 0023 reduces blocks of rows into partials, then the partials "
        "(upstream's two-level split), both levels vectorized kernels fused in "
        "stock's one nest (2 vectorized kernels, 1 nest). Measured at the test's "
        "shape: 0.41 / 0.45 of stock (1 / 2 threads), 0.43 / 0.48 of the "
        "overlay without 0023.",
    ),
    "CPUReproTests.test_add_layernorm": ExpectedChange(
        "0002",
        "fewer kernels: a fusion",
        "a quantized linear's output plus the residual, then LayerNorm(768) "
        "over (1, 197, 768), frozen: stock makes 5 nests, 5 vectorized kernels "
        "(the add and the LayerNorm statistics fall back from their outer-loop "
        "fusion over mismatched vector tiling); 0002 re-tiles them into one "
        "nest, 2 nests and 4 vectorized kernels in all, values equal to eager. "
        "The test asks for at least 5 vectorized kernels, a count its own "
        "comment says varies by backend. With 0002 off the overlay gives "
        "stock's 5 and 5. Before 2.14.1 the test fails on stock too (its "
        "quantization helper is newer than 2.13.0). Counted, not timed.",
    ),
    "CPUReproTests.test_vec_contiguous_ModularIndexing": ExpectedChange(
        "0003 0002",
        "fewer kernels: a fusion",
        "Swin's patch merging (reshape, permute, flatten) then LayerNorm(512) "
        "over (1, 56, 56, 128): stock makes 3 nests (the statistics' outer-loop "
        "fusion falls back over mismatched vector tiling), 4 vectorized kernels. "
        "0003 joins the statistics and the normalization in one nest over the "
        "28 x 28 rows; with 0002's re-tiling that nest counts 3 vectorized "
        "kernels (0003 without 0002: 4, also one nest), so the count drops by "
        "one where the nests drop by two; still no non-contiguous float load. "
        "The count first changes at 0003's commit (0002 alone keeps stock's 3 "
        "nests). Measured at the test's shape: 0.79 / 0.80 of stock (1 / 2 "
        "threads).",
    ),
    "CPUReproTests.test_repeated_exp": ExpectedChange(
        "0005 0009",
        "fewer kernels: a fusion",
        "sigmoid(x) + 1 and sigmoid(x).sum(-1) over (1000, 1000): stock stores "
        "the sigmoid over a flattened loop and reads it back in a second nest; "
        "the overlay fuses both into one nest over (1000, 1000) (either 0005 or "
        "0009 does; both off: stock's two), which computes each exp once, with "
        "no intermediate buffer. The test counts '.exp()' in the C++ text: the "
        "fused nest has a vector body and, where the vector width does not "
        "divide 1000 (16 floats under AVX-512: a tail of 8), a masked tail with "
        "its own exp, so the text holds two (one under AVX2's 8 lanes). The "
        "edited test derives the count from the ISA's lanes. Measured at the "
        "test's shape: 0.72 / 0.71 of stock (1 / 2 threads).",
    ),
    "CPUReproTests.test_expr_vec_non_contiguous": ExpectedChange(
        "0005 0009",
        "fewer kernels: a fusion",
        "the softmax over the padded, permuted view (sebotnet33ts' pattern, "
        "tiling heuristics off as the test sets) compiles to one nest where "
        "stock makes 3. Its max, exp, sum and division take 3 vectorized "
        "kernels instead of 4 with either loop ordering after fusion (0005) or "
        "outer block fusion (0009) on (both off: 4), and 0005 merges the nests; "
        "still no non-contiguous int load. Measured at the "
        "test's shape: 0.39 / 0.40 of stock (1 / 2 threads); with the tiling "
        "heuristics on (the default) 2 -> 1 nests, 0.92 of stock.",
    ),
    "CpuTests.test_scheduler_vertical_fusion1_cpu": ExpectedChange(
        "0005",
        "fewer kernels: a fusion",
        "pyhpc_equation_of_state's chain of realized pointwise ops over "
        "(204, 204, 26), one operand broadcast from (26,): stock's CPU backend "
        "leaves 2 kernels (the test expects 2 on CPU and 1 on GPU, where loop "
        "ordering after fusion merges them). With loop ordering after fusion "
        "on the CPU (0005) the two nests share their loop order and fuse into "
        "one vectorized kernel, the GPU's count; with 0005 off, stock's 2. "
        "Measured at the test's shape: 0.66 / 0.65 of stock (1 / 2 threads).",
    ),
}
# The same test, run by test_torchinductor_dynamic_shapes.py with dynamic
# sizes: the same fusion, for the same reason.
EXPECTED_CHANGES[
    "DynamicShapesCpuTests.test_scheduler_vertical_fusion1_dynamic_shapes_cpu"
] = EXPECTED_CHANGES["CpuTests.test_scheduler_vertical_fusion1_cpu"]
