"""An outer-loop fusion that fails to merge is regrouped, not unfused.

cpp_fusion/outer_loop/regroup.py generates such a node without its last member
(fused, if that merges) and then the last member alone, where stock emits
every member as a loop nest of its own.  Found by make fuzz with loop
ordering after fusion on: log_softmax over a reduced dimension.
"""

from __future__ import annotations

import pytest
import torch
import torch._inductor.codegen.cpp_fusion.outer_loop.regroup as regroup
from compile_utils import compile_and_inspect, host_has_simd_width

# The fuzzer found the failed merge with 16 float lanes; with AVX2's 8 the
# three members merge (3 nests), so the tests pin AVX512.  The four members
# merge over fewer loops (cpp_fusion/outer_loop/shallower.py, 2 nests): switched
# off here, it is what the regrouping would have done without it.
AVX512 = {"cpp.simdlen": 512, "cpp.outer_loop_shallower_fusion": False}
pytestmark = pytest.mark.skipif(
    not host_has_simd_width(512), reason="the failed merge needs AVX512's lanes"
)


def amin_then_log_softmax(x):
    v1 = torch.amin(x, dim=(2,), keepdim=True)
    return torch.log_softmax(v1, dim=1), v1


ARGS = (torch.randn(125, 32, 5, 2),)


def test_failed_merge_keeps_the_members_that_merge():
    # All flags, loop ordering after fusion included: the log step joins
    # the max and sum kernels over (125, 2), and the three fail to merge.
    stock = compile_and_inspect(
        amin_then_log_softmax, ARGS, overlay=False, extra_config=AVX512
    )
    patched = compile_and_inspect(amin_then_log_softmax, ARGS, extra_config=AVX512)
    # Regrouped: max and sum over the shared loops, then the log step; the
    # fusion rules for open loop orders (0015) save stock's fourth nest.
    assert (stock.nests, patched.nests) == ([4], [3])
    assert patched.outer_fused == 1


def test_without_regrouping_every_member_is_a_nest(monkeypatch):
    monkeypatch.setattr(
        regroup, "codegen_without_last_member", lambda scheduling, node: False
    )
    patched = compile_and_inspect(amin_then_log_softmax, ARGS, extra_config=AVX512)
    assert patched.nests == [5]
    assert patched.outer_fused == 0
