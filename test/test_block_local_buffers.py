"""Per-iteration local buffers in outer-loop fusions across loop orders.

Softmax over channels fuses over the batch loop
(cpp_fusion/scheduling/block_fusion.py); its exp is written and re-read within
one batch iteration.  cpp_fusion/outer_loop/block_local_buffers.py gives such
an intermediate a local buffer of one block instead of a tensor-sized global
one.  The tests check agreement with
eager, the local buffer in the kernel, the allocations the wrapper no longer
makes, and that a buffer read outside the fusion stays global.
"""

from __future__ import annotations

import re

import torch
from compile_utils import compile_shipped_and_inspect
from torch._inductor import metrics


def softmax_channels(x):
    return torch.softmax(x, 1)


def local_buffer_counts() -> list[int]:
    return [c.local_buffer_number for c in metrics.cpp_outer_loop_fused_inner_counts]


def allocations_of(shape, code: str) -> int:
    return len(re.findall(re.escape(f"empty_strided_cpu({shape}"), code))


def test_softmax_over_channels_keeps_its_exp_in_a_block_buffer():
    x = torch.randn(4, 16, 28, 28)
    stock = compile_shipped_and_inspect(softmax_channels, (x,), overlay=False)
    patched = compile_shipped_and_inspect(softmax_channels, (x,))
    assert patched.nests == [1]
    assert local_buffer_counts() == [1]
    # one block: 16 channels x 784 pixels, zero-based per batch iteration
    assert "std::make_unique<float []>(12544L)" in patched.code
    # indexed by channel and pixel: loadu(buf + i) in vector kernels, buf[i]
    # in scalar ones
    index = "static_cast<int64_t>(x2 + 784L*x1)"
    assert re.search(rf"local_buffer_data_0(?: \+ |\[){re.escape(index)}", patched.code)
    # stock divides in place over the exp; the fused kernel's output is the
    # only tensor-sized buffer too (without the local buffer: exp and output)
    assert allocations_of((4, 16, 28, 28), stock.code) == 1
    assert allocations_of((4, 16, 28, 28), patched.code) == 1


def test_bfloat16_with_vector_tails():
    x = torch.randn(6, 17, 99, dtype=torch.bfloat16)
    patched = compile_shipped_and_inspect(softmax_channels, (x,))
    assert patched.nests == [1]
    assert local_buffer_counts() == [1]


def test_intermediate_read_outside_the_fusion_stays_global():
    def softmax_and_exp(x):
        e = (x - x.amax(1, keepdim=True)).exp()
        return e / e.sum(1, keepdim=True), e

    x = torch.randn(4, 16, 784)
    patched = compile_shipped_and_inspect(softmax_and_exp, (x,))
    assert patched.nests == [1]
    assert local_buffer_counts() == [0]
