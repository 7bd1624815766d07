"""Fuzz repro a404b85950ec: crash with flags on.

InductorError: IndexError: list index out of range

Found by tools.fuzz (profile ci, worker seed 0).
Run: .venv/bin/python -m pytest test/regressions/test_fuzz_a404b85950ec.py
"""

from __future__ import annotations

import pytest  # noqa: F401  (for an xfail marker)

from tools.fuzz.check import assert_overlay_agrees
from tools.fuzz.program import FuzzCase, InputSpec

SIGNATURE = 'crash with flags on: InductorError: IndexError: list index out of range'

SOURCE = '''\
import torch
import torch.nn.functional as F


def program(x0, x1, w2, w3, w4, w5):
    v1 = (x1 - x1.mean(-1, keepdim=True)) * torch.rsqrt(x1.var(-1, keepdim=True, correction=0) + 1e-5)
    v2 = v1 + v1
    v3 = F.group_norm(v2, 2, w2, w3, eps=1e-5)
    v4 = (v3 - v3.mean(-1, keepdim=True)) * torch.rsqrt(v3.var(-1, keepdim=True, correction=0) + 1e-5)
    v5 = F.group_norm(v4, 1, w4, w5, eps=1e-5)
    return (v5,)
'''

CASE = FuzzCase(
    source=SOURCE,
    inputs=(
        InputSpec(shape=(4, 4, 33), dtype='float32', layout='contiguous', role='data'),
        InputSpec(shape=(4, 4, 33), dtype='float32', layout='contiguous', role='data'),
        InputSpec(shape=(4,), dtype='float32', layout='contiguous', role='weight'),
        InputSpec(shape=(4,), dtype='float32', layout='contiguous', role='weight'),
        InputSpec(shape=(4,), dtype='float32', layout='contiguous', role='weight'),
        InputSpec(shape=(4,), dtype='float32', layout='contiguous', role='weight'),
    ),
    input_seed=0,
    dynamic=False,
    config='default',
)


def test_fuzz_a404b85950ec():
    assert_overlay_agrees(CASE)
