"""Whether a graph is large enough for the speculative fusion analyses.

Loop ordering after fusion (0005, with 0015's extra reorder rounds), block
fusion with its tiles and prepends (0009, 0019, 0020) and the prefetch
planner (0014) look for loop rewrites that save memory traffic: pair by
pair, rebuilding and reindexing loop bodies, or load by load.  Where every
tensor of a graph is a few vectors long there is no traffic to save and
next to no loop overhead, and the analyses still cost compile time: a graph
of small linears paid for them and generated stock's code byte for byte.
Such a graph gets stock's answers, and none of those analyses runs.

The bound is on the largest tensor the graph takes or computes, from the
FX graph's values (``meta["val"]``): they are all known before lowering
starts, so every answer about one graph is the same, including the one
lowering freezes when it first asks the backend's features.  The answer is
kept on the graph, the bound read once per graph.  A symbolic size counts
as large.  The bound is ``costs.SPECULATION_MIN_TENSOR_BYTES``;
``$TORCHINDUCTOR_CPP_SPECULATION_MIN_BYTES`` overrides it, and 0
speculates on every graph (the fuzzer's programs are small on purpose).
"""

from __future__ import annotations

import os

import sympy
import torch
from torch._inductor.virtualized import V
from torch.utils._pytree import tree_leaves

from .costs import SPECULATION_MIN_BYTES_ENV, SPECULATION_MIN_TENSOR_BYTES

# The answer for a graph, kept on its GraphLowering: one compile
_ANSWER = "cpp_fusion_worth_speculating"


def worth_speculating() -> bool:
    """False while lowering or scheduling a graph whose every tensor is below
    the bound; True otherwise (outside a graph, too)."""
    graph = V.graph
    answer = getattr(graph, _ANSWER, None)
    if answer is None:
        if not isinstance(getattr(graph, "graph", None), torch.fx.Graph):
            return True  # outside a compile
        bound = min_tensor_bytes()
        answer = bound <= 0 or _largest_tensor_bytes(graph) >= bound
        setattr(graph, _ANSWER, answer)
    return answer


def min_tensor_bytes() -> int:
    override = os.environ.get(SPECULATION_MIN_BYTES_ENV, "")
    return int(override) if override.isdigit() else SPECULATION_MIN_TENSOR_BYTES


def _largest_tensor_bytes(graph) -> float:
    largest = 0.0
    for node in graph.graph.nodes:
        for value in tree_leaves(node.meta.get("val")):
            if isinstance(value, torch.Tensor):
                largest = max(largest, _tensor_bytes(value))
    return largest


def _tensor_bytes(tensor: torch.Tensor) -> float:
    numel = sympy.sympify(tensor.numel())
    if not numel.is_number:
        return float("inf")  # a symbolic size counts as large
    return int(numel) * tensor.element_size()
