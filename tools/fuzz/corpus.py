"""Seed programs: one per group of overlay features, run before generation.

Every profile starts with these (hypothesis' explicit examples, split over
the workers), so that even a short run reaches every feature's code once;
the generated programs then vary around the same preconditions
(``strategy.FAMILIES``).  ``test/test_fuzz.py`` checks that together they
reach every feature.
"""

from __future__ import annotations

from .program import SOURCE_HEADER, FuzzCase, InputSpec, input_names


def _case(body: str, shapes, kinds, weights=(), dtype="float32", **variant) -> FuzzCase:
    """A seed program over data inputs of ``shapes`` and weights of ``weights``."""
    inputs = tuple(InputSpec(tuple(shape), dtype) for shape in shapes) + tuple(
        InputSpec(tuple(shape), dtype, role="weight") for shape in weights
    )
    names = ", ".join(input_names(inputs))
    source = f"{SOURCE_HEADER}\n\ndef program({names}):\n{body}"
    return FuzzCase(source, inputs, kinds=tuple(kinds), **variant)


def _layout_case(body: str, specs, kinds, **variant) -> FuzzCase:
    """A seed program over inputs given as InputSpecs (layouts, dtypes)."""
    names = ", ".join(input_names(specs))
    source = f"{SOURCE_HEADER}\n\ndef program({names}):\n{body}"
    return FuzzCase(source, tuple(specs), kinds=tuple(kinds), **variant)


