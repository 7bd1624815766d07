"""CPU variants of upstream's loop-ordering-after-fusion acceptance tests.

Upstream's ``test/inductor/test_loop_ordering.py`` (``LoopOrderingTest``)
counts ``metrics.generated_kernel_count``, the Triton kernels a GPU launches.
On CPU that counter counts C++ kernel proxies, one per loop nest emitted
(stock also counted the members of an outer-loop fused kernel, and every
discarded attempt, which the overlay no longer does: patch 0016).  A C++
function may hold several nests where a GPU would launch one kernel.  These
variants build the same programs and assert what the C++ backend emits: the
loop nests, next to stock's (every overlay flag off), and agreement with eager.
"""

from __future__ import annotations

import unittest.mock

import torch
from torch._inductor import metrics
from torch._inductor.scheduler import Scheduler, SchedulerNode
from torch._inductor.test_case import run_tests, TestCase
from torch._inductor.test_operators import realize
from torch.testing import FileCheck

from compile_utils import compile_and_inspect, requires_vectors, vector_lanes


def rms_norm_over_heads(x, head_dim=128):
    rows = x.reshape(-1, head_dim).float()
    rms = torch.rsqrt(rows.pow(2).mean(dim=-1, keepdim=True) + 1e-5)
    return (rows * rms).reshape(x.shape).to(x.dtype)


def qkv_slice(rows=16):
    # A slice of a fused qkv projection: rows are not contiguous.
    return torch.randn(rows, 10240, dtype=torch.bfloat16)[:, :8192]


