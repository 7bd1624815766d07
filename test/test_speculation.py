"""The speculation bound: graphs whose every tensor is under it get stock's
answers from the speculative analyses (cpp_fusion/speculation.py).

compile_utils.py sets the bound to 0 for the other tests, whose programs
are small on purpose; each test here sets it itself.
"""

from __future__ import annotations

import torch
from compile_utils import compile_shipped_and_inspect, recording

from torch._inductor.codegen.cpp_fusion import speculation
from torch._inductor.codegen.cpp_fusion.costs import (
    SPECULATION_MIN_BYTES_ENV,
    SPECULATION_MIN_TENSOR_BYTES,
)
from torch._inductor.codegen.cpp_fusion.scheduling import block_fusion, loop_ordering

# 0023 splits reductions over 32 rows or more; these pin 0009's fusion alone
ONE_LEVEL = {"cpp.outer_reduction_blocks": False}
SMALL = (2, 8, 16)  # 1 KiB a tensor
AT_THE_BOUND = (4, 8, 16)  # 2 KiB
LARGE = (8, 16, 784)  # 392 KiB


def softmax_dim1(x):
    return torch.softmax(x, 1)


def _compile(monkeypatch, shape, bound, **kwargs):
    """Nests and the speculative calls made compiling softmax over dim 1."""
    monkeypatch.setenv(SPECULATION_MIN_BYTES_ENV, str(bound))
    scores, merges = [], []
    monkeypatch.setattr(
        block_fusion,
        "block_fusion_score_at",
        recording(block_fusion.block_fusion_score_at, scores),
    )
    monkeypatch.setattr(
        loop_ordering,
        "merge_loops_consistently",
        recording(loop_ordering.merge_loops_consistently, merges),
    )
    x = torch.randn(shape)
    compiled = compile_shipped_and_inspect(
        softmax_dim1, (x,), extra_config=ONE_LEVEL, **kwargs
    )
    return compiled, len(scores), len(merges)


def test_the_shapes_sit_where_their_names_say():
    assert torch.randn(SMALL).nbytes < SPECULATION_MIN_TENSOR_BYTES
    assert torch.randn(AT_THE_BOUND).nbytes == SPECULATION_MIN_TENSOR_BYTES
    assert torch.randn(LARGE).nbytes > SPECULATION_MIN_TENSOR_BYTES


def test_a_small_graph_gets_stock_nests_without_asking(monkeypatch):
    stock = compile_shipped_and_inspect(
        softmax_dim1, (torch.randn(SMALL),), overlay=False
    )
    gated, scores, merges = _compile(monkeypatch, SMALL, SPECULATION_MIN_TENSOR_BYTES)
    assert gated.nests == stock.nests == [4]
    assert scores == merges == 0


def test_the_same_graph_fuses_when_speculating_everywhere(monkeypatch):
    fused, scores, merges = _compile(monkeypatch, SMALL, 0)
    assert fused.nests == [1]
    assert scores > 0 and merges > 0


def test_a_graph_above_the_bound_is_not_gated(monkeypatch):
    shipped, scores, _ = _compile(monkeypatch, LARGE, SPECULATION_MIN_TENSOR_BYTES)
    everywhere, _, _ = _compile(monkeypatch, LARGE, 0)
    assert shipped.nests == everywhere.nests == [1]
    assert shipped.kernels == everywhere.kernels
    assert scores > 0


def test_a_graph_at_the_bound_speculates(monkeypatch):
    shipped, scores, _ = _compile(
        monkeypatch, AT_THE_BOUND, SPECULATION_MIN_TENSOR_BYTES
    )
    assert shipped.nests == [1]
    assert scores > 0


def test_a_symbolic_size_counts_as_large(monkeypatch):
    _, scores, _ = _compile(
        monkeypatch, SMALL, SPECULATION_MIN_TENSOR_BYTES, dynamic=True
    )
    assert scores > 0


def test_outside_a_graph_it_speculates(monkeypatch):
    monkeypatch.setenv(SPECULATION_MIN_BYTES_ENV, str(1 << 40))
    assert speculation.worth_speculating()