REACH_SEEDS = (
    # 0002: a variance over rows of 131200 (above the row cache bound), whose
    # re-tiled merge over 2 rows would starve a thread
    _case(
        "    v1 = torch.var(x0, dim=-1)\n    return (v1,)\n", [(2, 131200)], ["reduce"]
    ),
    # 0002: two small linears summed: the re-tile would turn a kernel scalar,
    # refused before its kernels are generated
    _case(
        "    v1 = F.linear(x0, x1, x2) + F.linear(x0, x3, x4)\n    return (v1,)\n",
        [(10,), (10, 10), (10,), (10, 10), (10,)],
        ["binary"],
    ),
    # 0003: LayerNorm over the channels of an NCHW map, loop ordering off
    _case(
        "    v1 = F.layer_norm(x0.permute(0, 2, 3, 1), (64,), w1, w2, eps=1e-5)\n"
        "    return (v1.permute(0, 3, 1, 2),)\n",
        [(2, 64, 12, 12)],
        ["norm"],
        weights=[(64,), (64,)],
        flags="without:loop_ordering_after_fusion",
    ),
    # 0012: a regrouped head keeps its buffer local (bfloat16 softmax over
    # dim 1 of (4, 4, 1), every op its own node, dynamic shapes)
    _case(
        "    return (torch.softmax(x0, dim=1),)\n",
        [(4, 4, 1)],
        ["softmax"],
        dtype="bfloat16",
        config="seed",
        dynamic=True,
    ),
    # 0013: a linear's output is streamed, its relu is not
    _case(
        "    v1 = F.relu(x0 @ x1 + x2)\n    return (v1,)\n",
        [(256, 64), (64, 1024), (1024,)],
        ["binary", "unary"],
        cache_bytes=262144,
    ),
    # 0023: a lone column sum (a batch of its own: a batch's output node
    # links it to the other programs' reductions within 0023's chain hops),
    # and a sum over the middle dim of a small slab
    _case(
        "    v1 = x0.sum(0)\n    return (v1,)\n", [(64, 1024)], ["reduce"], alone=True
    ),
    _case("    v1 = x0.sum(1)\n    return (v1,)\n", [(16, 32, 256)], ["reduce"]),
    # 0005: softmax over dim 0 of x scaled by a one-element tensor
    _case(
        "    v1 = torch.softmax(x0 * x1, dim=0)\n    return (v1,)\n",
        [(64, 48), (1,)],
        ["softmax"],
    ),
    # 0005: pointwise consumers of a row sum, reindexed onto its loops or
    # refused from their deps: plain, flipped, broadcast through a reshape,
    # read through a transposing reshape
    _case(
        "    v1 = x0.sum(-1)\n    return (x1 * v1,)\n",
        [(6, 8), (8, 6)],
        ["reduce", "binary"],
    ),
    _case(
        "    v1 = x0.sum(-1)\n    return (x1 * v1.flip(0),)\n",
        [(6, 8), (8, 6)],
        ["reduce", "binary"],
    ),
    _case(
        "    v1 = x0.sum(-1)\n    v2 = v1.view(6, 1).expand(6, 8).reshape(12, 4)\n"
        "    return (x1 * v2,)\n",
        [(6, 8), (12, 4)],
        ["reduce", "binary"],
    ),
    _case(
        "    v1 = x0.t().reshape(6, 8).sum(-1)\n    return (x1 * x0.t(), v1)\n",
        [(4, 12), (12, 4)],
        ["reduce", "binary"],
    ),
    # 0005: a fused transposed pair beside a row sum, small and above the
    # reorder's cost bound
    _case(
        "    v1 = x0.sum(-1)\n    return (v1, x1 + x0.t(), x1 * x0.t())\n",
        [(6, 8), (8, 6)],
        ["reduce", "binary"],
    ),
    _case(
        "    v1 = x0.sum(-1)\n    return (v1, x1 + x0.t(), x1 * x0.t())\n",
        [(130, 512), (512, 130)],
        ["reduce", "binary"],
    ),
    # 0005: deps that are not memory reads: an input overwritten after the
    # reduction reads it (a weak dep), a reduction written back (a star dep)
    _case(
        "    v1 = (x0 + x1.t() * 0.0).sum(-1)\n    x1.copy_(x2 * v1)\n"
        "    return (v1,)\n",
        [(6, 8), (8, 6), (8, 6)],
        ["reduce", "binary"],
    ),
    _case(
        "    v1 = x2 * x1\n    v2 = (x0 * 0.0 + x1[:, None]).amax(-1)\n"
        "    x1.copy_(v2)\n    return (v1, v2)\n",
        [(6, 8), (6,), (8, 6)],
        ["reduce", "binary"],
    ),
    # 0005 0015: transposed walks that the reorder's cost guard weighs,
    # every op its own node: a buffer updated by index_put, a reshape
    # permuted, a reshape transposed, a regrouped pair
    _case(
        "    v1 = torch.index_put(x0 * 3, (torch.tensor([3, 100, 7]),), x3)\n"
        "    v2 = (v1 * 2 + 1).t()\n    return (v2 * x1 + x2 + v2.sin(),)\n",
        [(256, 512), (512, 256), (512, 256), (3, 512)],
        ["binary", "reshape", "unary"],
        config="seed",
    ),
    _case(
        "    v1 = (x0 * 2 + 1).reshape(2, 64, 1024).permute(2, 0, 1)\n"
        "    return (v1 * x3 + v1.sin(), x0.t() * x1 + x2)\n",
        [(256, 512), (512, 256), (512, 256), (1024, 2, 64)],
        ["binary", "reshape", "unary"],
        config="seed",
    ),
    _case(
        "    v1 = (x0 * 2 + 1).reshape(128, 1024).t()\n"
        "    return (v1 * x3 + v1.sin(), x0.t() * x1 + x2)\n",
        [(256, 512), (512, 256), (512, 256), (1024, 128)],
        ["binary", "reshape", "unary"],
        config="seed",
    ),
    _case(
        "    v1 = x0 * 2\n    v2 = v1.sin() + v1\n    v3 = v2.t()\n"
        "    return (v1, v2, v3 * x1 + x2 + v3.cos())\n",
        [(32, 48), (48, 32), (48, 32)],
        ["binary", "unary", "reshape"],
        config="seed",
    ),
    # 0005 0015: fused nodes whose loops merge to fuse: a product beside its
    # row sum, and a chain that ends flattened
    _case(
        "    v1 = x0 * 2\n    return (v1, v1.sum(-1))\n",
        [(4, 8, 16)],
        ["binary", "reduce"],
    ),
    _case(
        "    v1 = x0 * 2\n    v2 = v1 + x0 + x1\n"
        "    return (v1, v2, v2.flatten() + 1)\n",
        [(6, 8), (6, 8)],
        ["binary", "reshape"],
    ),
    # 0005: a reindexing refused from the deps; 0020's reindexed producer
    # with loop ordering after fusion off
    _case(
        "    return (x0.t() * x1 + x2, x0.reshape(4, 15).sum(1))\n",
        [(10, 6), (6, 10), (6, 10)],
        ["binary", "reshape", "reduce"],
    ),
    _case(
        "    v1 = torch.erf(x0)\n"
        "    return (F.group_norm(v1, 2, w1, w2, eps=1e-5), v1 * 3 + x0)\n",
        [(2, 8, 16)],
        ["unary", "norm", "binary"],
        weights=[(8,), (8,)],
        flags="without:loop_ordering_after_fusion",
    ),
    # 0008 0017: row sums without the rotating accumulators (the unroll's
    # requirement off), at one thread, and over rows too long to rotate
    _case(
        "    return (x0.sum(-1),)\n",
        [(8, 4096)],
        ["reduce"],
        flags="without:multi_accumulator_reductions",
    ),
    _case("    return (x0.sum(-1),)\n", [(8, 4096)], ["reduce"], threads=1),
    _case("    return (x0.sum(-1),)\n", [(2, 270000)], ["reduce"]),
    # 0014: softmax of a sine (bound by its math), over rows of 10 (no whole
    # vector), and a realized per-channel value beside a transposed read
    _case(
        "    return (torch.softmax(torch.sin(x0), dim=-1),)\n",
        [(64, 2056)],
        ["unary", "softmax"],
        cache_bytes=65536,
    ),
    _case(
        "    return (torch.softmax(x0, -1),)\n",
        [(4096, 10)],
        ["softmax"],
        cache_bytes=65536,
    ),
    _layout_case(
        "    v1 = x0\n"
        + "    v1 = v1 * 0.9 + 0.1\n" * 20
        + "    v2 = x2 + x1 * v1[:, :, None]\n    return (v1, v2)\n",
        [
            InputSpec((8, 64)),
            InputSpec((8, 64, 64), layout="transposed"),
            InputSpec((8, 64, 64)),
        ],
        ["binary"],
        cache_bytes=65536,
    ),
    # 0011 0014: softmax over the channels of one image, tiled
    _case(
        "    return (torch.softmax(x0, 1),)\n",
        [(1, 3, 256, 256)],
        ["softmax"],
        threads=2,
        cache_bytes=1048576,
    ),
    _case(
        "    return (torch.softmax(x0, 1),)\n",
        [(1, 3, 256, 256)],
        ["softmax"],
        threads=2,
        cache_bytes=1048576,
        config="seed",
    ),
    # 0019: log_softmax over channels whose pair stays cached; a row's
    # centering over 64 threads (too few rows to tile)
    _case(
        "    return (torch.log_softmax(x0, dim=1),)\n", [(2, 48, 32, 32)], ["softmax"]
    ),
    _case(
        "    return (x0 - x0.mean(-1, keepdim=True),)\n",
        [(32, 64)],
        ["reduce", "binary"],
        threads=64,
    ),
    # 0020: GroupNorm(4) of erf, a producer reindexed in front
    _case(
        "    return (F.group_norm(torch.erf(x0), 4, w1, w2, eps=1e-5),)\n",
        [(2, 32, 64)],
        ["unary", "norm"],
        weights=[(32,), (32,)],
    ),
    # 0009 0019: a permuted producer read back in its own order, with and
    # without 0012 (0019's requirement)
    *(
        _case(
            "    v1 = (x0 * x1 + x0).permute(1, 0, 2).contiguous()\n"
            "    return (v1, v1.permute(1, 0, 2).sum(-1))\n",
            [(8, 16, 33), (8, 16, 33)],
            ["binary", "reshape", "reduce"],
            flags=flags,
        )
        for flags in ("all", "without:outer_loop_regroup")
    ),
    # 0009: under dynamic shapes, statistics made static by a broadcast
    # beside a consumer whose loops stay symbolic
    _case(
        "    v1 = x0 + torch.zeros(8, 16, 33)\n    v2 = v1.amax(1, keepdim=True)\n"
        "    return ((v1 - v2).unsqueeze(-1) * x1,)\n",
        [(8, 16, 33), (5,)],
        ["reduce", "binary"],
        dynamic=True,
    ),
    # the speculation bound: softmax over the channels of a 1 KiB tensor
    # with the shipped defaults gets stock's loop orders and nests, with no
    # block fusion, prefetch or reorder asked (above the bound, or at bound 0
    # as the other seeds run, it is one nest)
    _case(
        "    v1 = torch.softmax(x0, dim=1)\n    return (v1,)\n",
        [(2, 8, 16)],
        ["softmax"],
        flags="shipped",
    ),
    # 0003: with every op its own node, GroupNorm's affine output fuses with
    # its SiLU before it meets the statistics: the split reindexes a fused
    # consumer, whose group follows its members'
    _case(
        "    v1 = F.silu(F.group_norm(x0, 2, w1, w2, eps=1e-5)) * 2\n"
        "    return (v1,)\n",
        [(2, 8, 16, 16)],
        ["norm", "unary", "binary"],
        weights=[(8,), (8,)],
        config="seed",
    ),
    # 0020: erf joins a fusion in front of its consumer, whose loops then
    # fail to merge (an inner loop 300 times the outer, 3 rows that no
    # re-tile balances on 2 threads): the fallback generates erf alone, or,
    # beside a softmax over strided columns, as an outer-loop node
    _case(
        "    v1 = torch.erf(x0)\n    v2 = v1[:, 0] + v1[:, 5] * 2.0\n"
        "    return (v1, v2)\n",
        [(3, 1024)],
        ["unary", "binary"],
        threads=2,
    ),
    _case(
        "    v1 = torch.erf(x0)\n    v2 = torch.softmax(v1[:, ::2], dim=1)\n"
        "    return (v1, v2)\n",
        [(3, 2048)],
        ["unary", "softmax"],
        threads=2,
    ),
    # 0009 0019: under dynamic shapes, a softmax over channels plus a gather:
    # the bytes a pair reads are symbolic, so neither fits the cache
    _case(
        "    v1 = x0 + torch.zeros(2, 3, 16, 64)\n"
        "    v2 = torch.exp(v1 - v1.amax(1, keepdim=True))\n"
        "    v3 = (x2.abs() * 3).long().clamp(0, 6)\n"
        "    return (v2 / v2.sum(1, keepdim=True) + x1[v3],)\n",
        [(2, 3, 16, 64), (7,), (64,)],
        ["softmax", "index"],
        dynamic=True,
    ),
    # 0009 0014: CPU flex attention is a C++ template (no loop body, no
    # max_autotune needed) whose consumer shares its two outer loops
    _case(
        "    from torch.nn.attention.flex_attention import flex_attention\n\n"
        "    v1 = flex_attention(x0, x1, x2)\n"
        "    return (v1 * w3.view(1, 2, 1, 1) + v1[:, :, :1],)\n",
        [(2, 2, 32, 16), (2, 2, 32, 16), (2, 2, 32, 16)],
        ["attention", "binary"],
        weights=[(2,)],
    ),
    # 0019: log_softmax over the channels of rows padded by one element:
    # the pixels do not merge, so the statistics keep a loop too many for
    # the tile (a small cache, so the pair is not kept as cached)
    _layout_case(
        "    v1 = torch.log_softmax(x0, dim=1)\n    return (v1,)\n",
        [InputSpec((2, 12, 8, 128), layout="offset")],
        ["softmax"],
        cache_bytes=65536,
    ),
    # 0019: log_softmax spelled out, with a second consumer of the max that
    # is asked while the statistics are tiled for the first
    _case(
        "    v1 = x0.amax(1, keepdim=True)\n"
        "    v2 = torch.log(torch.exp(x0 - v1).sum(1, keepdim=True))\n"
        "    return (x0 - v1 - v2, v1.sum())\n",
        [(2, 48, 32, 32)],
        ["reduce", "softmax"],
        cache_bytes=262144,
    ),
    # 0019's digits: a transposed producer read by a column sum through a
    # shifted flat view, and through slice, reshape and slice (reads that no
    # write stride composes)
    _case(
        "    v1 = (x0.t() * x1.t() + x2.t()).contiguous()\n"
        "    v2 = F.pad(v1.flatten()[1:], (0, 1)).view(v1.shape)\n"
        "    return (v1, v2.sum(0))\n",
        [(64, 48), (64, 48), (64, 48)],
        ["binary", "reshape", "reduce"],
    ),
    _case(
        "    v1 = (x0.t() * x1.t() + x2.t()).contiguous()\n"
        "    v2 = v1.flatten()[:3055].view(47, 65)[:, :64]\n"
        "    return (v1, v2.sum(0))\n",
        [(64, 48), (64, 48), (64, 48)],
        ["binary", "reshape", "reduce"],
    ),
    # 0009 0019, dynamic shapes: a transposed producer stored into a cat with
    # an input of symbolic width, whose rows then have a symbolic stride
    _case(
        "    v1 = torch.zeros(64, 48)\n"
        "    v2 = (x0 + v1).t() * (x1 + v1).t() + (x2 + v1).t()\n"
        "    return (torch.cat([v2, x3], dim=1), v2.sum(0))\n",
        [(64, 48), (64, 48), (64, 48), (48, 40)],
        ["binary", "cat", "reduce"],
        dynamic=True,
    ),
    # 0015: two pointwise nodes that read a vector by rows of (4, 16) and of
    # 64 share too little for the scheduler to merge their loops; the C++
    # backend's open-loop rule merges them; under the speculation bound
    # (shipped flags, a graph under 2 KiB) it answers as stock does
    _case(
        "    return (x0 * x2.view(8, 1, 1), x1 * x2.view(8, 1))\n",
        [(8, 4, 16), (8, 64), (8,)],
        ["binary"],
    ),
    _case(
        "    return (x0 * x2.view(4, 1), x1 * x2.view(4, 1, 1))\n",
        [(4, 8), (4, 8, 4), (4,)],
        ["binary"],
        flags="shipped",
    ),
    # 0015: flex attention whose score_mod reads a one-element bias that a
    # pointwise node reads too: merging loops to fuse them meets the template
    _case(
        "    from torch.nn.attention.flex_attention import flex_attention\n\n"
        "    def score_mod(score, b, h, q_idx, kv_idx):\n"
        "        return score + x3[0]\n\n"
        "    return (flex_attention(x0, x1, x2, score_mod=score_mod), x4 * x3)\n",
        [(1, 2, 64, 32), (1, 2, 64, 32), (1, 2, 64, 32), (1,), (8,)],
        ["attention", "binary"],
    ),
    # the scheduler with no kernel to schedule: a lone view
    _case("    return (x0.t(),)\n", [(6, 8)], ["reshape"], alone=True),
    # 0005 0015: GroupNorm's statistics alone over a channels-last map of
    # 3072 channels: an outer-loop fusion over all its loops merges them
    _layout_case(
        "    v1 = torch.ops.aten.native_group_norm(x0, None, None, 1, 3072, 16, 32,"
        " 1e-5)\n    return (v1[1], v1[2])\n",
        [InputSpec((1, 3072, 4, 4), layout="channels_last")],
        ["norm"],
    ),
    # 0002: two outer-loop fusions of row statistics at depth 2, fused
    # together: re-tiled at depth 1 their outer loops still differ (8, 2)
    _case(
        "    v1 = x0 * x1.view(12, 1)\n    v2 = v1.mean(-1)\n"
        "    v3 = ((v1 - v2[..., None]) ** 2).sum(-1)\n"
        "    v4 = v2.view(2, 3, 16) * x2.view(3, 1)\n    v5 = v4.sum(-1)\n"
        "    return (v5, ((v3.view(2, 3, 16) - v5[..., None]) ** 2).sum(-1))\n",
        [(8, 12, 16), (12,), (3,)],
        ["binary", "reduce"],
    ),
    # 0003: a split asked when fusion pairs are ranked, outside can_fuse: the
    # statistics' loops were merged by a later accepted pair (m.view(8, 1))
    # after the pair with the (2, 4, 4, 64) consumer was accepted at depth 2
    _case(
        "    m = x0.mean(dim=(2, 3), keepdim=True)\n"
        "    v1 = x0 - m + w2\n"
        "    v2 = x1 * m.view(8, 1)\n"
        "    return (v1, v2)\n",
        [(2, 4, 4, 64), (8, 256)],
        ["reduce", "binary"],
        weights=[(1, 4, 1, 1)],
    ),
    # 0020: with 0003's split off, erf's one loop split into (N, X*K) shares
    # only N with the amax over (N, K | X) whose stock outer fusion with its
    # row sums is over N: the backend's depth needs every level of the
    # shorter node equal, so the split pair is refused before it is scored
    _case(
        "    v1 = torch.erf(x0)\n    v2 = v1.transpose(1, 2).amax(-1)\n"
        "    v3 = v2.sum(-1)\n    return (v1, v3)\n",
        [(4, 24, 32)],
        ["unary", "reshape", "reduce", "reduce"],
        flags="without:outer_loop_split",
    ),
    # 0019: tiled statistics refused after their score (the peak-memory
    # heuristic: the max reads a matmul output, the output reads the log-sum,
    # two single-user buffers of one size): can_fuse's rollback restores the
    # statistics' loops and depth, and the pair asked again finds the
    # statistics marked tiled but untiled
    _case(
        "    v0 = (x1 @ x2).view(2, 1, 32, 32)\n"
        "    v1 = (x0 + v0).amax(1, keepdim=True)\n"
        "    v2 = torch.log(torch.exp(x0 - v1).sum(1, keepdim=True))\n"
        "    return (x0 - v1 - v2,)\n",
        [(2, 48, 32, 32), (64, 8), (8, 32)],
        ["binary", "reduce", "softmax"],
        cache_bytes=262144,
    ),
    # 0015: statistics over (N, G | H, W) fused with their consumers over
    # (N, G), then asked by a partner that reads them as (N * G, 1) to merge
    # their loops: an outer-loop fusion is left unmerged (0003's split off)
    _case(
        "    m = x0.mean(dim=(2, 3), keepdim=True)\n    v1 = x0 - m\n"
        "    s = (v1 * v1).mean(dim=(2, 3), keepdim=True)\n"
        "    return (v1 * torch.rsqrt(s + 1e-5), x1 * s.view(8, 1))\n",
        [(2, 4, 4, 64), (8, 256)],
        ["reduce", "binary", "norm"],
        config="seed",
        flags="without:outer_loop_split",
    ),
)


