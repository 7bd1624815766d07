"""Compile a program with the overlay flags on or off and read back its loops.

Every feature test asks the same three things of a compiled program: does it
agree with eager, how many loop nests did the C++ backend emit, and what did
the overlay's counters record.  ``compile_and_inspect`` answers all three.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence

import pytest
import torch
from torch._dynamo import config as dynamo_config
from torch._functorch import config as functorch_config
from torch._inductor import config, cpu_vec_isa, metrics
from torch._inductor.utils import run_and_get_cpp_code

from fusion_overlay.flags import config_patch, shipped_config
from tools.loopnest import analyze

# The feature tests' programs are small on purpose, below the bound under
# which the overlay skips its speculative analyses (cpp_fusion/speculation.py):
# they speculate on every graph, in this process and the ones it starts,
# unless the caller set the bound.  test_speculation.py tests the bound.
os.environ.setdefault("TORCHINDUCTOR_CPP_SPECULATION_MIN_BYTES", "0")


def vector_lanes(dtype: torch.dtype = torch.float32) -> int:
    """Lanes of ``dtype`` in the vector ISA Inductor picks here, 0 if none
    ($ATEN_CPU_CAPABILITY=default, or a CPU without one)."""
    isa = cpu_vec_isa.pick_vec_isa()
    return isa.nelements(dtype) if isa else 0


def host_has_simd_width(bits: int) -> bool:
    """Whether ``config.cpp.simdlen = bits`` picks an ISA on this CPU."""
    return any(isa.bit_width() == bits for isa in cpu_vec_isa.valid_vec_isa_list())


# Tests of a feature that only acts on vector loads or stores.
requires_vectors = pytest.mark.skipif(
    vector_lanes() == 0, reason="no vector ISA: the feature acts on vector code"
)


# The seed report's config: every small op becomes its own scheduler node.
SEED_CONFIG = {"realize_opcount_threshold": 1, "inplace_buffers": False}


@dataclasses.dataclass
class Compiled:
    nests: list[int]  # loop nests per C++ kernel function
    retiled: int  # metrics.cpp_outer_loop_retiled
    outer_fused: int  # outer-loop fusions that merged (stock counter)
    code: str
    reordered: int = 0  # metrics.num_loop_reordering

    @property
    def total_nests(self) -> int:
        return sum(self.nests)

    @property
    def kernels(self) -> list[str]:
        """The C++ kernel functions, without the module's paths and names."""
        return [k.text for k in analyze(self.code)]


# The caches that would skip lowering a graph (Inductor's FX graph cache,
# AOTAutograd's, dynamo's profile of dynamic sizes; patched where used):
# what compile_and_run(keep_compiled_modules=True) turns off.
GRAPH_CACHES_OFF = {
    "force_disable_caches": False,
    "fx_graph_cache": False,
    "fx_graph_remote_cache": False,
    "autotune_local_cache": False,
    "autotune_remote_cache": False,
}


NO_CACHES = {"force_disable_caches": True}


def overlay_flags(on: bool) -> dict[str, bool]:
    return config_patch(on)


def tolerance(dtype: torch.dtype) -> dict[str, float]:
    if dtype in (torch.bfloat16, torch.float16):
        return {"atol": 3e-2, "rtol": 3e-2}
    return {"atol": 1e-4, "rtol": 1e-4}


def _as_tuple(value):
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def compile_and_run(
    fn: Callable,
    args: Sequence[torch.Tensor],
    *,
    overlay: bool = True,
    dynamic: bool = False,
    extra_config: dict | None = None,
    keep_compiled_modules: bool = False,
) -> tuple[tuple, Compiled]:
    """Compile ``fn`` fresh and run it once: its outputs and loop structure.

    No comparison with eager; ``compile_and_inspect`` adds that.  The fuzzer
    (tools/fuzz) compares the outputs itself, flags on against flags off.
    ``force_disable_caches`` gives every compile an empty cache directory;
    ``keep_compiled_modules`` instead turns off only the caches of graphs
    (every graph is still lowered and its C++ generated anew), so a C++
    module built before for the same source and compiler flags is loaded,
    not compiled again.
    """
    torch._dynamo.reset()
    metrics.reset()
    patch = {
        **overlay_flags(overlay),
        **(GRAPH_CACHES_OFF if keep_compiled_modules else NO_CACHES),
        **(extra_config or {}),
    }
    with (
        config.patch(patch),
        functorch_config.patch(enable_autograd_cache=not keep_compiled_modules),
        dynamo_config.patch(automatic_dynamic_local_pgo=not keep_compiled_modules),
        torch.no_grad(),
    ):
        actual, code = run_and_get_cpp_code(
            torch.compile(fn, dynamic=dynamic, fullgraph=True), *args
        )
    compiled = Compiled(
        nests=[k.nests for k in analyze(code)],
        retiled=metrics.cpp_outer_loop_retiled,
        outer_fused=len(metrics.cpp_outer_loop_fused_inner_counts),
        code=code,
        reordered=metrics.num_loop_reordering,
    )
    return _as_tuple(actual), compiled


# The thread count the tests' loop structure is written for.  The cost
# model's thread guards (an outer loop shorter than the threads is not
# fused) read config.cpp.threads, else torch.get_num_threads(): without a
# pin the expected nests would depend on the machine's cores.
TEST_THREADS = 2

# The overlay as shipped: every flag at its default.
SHIPPED_DEFAULTS = shipped_config()
LOOP_ORDERING_OFF = {"cpp.loop_ordering_after_fusion": False}


def compile_shipped_and_inspect(fn, args, *, extra_config=None, overlay=True, **kwargs):
    """compile_and_inspect with the overlay's default flags (or all off)."""
    shipped = SHIPPED_DEFAULTS if overlay else {}
    config_ = {**shipped, **(extra_config or {})}
    return compile_and_inspect(
        fn, args, extra_config=config_, overlay=overlay, **kwargs
    )


def compile_and_inspect(
    fn: Callable,
    args: Sequence[torch.Tensor],
    *,
    overlay: bool = True,
    dynamic: bool = False,
    extra_config: dict | None = None,
) -> Compiled:
    """Compile ``fn`` fresh, check it against eager, return its loop structure.

    At ``TEST_THREADS`` threads unless ``extra_config`` sets ``cpp.threads``."""
    extra_config = {"cpp.threads": TEST_THREADS, **(extra_config or {})}
    actual, compiled = compile_and_run(
        fn, args, overlay=overlay, dynamic=dynamic, extra_config=extra_config
    )
    with torch.no_grad():
        expected = fn(*args)
    for got, want in zip(actual, _as_tuple(expected), strict=True):
        torch.testing.assert_close(got, want, **tolerance(want.dtype))
    return compiled


def recording(real: Callable, calls: list) -> Callable:
    """``real``, recording the arguments of each of its calls in ``calls``
    (set it in place of ``real`` with ``monkeypatch.setattr``)."""
    return lambda *args: calls.append(args) or real(*args)


def run_independent(code: str) -> list[str]:
    """Generated code without the lines that differ between two compiles of
    the same program: the graph's id and the path of the written module."""
    return [
        line
        for line in code.splitlines()
        if not line.startswith(("# AOT ID", "Output code written to"))
    ]
