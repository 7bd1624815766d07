"""A failed outer-loop fusion merges over fewer outer loops.

cpp_fusion/outer_loop/shallower.py retries a node whose kernels do not merge at the
scheduler's depth at each shallower depth, as a re-tiling attempt, where the
fused loop still feeds every thread.  The case: RMS norm, then RoPE on
interleaved pairs (upstream's test_qknorm_interleaved_rope_fusion), whose
RoPE kernel needs a 2-D tile over S and the pair index.
"""

from __future__ import annotations

import pytest
import torch
from compile_utils import (
    compile_shipped_and_inspect,
    host_has_simd_width,
    requires_vectors,
    vector_lanes,
)
from torch.testing import FileCheck

pytestmark = requires_vectors


def qknorm_interleaved_rope(q, weight, cos, sin):
    q = q * torch.rsqrt(q.pow(2).mean(-1, keepdim=True) + 1e-6) * weight
    pairs = q.reshape(*q.shape[:-1], -1, 2)
    a, b = pairs[..., 0], pairs[..., 1]
    rotated = [a * cos - b * sin, a * sin + b * cos]
    return torch.stack(rotated, dim=-1).flatten(-2)


def qknorm_args(batch, heads, seq=128, dim=64):
    return (
        torch.randn(batch, heads, seq, dim),
        torch.randn(dim),
        torch.randn(1, 1, seq, dim // 2),
        torch.randn(1, 1, seq, dim // 2),
    )


def _compile(args, threads, **flags):
    extra = {"cpp.threads": threads, **flags}
    return compile_shipped_and_inspect(
        qknorm_interleaved_rope, args, extra_config=extra
    )


def test_norm_and_rope_merge_over_batch_and_heads():
    args = qknorm_args(4, 8)
    stock = compile_shipped_and_inspect(
        qknorm_interleaved_rope, args, overlay=False, extra_config={"cpp.threads": 2}
    )
    patched = _compile(args, threads=2)
    assert (stock.nests, patched.nests) == ([2], [1])
    assert patched.retiled == 1
    # One nest over (B, H): the norm's pass over S, then the RoPE pass with
    # its 2-D tile over S and the pairs kept (both loops step by the lanes).
    lanes = vector_lanes()
    (kernel,) = patched.kernels
    FileCheck().check_count("#pragma omp for", 1, exactly=True).check(
        "x1<static_cast<int64_t>(8L)"
    ).check(f"x2+=static_cast<int64_t>({lanes}L)").check(
        f"x3+=static_cast<int64_t>({lanes}L)"
    ).run(kernel)


def test_flag_off_keeps_the_two_nests():
    args = qknorm_args(4, 8)
    off = _compile(args, threads=2, **{"cpp.outer_loop_shallower_fusion": False})
    assert off.nests == [2]
    assert off.retiled == 0


def test_a_fused_loop_shorter_than_the_threads_is_refused():
    # (B, H) = (1, 2): two outer iterations feed two threads, not four.
    args = qknorm_args(1, 2)
    assert _compile(args, threads=2).nests == [1]
    assert _compile(args, threads=4).nests == [2]


@pytest.mark.skipif(not host_has_simd_width(512), reason="needs AVX512's lanes")
def test_merges_before_regrouping():
    # The fuzzer's program of test_outer_loop_regroup.py: four members fail
    # to merge over (125, 2); over the 125 rows they merge, where regrouping
    # alone leaves the last member apart (3 nests).
    def amin_then_log_softmax(x):
        v1 = torch.amin(x, dim=(2,), keepdim=True)
        return torch.log_softmax(v1, dim=1), v1

    args = (torch.randn(125, 32, 5, 2),)
    avx512 = {"cpp.simdlen": 512}
    stock = compile_shipped_and_inspect(
        amin_then_log_softmax, args, overlay=False, extra_config=avx512
    )
    patched = compile_shipped_and_inspect(
        amin_then_log_softmax, args, extra_config=avx512
    )
    assert (stock.nests, patched.nests) == ([4], [2])
    assert patched.retiled == 1
