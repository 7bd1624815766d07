"""Fuzz repro 02891f676529: crash with flags on.

NameError: name 'buf4' is not defined
two GroupNorms and a manual LayerNorm under the forum report's config
(every small op realized); needs 0020's fusion of a producer in front of an
element-wise outer-loop fusion, which made the fused node below possible

Fixed: the merge at 0009's depth failed after registering buf4 as a kernel
argument; 0018's retry one level up gave buf4 a block local buffer (0011),
so the kernel still passed buf4, which was never allocated.  0011 now keeps
the global buffer of an intermediate that a failed attempt made an argument.
Found by make fuzz (profile dev, 600 s, 2 workers, seed 20261201), shrunk by
hypothesis.
Run: .venv/bin/python -m pytest test/regressions/test_fuzz_02891f676529.py
"""

from __future__ import annotations

import pytest  # noqa: F401  (for an xfail marker)

from tools.fuzz.check import assert_overlay_agrees
from tools.fuzz.program import FuzzCase, InputSpec

SIGNATURE = "crash with flags on: NameError: name 'buf#' is not defined"

SOURCE = '''\
import torch
import torch.nn.functional as F


def program(x0, w1, w2, w3, w4):
    v1 = torch.sum(x0, dim=(0,), keepdim=False)
    v2 = F.group_norm(x0, 2, w1, w2, eps=1e-5)
    v3 = (v2 - v2.mean(-1, keepdim=True)) * torch.rsqrt(v2.var(-1, keepdim=True, correction=0) + 1e-5)
    v4 = F.group_norm(v3, 2, w3, w4, eps=1e-5)
    return (v4,)
'''

CASE = FuzzCase(
    source=SOURCE,
    inputs=(
        InputSpec(shape=(4, 4, 4), dtype='float32', layout='contiguous', role='data'),
        InputSpec(shape=(4,), dtype='float32', layout='contiguous', role='weight'),
        InputSpec(shape=(4,), dtype='float32', layout='contiguous', role='weight'),
        InputSpec(shape=(4,), dtype='float32', layout='contiguous', role='weight'),
        InputSpec(shape=(4,), dtype='float32', layout='contiguous', role='weight'),
    ),
    input_seed=0,
    dynamic=False,
    config='seed',
)


def test_fuzz_02891f676529():
    assert_overlay_agrees(CASE)