class CpuLoopOrderingTest(TestCase):
    def nests(self, fn, *args, extra_config=None):
        """(patched, stock) loop nests of ``fn``; both agree with eager."""
        on = compile_and_inspect(fn, args, extra_config=extra_config)
        off = compile_and_inspect(fn, args, overlay=False, extra_config=extra_config)
        return on, off

    def test_sum_and_transpose_share_one_pass(self):
        def sum_and_t(x):
            return x.sum(dim=-1), x.t().contiguous()

        on, off = self.nests(sum_and_t, torch.randn(256, 512))
        self.assertEqual((on.total_nests, off.total_nests), (1, 2))
        self.assertEqual(on.reordered, 1)
        if vector_lanes():
            # One tiled pass reads x once for both outputs.
            FileCheck().check("transpose_mxn").check("tmp_acc0_vec").run(
                on.kernels[0]
            )

    def test_transposed_operand_fuses_through_tiles(self):
        # Upstream's test_apbt_realize.  Stock writes y * 3 in the order of
        # the transposed y, then its second nest reads it through transposed
        # tiles.  The reorder strides the first node over y, a walk as strided
        # as the one it replaces: one nest reads y through the tiles and never
        # writes y * 3.
        def apbt(x, y):
            return realize(x * 2) + realize(y * 3)

        on, off = self.nests(apbt, torch.randn(512, 1024), torch.randn(1024, 512).t())
        self.assertEqual((on.total_nests, off.total_nests), (1, 2))
        self.assertEqual(on.reordered, 1)
        allocations = [c.code.count("empty_strided_cpu(") for c in (on, off)]
        self.assertEqual(allocations, [1, 2])
        if vector_lanes():
            FileCheck().check_count("transpose_mxn", 1, exactly=True).run(on.code)

    def test_view_fuses_as_in_stock(self):
        def sin_and_view(x):
            return realize(x.view(10, 10)), x.sin()

        on, off = self.nests(sin_and_view, torch.randn(100))
        self.assertEqual((on.total_nests, off.total_nests), (1, 1))

    def test_ranking_fusion_pairs_merges_no_loops(self):
        # A producer over (10, 10) and its consumer over (100,) fuse only with
        # merged loops.  Ranking fusion pairs (get_fusion_pair_priority) runs
        # outside can_fuse, whose tracker would roll a merge back: asked there,
        # the C++ rules must leave the nodes' loops as they are.
        def add_then_sin_of_view(x):
            return realize(x.view(10, 10) + 1).view(100).sin()

        unchanged = []
        fuse_nodes = Scheduler.fuse_nodes

        def rank_pairs_then_fuse(scheduler, nodes):
            snodes = [n for n in nodes if isinstance(n, SchedulerNode)]
            backend = scheduler.get_backend(torch.device("cpu"))
            for i, node1 in enumerate(snodes):
                for node2 in snodes[i + 1 :]:
                    before = [(n.get_ranges(), n.group) for n in (node1, node2)]
                    backend.get_fusion_pair_priority(node1, node2)
                    after = [(n.get_ranges(), n.group) for n in (node1, node2)]
                    unchanged.append(before == after)
            return fuse_nodes(scheduler, nodes)

        with unittest.mock.patch.object(Scheduler, "fuse_nodes", rank_pairs_then_fuse):
            on = compile_and_inspect(add_then_sin_of_view, (torch.randn(100),))
        self.assertEqual(unchanged, [True])
        self.assertEqual(on.total_nests, 1)

    def test_broadcast_operands_fuse_as_in_stock(self):
        # Upstream expects two Triton kernels; stock's C++ backend merges both
        # loops to (1024, 1024) and emits one nest, and so does the overlay.
        def add_bias_twice(x, y, c):
            return x + c, y + c

        args = (torch.randn(4, 256, 1024), torch.randn(2, 512, 1024), torch.randn(1024))
        on, off = self.nests(add_bias_twice, *args)
        self.assertEqual((on.total_nests, off.total_nests), (1, 1))

    def test_pointwise_into_outer_reduction(self):
        def pw_outer_red(x):
            return realize(realize(x + 1) * 3).sum(dim=[0, 1])

        on, off = self.nests(pw_outer_red, torch.randn(2, 4, 512))
        self.assertEqual((on.total_nests, off.total_nests), (1, 2))

    def test_different_reduction_orders_stay_apart(self):
        def two_sums(x):
            return x.sum(dim=0), x.sum(dim=1)

        on, off = self.nests(two_sums, torch.randn(256, 512))
        self.assertEqual((on.total_nests, on.reordered), (off.total_nests, 0))

    def test_rms_norm_over_reshaped_heads(self):
        on, off = self.nests(rms_norm_over_heads, qkv_slice())
        self.assertEqual((on.total_nests, off.total_nests), (1, 2))

    def test_rms_norm_reindexed_without_global_loop_ordering(self):
        cfg = {"loop_ordering_after_fusion": False}
        on, off = self.nests(rms_norm_over_heads, qkv_slice(), extra_config=cfg)
        self.assertEqual((on.total_nests, off.total_nests), (1, 2))

    def test_rms_norm_after_fused_pointwise(self):
        def bias_clamp_rms(x, bias):
            return rms_norm_over_heads(realize(realize(x + bias).clamp(-1, 1)))

        bias = torch.randn(8192, dtype=torch.bfloat16)
        on, off = self.nests(bias_clamp_rms, qkv_slice(), bias)
        self.assertEqual((on.total_nests, off.total_nests), (1, 3))

    def test_block_amax_and_broadcast(self):
        def block_scale(x, block=32):
            blocks = x.unflatten(-1, (x.shape[-1] // block, block))
            scale = blocks.abs().amax(dim=-1).clamp(min=1e-6)
            return (blocks / scale.unsqueeze(-1)).flatten(-2)

        on, off = self.nests(block_scale, torch.randn(8, 8192))
        self.assertEqual((on.total_nests, off.total_nests), (1, 1))

    def test_qk_norm_then_rope(self):
        def qk_norm_rope(q, weight, cos, sin):
            q = q * torch.rsqrt(q.pow(2).mean(-1, keepdim=True) + 1e-6) * weight
            half = q.shape[-1] // 2
            q1, q2 = q[..., :half], q[..., half:]
            return torch.cat([q1 * cos - q2 * sin, q2 * cos + q1 * sin], dim=-1)

        args = (
            torch.randn(2, 4, 64, 64),
            torch.randn(64),
            torch.randn(1, 1, 64, 32),
            torch.randn(1, 1, 64, 32),
        )
        on, off = self.nests(qk_norm_rope, *args)
        self.assertEqual((on.total_nests, off.total_nests), (1, 2))

    def test_merged_outer_loop_kernel_counts_once(self):
        # One outer-loop fused kernel of two members (LayerNorm's statistics
        # and output): one loop nest, one kernel, not the members plus it.
        ln = torch.nn.LayerNorm(1000)
        on = compile_and_inspect(ln, (torch.randn(37, 1000),))
        self.assertEqual(on.total_nests, 1)
        self.assertEqual(len(metrics.cpp_outer_loop_fused_inner_counts), 1)
        self.assertEqual(metrics.generated_kernel_count, 1)

    @requires_vectors
    def test_failed_outer_loop_attempts_count_no_kernels(self):
        # RMS norm then interleaved RoPE: the outer-loop fusion of the norm and
        # the stack fails to merge and falls back (merging over fewer loops,
        # 0018, switched off); without vectors it merges (no tiling differs).
        # Each discarded attempt used to count its kernels: 6 for this
        # function of 2 loop nests.
        def qk_norm_interleaved_rope(q, cos, sin):
            q = q * torch.rsqrt(q.pow(2).mean(-1, keepdim=True) + 1e-6)
            pairs = q.reshape(*q.shape[:-1], -1, 2)
            a, b = pairs[..., 0], pairs[..., 1]
            return torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2)

        cos, sin = torch.randn(1, 1, 64, 32), torch.randn(1, 1, 64, 32)
        args = (torch.randn(2, 4, 64, 64), cos, sin)
        on = compile_and_inspect(
            qk_norm_interleaved_rope,
            args,
            extra_config={"cpp.outer_loop_shallower_fusion": False},
        )
        self.assertEqual(on.total_nests, 2)
        self.assertEqual(metrics.generated_kernel_count, on.total_nests)


if __name__ == "__main__":
    run_tests()
