"""Fuzz repro 9f1f52634d89: crash with flags on.

InductorError: AssertionError: buf11
crashes with the default flags too (re-tiling on, loop ordering off)
flags off compiles and agrees with eager

Fixed: the re-tile retry now runs with inplace_buffers=False, as stock's
fallback does (patch 0002).
Found by make fuzz (profile dev, seeds 100..101), shrunk by hypothesis.
Run: .venv/bin/python -m pytest test/regressions/test_fuzz_9f1f52634d89.py
"""

from __future__ import annotations

from tools.fuzz.check import assert_overlay_agrees
from tools.fuzz.program import FuzzCase, InputSpec

SIGNATURE = 'crash with flags on: InductorError: AssertionError: buf#; crashes with the default flags too (re-tiling on, loop ordering off); flags off compiles and agrees with eager'

SOURCE = '''\
import torch
import torch.nn.functional as F


def program(x0, w1, w2, w3, w4, w5, w6):
    v1 = F.layer_norm(x0, (4, 13), w1, w2, eps=1e-5)
    v2 = w2 * torch.rsqrt(w2.pow(2).mean(-1, keepdim=True) + 1e-6)
    v3 = F.group_norm(v2, 1, w3, w4, eps=1e-5)
    v4 = F.group_norm(v3, 1, w5, w6, eps=1e-5)
    return (v4,)
'''

CASE = FuzzCase(
    source=SOURCE,
    inputs=(
        InputSpec(shape=(4, 4, 13), dtype='float32', layout='contiguous', role='data'),
        InputSpec(shape=(4, 13), dtype='float32', layout='contiguous', role='weight'),
        InputSpec(shape=(4, 13), dtype='float32', layout='contiguous', role='weight'),
        InputSpec(shape=(13,), dtype='float32', layout='contiguous', role='weight'),
        InputSpec(shape=(13,), dtype='float32', layout='contiguous', role='weight'),
        InputSpec(shape=(13,), dtype='float32', layout='contiguous', role='weight'),
        InputSpec(shape=(13,), dtype='float32', layout='contiguous', role='weight'),
    ),
    input_seed=0,
    dynamic=False,
    config='default',
)


def test_fuzz_9f1f52634d89():
    assert_overlay_agrees(CASE)