CORPUS = (
    # 0002 0004 0008 0010 0013 0014: LayerNorm over rows of 2056 (every other
    # row 32 bytes off a 64-byte line), 2 MiB under a 256 KiB "cache"
    _case(
        "    v1 = F.layer_norm(x0, (2056,), None, None, eps=1e-5)\n    return (v1,)\n",
        [(64, 2056)],
        ["norm"],
        cache_bytes=262144,
    ),
    # 0014's other path: softmax's last pass reads its exp buffer, not the
    # rows, so they are prefetched in the loop that matches the first pass's
    _case(
        "    v1 = torch.softmax(x0, dim=-1)\n    return (v1,)\n",
        [(64, 2056)],
        ["softmax"],
        cache_bytes=262144,
    ),
    # 0021 (early: a small program that mutant runs reach within their
    # budget): softmax over bfloat16 logits up to a few hundred (exps overflow
    # unless the max is subtracted; the result is bfloat16), over rows that
    # are not the last dim but are followed by a dim of size 1 only
    _case(
        "    v1 = torch.softmax(x0 * 48.0, dim=1)\n    return (v1,)\n",
        [(4, 40, 1)],
        ["softmax"],
        dtype="bfloat16",
    ),
    # 0017: sums whose reduction loop is parallel, where the rotation stays
    # rolled: over rows that cannot merge (a slice of wider rows), fewer rows
    # than threads, both reduction loops under one `omp for collapse(2)`
    # (nothing may stand between them); over all of x0, one parallel loop
    _case(
        "    v1 = x0[:, :3000]\n"
        "    v2 = torch.sum(v1, dim=(0, 1), keepdim=True)\n"
        "    v3 = torch.amax(x0, dim=(0, 1), keepdim=True)\n    return (v2, v3,)\n",
        [(3, 3007)],
        ["slice", "reduce"],
        threads=4,
    ),
    # 0022: GroupNorm over channels-last bfloat16 maps of 38 x 54 pixels
    # (two levels of channel sums, blocks of 12; 197 KB, just above the size
    # from which the sums pay) whose channels sit at different means (the
    # group's variance is mostly the spread of the channel means)
    FuzzCase(
        f"{SOURCE_HEADER}\n\ndef program(x0, w1, w2, w3):\n"
        "    v1 = F.group_norm(x0 + w1 * 4.0, 3, w2, w3, eps=1e-5)\n"
        "    return (v1,)\n",
        (
            InputSpec((2, 24, 38, 54), "bfloat16", layout="channels_last"),
            InputSpec((24, 1, 1), "bfloat16", role="weight"),
            InputSpec((24,), "bfloat16", role="weight"),
            InputSpec((24,), "bfloat16", role="weight"),
        ),
        kinds=("binary", "norm"),
    ),
    # 0022 without affine parameters, over 16 pixels (one block holds them
    # all) of 3072 channels: 192 KiB, the smallest size it takes
    FuzzCase(
        f"{SOURCE_HEADER}\n\ndef program(x0):\n"
        "    v1 = F.group_norm(x0, 32, eps=1e-5)\n"
        "    return (v1,)\n",
        (InputSpec((1, 3072, 4, 4), layout="channels_last"),),
        kinds=("norm",),
    ),
    # 0021 over a 0-d tensor (its one row is the whole tensor)
    _case(
        "    v1 = torch.softmax(x0.sum(), dim=0)\n    return (v1,)\n",
        [(4, 40)],
        ["reduce", "softmax"],
    ),
    # 0023: maxima over 197 rows (blocks of 16, a masked last block, which
    # must pad with -inf) of negative values, and a mean over the same rows
    # broadcast back over them (a chain: rows 2 KiB apart, so it splits)
    _case(
        "    v1 = torch.amax(x0 - 4.0, dim=1)\n"
        "    v2 = x0 - torch.mean(x0, dim=1, keepdim=True)\n    return (v1, v2,)\n",
        [(4, 197, 512)],
        ["reduce", "binary"],
    ),
    # 0009 0011: softmax over channels spelled out; its exp stays per block
    _case(
        "    v1 = torch.amax(x0, dim=(1,), keepdim=True)\n"
        "    v2 = torch.exp((x0 - v1).clamp(-6, 6))\n"
        "    v3 = torch.sum(v2, dim=(1,), keepdim=True)\n"
        "    v4 = v2 / (v3.abs() + 1)\n    return (v4,)\n",
        [(8, 16, 33)],
        ["reduce", "unary", "reduce", "binary"],
    ),
    # 0011's other side: the exp is also an output, so it keeps its buffer
    _case(
        "    v1 = torch.amax(x0, dim=(1,), keepdim=True)\n"
        "    v2 = torch.exp((x0 - v1).clamp(-6, 6))\n"
        "    v3 = torch.sum(v2, dim=(1,), keepdim=True)\n"
        "    v4 = v2 / (v3.abs() + 1)\n    return (v4, v2,)\n",
        [(8, 16, 33)],
        ["reduce", "unary", "reduce", "binary"],
    ),
    # 0009's bounds: the amax's flat storage shifted by one element, so the
    # last read of each block is the next block's first element
    _case(
        "    v1 = torch.amax(x0, dim=(1,), keepdim=True)\n"
        "    v2 = F.pad(v1.flatten()[1:], (0, 1)).view(v1.shape)\n"
        "    v3 = x0 - v2\n    return (v3,)\n",
        [(8, 16, 33)],
        ["reduce", "shift", "binary"],
        threads=2,
    ),
    # 0009's outer strides: the first block's amax read by every block
    _case(
        "    v1 = torch.amax(x0, dim=(1,), keepdim=True)\n"
        "    v2 = v1.narrow(0, 0, 1)\n    v3 = x0 - v2\n    return (v3,)\n",
        [(8, 16, 33)],
        ["reduce", "shift", "binary"],
        threads=2,
    ),
    # 0009's mutation check: an input updated in place by a reduction that
    # reads it in another block (flipped)
    _case(
        "    v1 = x1.flip(0)\n    v2 = torch.sum(x0 * v1, dim=(1,), keepdim=True)\n"
        "    v3 = x1.add_(torch.tanh(v2))\n    return (v3,)\n",
        [(8, 16, 33), (8, 1, 33)],
        ["shift", "binary", "reduce", "inplace"],
        threads=1,
    ),
    # 0005 0012: with loop ordering after fusion, log_softmax's log step
    # joins min and sum kernels that then fail to merge; over 6 rows for 4
    # threads, merging over the rows alone (0018) is refused too
    _case(
        "    v1 = torch.amin(x0, dim=(2,), keepdim=True)\n"
        "    v2 = torch.log_softmax(v1, dim=1)\n    return (v2, v1,)\n",
        [(6, 32, 5, 2)],
        ["reduce", "softmax"],
        threads=4,
    ),
    # 0005's rollback: in bfloat16 with every op its own node, merging the
    # loops of the fused min and log_softmax kernels makes them disagree
    # ((5, 6) against (5, 3, 2)), so loop ordering restores their order
    _case(
        "    v1 = torch.amin(x0, dim=(2,), keepdim=True)\n"
        "    v2 = torch.log_softmax(v1, dim=1)\n    return (v2, v1,)\n",
        [(5, 3, 15, 2)],
        ["reduce", "softmax"],
        dtype="bfloat16",
        config="seed",
    ),
    # 0006 0007: a strided column's erf chain, centered and stacked
    _case(
        "    v1 = x0[:, :, 16]\n    v2 = F.softplus(v1)\n    v3 = torch.erf(v1)\n"
        "    v4 = v2 + v3\n    v5 = torch.mean(v4, dim=(-1,), keepdim=True)\n"
        "    v6 = v4 - v5\n    v7 = v6 * v3\n"
        "    v8 = torch.stack([v6, v3, v7], dim=-1)\n    return (v8,)\n",
        [(4, 8, 64)],
        ["slice", "unary", "unary", "binary", "reduce", "binary", "binary", "cat"],
    ),
    # 0005: a reorder toward the column reduction (strided traffic unchanged)
    _case(
        "    v1 = x0.permute(1, 0).contiguous()\n    v2 = v1 * 0.5 + 1.25\n"
        "    v3 = torch.sum(v2, dim=(0,), keepdim=True)\n    v4 = v2 + v3\n"
        "    return (v4,)\n",
        [(32, 48)],
        ["permute", "unary", "reduce", "binary"],
    ),
    # dynamic shapes: symbolic rows, sizes and steps everywhere the
    # features read sizes (split, two-step variance, streaming, prefetch);
    # a bfloat16 output too large to stay cached (streams float32 only)
    _case(
        "    v1 = F.layer_norm(x0, (1024,), None, None, eps=1e-5)\n    return (v1,)\n",
        [(32, 1024)],
        ["norm"],
        dtype="bfloat16",
        dynamic=True,
        cache_bytes=65536,
    ),
    # symbolic GroupNorm sizes (distinct, so no two dims share a symbol)
    # where loops stay merged: the split sees symbolic sizes and refuses
    _case(
        "    v1 = F.group_norm(x0, 4, w1, w2, eps=1e-5)\n    return (v1,)\n",
        [(3, 8, 10)],
        ["norm"],
        weights=[(8,), (8,)],
        dynamic=True,
        flags="shipped",
    ),
    # 0018: RMS norm, then RoPE on interleaved pairs (stack, flatten): fused
    # over (B, H, S) the RoPE kernel would lose its 2-D tile and run scalar,
    # so the kernels merge over (B, H)
    _case(
        "    v1 = x0 * torch.rsqrt(x0.pow(2).mean(-1, keepdim=True) + 1e-6)\n"
        "    v2 = v1.reshape(2, 4, 16, 8, 2)\n    a, b = v2[..., 0], v2[..., 1]\n"
        "    v3 = torch.stack([a * w1 - b * w2, a * w2 + b * w1], dim=-1)\n"
        "    return (v3.flatten(-2),)\n",
        [(2, 4, 16, 16)],
        ["norm", "reshape", "slice", "binary", "cat"],
        weights=[(16, 8), (16, 8)],
    ),
    # 0014's guard on the other path: the first pass sums rows of two loops
    # that cannot merge (a slice), the last pass reads another input over
    # one loop; no row of the first pass is prefetched there, its index
    # names a loop the last pass does not have
    _case(
        "    v1 = x0[:, :, :32]\n    v2 = torch.sum(v1, dim=(1, 2), keepdim=True)\n"
        "    v3 = x1 - v2.flatten(1)\n    return (v3,)\n",
        [(64, 16, 33), (64, 40)],
        ["slice", "reduce", "binary"],
        cache_bytes=65536,
    ),
    # 0015's reduction-first rule: a row sum and an unrelated pointwise node
    # over the same memory flattened, (8, 48) against (384,); they share
    # their reads but only a pointwise node over (rows + row) loops may join
    # the reduction's kernel
    _case(
        "    v1 = torch.sum(x0, dim=(-1,), keepdim=True)\n    v2 = x0.flatten() * 2\n"
        "    return (v1, v2,)\n",
        [(8, 48)],
        ["reduce", "reshape", "unary"],
    ),
    # 0019: softmax over 3 channels of images over 0009's block budget
    # (3x128x384 floats, 576 KiB): both kernels fuse over tiles of the
    # pixel loop; the roll reads the previous pixel, across tile borders
    _case(
        "    v1 = torch.softmax(x0, dim=1)\n"
        "    v2 = torch.exp(x0 - x0.amax(1, keepdim=True))\n"
        "    v3 = torch.roll(v2, 1, -1) / v2.sum(1, keepdim=True)\n"
        "    return (v1, v3,)\n",
        [(2, 3, 128, 384)],
        ["softmax", "reduce", "binary"],
    ),
    # 0019 over one image: log_softmax's statistic loops over (P) and its
    # output over (C, P), no loop shared until the pixel loop is tiled; the
    # roll's quotient reads the previous pixel, across tile borders
    _case(
        "    v1 = torch.log_softmax(x0, dim=1)\n"
        "    v2 = torch.exp(x0 - x0.amax(1, keepdim=True))\n"
        "    v3 = torch.roll(v2, 1, -1) / v2.sum(1, keepdim=True)\n"
        "    return (v1, v3,)\n",
        [(1, 3, 128, 384)],
        ["softmax", "reduce", "binary"],
    ),
    # 0019 on statistics fused over (N, H, W): log_softmax over 48 channels
    # (a 768 KiB pair under a 256 KiB "cache") joins its output over pixel
    # tiles
    _case(
        "    v1 = torch.log_softmax(x0, dim=1)\n    return (v1,)\n",
        [(2, 48, 32, 32)],
        ["softmax"],
        cache_bytes=262144,
    ),
    # ... where the output reads the statistics of the previous pixel,
    # across tile borders
    _case(
        "    v1 = x0.amax(1, keepdim=True)\n"
        "    v2 = (x0 - v1).exp().sum(1, keepdim=True).log()\n"
        "    v3 = x0 - torch.roll(v1 + v2, 1, -1)\n"
        "    return (v3,)\n",
        [(2, 48, 1024)],
        ["reduce", "unary", "binary"],
        cache_bytes=262144,
    ),
    # ... with a partner flag off: without 0019's tiles the block checks
    # are 0009's alone; without 0012's regroup a pair whose merge might
    # fail is not extended over tiles
    *(
        _case(
            "    v1 = torch.log_softmax(x0, dim=1)\n    return (v1,)\n",
            [(2, 48, 32, 32)],
            ["softmax"],
            cache_bytes=262144,
            flags=f"without:{flag}",
        )
        for flag in ("outer_block_tiles", "outer_loop_regroup")
    ),
    # ... over 150 channels: no tile's block fits in L1, the smallest in L2
    _case(
        "    v1 = torch.log_softmax(x0, dim=1)\n    return (v1,)\n",
        [(2, 150, 16, 16)],
        ["softmax"],
        cache_bytes=262144,
    ),
    # 0020: erf stored once before GroupNorm(4, 8) over (1, 8, 2), whose
    # groups of 4 are unrolled: erf's merged loop of 16 is split into the 4
    # groups and joins the statistics' fusion in front
    _case(
        "    v1 = F.group_norm(torch.erf(x0), 4, w1, w2, eps=1e-5)\n    return (v1,)\n",
        [(1, 8, 2)],
        ["unary", "norm"],
        weights=[(8,), (8,)],
    ),
    # ... and without 0009's block fusion, which 0020 extends: no join
    _case(
        "    v1 = F.group_norm(torch.erf(x0), 4, w1, w2, eps=1e-5)\n    return (v1,)\n",
        [(1, 8, 2)],
        ["unary", "norm"],
        weights=[(8,), (8,)],
        flags="without:outer_block_fusion",
    ),
    # 0020 on a UNet block (channels-last maps): the residual sum's store and
    # its store into the skip concat (a slice of 64 of 128 channels) fuse,
    # and only the first merges to one loop; the split into GroupNorm(8)'s
    # groups must leave such a producer apart (0020-first-member-merged)
    FuzzCase(
        f"{SOURCE_HEADER}\n\ndef program(x0, x1, x2, x3, x4, w5, w6, w7):\n"
        "    v1 = x0 + x1 + x2\n"
        "    v2 = v1 + x3 + x4\n"
        "    v3 = F.silu(F.group_norm(v2, 8, w5, w6, eps=1e-5))\n"
        "    v4 = torch.cat([v2 + F.conv2d(v3, w7), v1], dim=1)\n"
        "    return (v4,)\n",
        tuple(InputSpec((2, 64, 4, 4), layout="channels_last") for _ in range(5))
        + (
            InputSpec((64,), role="weight"),
            InputSpec((64,), role="weight"),
            InputSpec((64, 64, 1, 1), layout="channels_last", role="weight"),
        ),
        kinds=("binary", "norm", "unary", "cat"),
    ),
    # 0005's merge after fusion over symbolic sizes: softmax over the rows
    # of x0 (s0, s1, s2) read as (s1, s0, s2), fused over the rows (s1, s0),
    # which cannot merge; the fused levels are the prefix whose product is
    # the outer extent s0*s1, and a symbolic size can be compared with it
    # for equality only (0005-prefix-at-least: `>=` has no truth value)
    _case(
        "    v1 = torch.softmax(x0.transpose(0, 1), dim=-1)\n    return (v1,)\n",
        [(6, 4, 40)],
        ["permute", "softmax"],
        dynamic=True,
    ),
    # 0015's merge to fuse, members of a fused node: v1 and v2 fuse over
    # (6, 8); v1's loops merge to (48,), v2's cannot (a slice of x1), so
    # the pair may not merge to join v3 over v2 flattened, (48,)
    # (0015-members-merged-apart: the members' groups then differ in codegen)
    _case(
        "    v1 = x0 * 2\n    v2 = v1 + x0 + x1[:, :8]\n    v3 = v2.flatten() + 1\n"
        "    return (v1, v2, v3,)\n",
        [(6, 8), (6, 16)],
        ["unary", "slice", "binary", "reshape", "unary"],
    ),
    # 0018 at a depth whose last fused level a kernel would tile: a transpose
    # (2-D tile over its rows s and its last loop) and a sum over half of
    # each of its rows, fused block-wise over (b, s, h); the transpose runs
    # scalar unless s is tiled, so they merge over b alone, never over (b, s)
    # (0018-one-level-unchecked: merged over (b, s) in steps of the tile)
    _case(
        "    v1 = (x0.permute(0, 3, 2, 1) * 2).contiguous()\n"
        "    v2 = torch.sum(v1[..., :8], dim=(-1,))\n    return (v1, v2,)\n",
        [(2, 16, 2, 16)],
        ["permute", "unary", "slice", "reduce"],
        threads=1,
    ),
    # 0003's split, exact only: row sums over (4, 3, 2) and their sums over
    # each of the 4 blocks fuse over the 4 rows (0009); a consumer of the
    # row sums as (6, 4) shares no outer extent with them: 6 rows do not
    # split into 4 (0003-inexact-split: (4, 4), a third of it left out)
    _case(
        "    v1 = torch.sum(x0, dim=(-1,))\n    v2 = torch.sum(v1, dim=(1, 2))\n"
        "    v3 = v1.reshape(6, 4) * x1\n    return (v2, v3,)\n",
        [(4, 3, 2, 64), (6, 4)],
        ["reduce", "reduce", "reshape", "binary"],
        threads=2,
    ),
    # 0003's split of a consumer whose members share one iteration space:
    # v2 over (2, 4) and v3 over (2, 3), fused block-wise over 2 rows
    # (0009), after 8 row sums that v2 reads as (2, 4); v2 alone would
    # split to (8,), v3 not (0003-members-not-aligned: both reindexed)
    _case(
        "    v1 = torch.sum(x0, dim=(-1,))\n    v2 = v1.reshape(2, 4) * x1\n"
        "    v3 = v2[:, 1:] * 2\n    return (v2, v3,)\n",
        [(8, 64), (2, 4)],
        ["reduce", "reshape", "binary", "slice", "unary"],
        threads=2,
    ),
    # 0012: erf before LayerNorm(4096) over two rows, every small op
    # realized, 4 threads: the fused statistics and output kernels fail to
    # merge with erf's and are regrouped
    _case(
        "    v1 = F.layer_norm(torch.erf(x0), (4096,), None, None, eps=1e-5)\n"
        "    return (v1,)\n",
        [(2, 4096)],
        ["unary", "norm"],
        config="seed",
        threads=4,
    ),
    # 0023's list of reductions that may split: argmax and argmin over the
    # middle dim of (2, 128, 512), 256 KiB of rows under each output index
    # (only sums, products, max, min and any combine their blocks by the
    # same reduction), and a variance over it, lowered to sums that do split
    _case(
        "    v1 = torch.argmax(x0, dim=1, keepdim=False)\n"
        "    v2 = torch.argmin(x0, dim=1, keepdim=True)\n"
        "    v3 = torch.var(x0, dim=(1,), keepdim=False, correction=1)\n"
        "    return (v1, v2, v3,)\n",
        [(2, 128, 512)],
        ["reduce", "reduce", "reduce"],
    ),
    # 0013's alignment test: softmax rows of 512 (whole vectors, streamed
    # under a 64 KiB "cache") written in place into a concatenation after
    # 3000 floats, 32 bytes past a 64-byte boundary
    _case(
        "    v1 = torch.exp(x0.clamp(-6, 6))\n    v2 = torch.softmax(x1, dim=-1)\n"
        "    v3 = torch.cat([v1.reshape((-1,)), v2.reshape((-1,))], dim=0)\n"
        "    return (v3,)\n",
        [(3, 1000), (256, 512)],
        ["unary", "softmax", "reshape", "reshape", "cat"],
        cache_bytes=65536,
    ),
    # 0003: GroupNorm(2, 4) with weight and bias: its affine step splits from
    # (N*C, L) to (N*G, C/G, L)
    _case(
        "    v1 = F.group_norm(x0, 2, w1, w2, eps=1e-5)\n    return (v1,)\n",
        [(4, 4, 4)],
        ["norm"],
        weights=[(4,), (4,)],
    ),
    # Branch reach: each program below takes decision branches that neither
    # the seeds above nor the generator's programs take (branch_reach.py)
    *REACH_SEEDS,
)


def corpus_for(worker: int, workers: int) -> tuple[FuzzCase, ...]:
    """This worker's share of the seed programs."""
    return CORPUS[worker::workers]
