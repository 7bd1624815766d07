"""Softmax on CPU multiplies by the reciprocal of its sum, as ATen does.

The decomposition that Inductor compiles divides every element by its
row's sum: one vector division per vector of output.  On x86 a vector
division issues at a fraction of a multiply's rate, and softmax's
normalization pass does little else, so the compiled kernel ran slower
than ATen's, which computes ``1 / sum`` once per row and multiplies
(``vec_host_softmax_lastdim`` and ``_vec_softmax`` in ATen's
SoftMaxKernel.cpp).

Over the last dim (rows contiguous in memory once the decomposition makes
``x`` contiguous) the decomposition here computes
``exp(x - max) * reciprocal(sum)``.  The
reciprocal is a pointwise op on the row's sum, inlined into the output
loop as a scalar computed from a value the loop reads at one index;
``cpp.hoist_invariant_loads`` makes that value a local copy, so the
compiler computes the reciprocal once per row (without it, nothing here
changes).

Why the rewrite is safe here and not for any division by a loop invariant:
after the max is subtracted, the row's largest term is ``exp(0) = 1``, so a
row of finite values sums to between 1 and its length.  Its reciprocal is a
normal float, and ``x * (1 / s)`` differs from ``x / s`` by at most one
rounding; for a divisor near the smallest normal float the reciprocal would
overflow.  Rows holding ``inf`` or ``nan``, or all ``-inf``, give ``nan``
either way.

Behind ``config.cpp.softmax_reciprocal``.  ``decomposition.py`` decomposes
``aten._softmax.default`` as the backend of the input's device decides
(``BaseScheduling.decompose``); ``CppScheduling``'s table sends it to
``softmax``, so the input is on the CPU under the C++ backend.  ``softmax``
calls the core decomposition when the flag is off or the softmax is over a
middle dim.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch._decomp import decompositions as core
from torch._prims_common import (
    ELEMENTWISE_TYPE_PROMOTION_KIND,
    canonicalize_dim,
    elementwise_dtypes,
)
from torch.fx.experimental.symbolic_shapes import statically_known_true

from .. import flag_requirements


def multiplies_by_reciprocal(x: torch.Tensor, dim: int) -> bool:
    """Whether this softmax, which the C++ backend decomposes, multiplies:
    the flag is on and its rows are contiguous once the decomposition makes
    x so.

    Only with ``cpp.hoist_invariant_loads`` (flag_requirements.py): without
    it the output loop reloads the sum in every iteration (its stores may
    alias it), and the compiler computes the reciprocal there too, a scalar
    division and a multiply per vector where stock has one vector division.
    """
    return flag_requirements.enabled("softmax_reciprocal") and _over_contiguous_rows(
        x, dim
    )


def _over_contiguous_rows(x: torch.Tensor, dim: int) -> bool:
    """Every dim after ``dim`` has size 1: each row's sum is one scalar.

    Over a middle dim the sums are vectors across the inner dim, and the
    output loop would compute a vector reciprocal per vector it multiplies:
    a division and a multiply where stock divides.
    """
    if x.ndim == 0:
        return True
    inner = x.shape[canonicalize_dim(x.ndim, dim) + 1 :]
    return all(statically_known_true(size == 1) for size in inner)


def softmax(
    core_softmax: Callable[..., torch.Tensor],
    x: torch.Tensor,
    dim: int,
    half_to_float: bool,
) -> torch.Tensor:
    """``aten._softmax``; ``core_softmax`` is the core decomposition."""
    if not multiplies_by_reciprocal(x, dim):
        return core_softmax(x, dim, half_to_float)
    # Same dtypes and layout as the core decomposition: a contiguous result,
    # computed in the promoted dtype (float for half and bfloat16).
    x = x.contiguous()
    computation_dtype, result_dtype = elementwise_dtypes(
        x, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT
    )
    x = x.to(computation_dtype)
    unnormalized = torch.exp(x - core._softmax_unbacked_safe_amax(x, dim))
    result = unnormalized * torch.reciprocal(unnormalized.sum(dim, keepdim=True))
    return result if half_to_float else result.to(result_dtype)
