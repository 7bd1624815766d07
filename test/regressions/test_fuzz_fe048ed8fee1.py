"""Fuzz repro fe048ed8fee1: crash with flags on.

InductorError: AssertionError: buf5
crashes only with both flags on (re-tiling and loop ordering after fusion)
flags off compiles and agrees with eager

Fixed: the re-tile retry now runs with inplace_buffers=False, as stock's
fallback does (patch 0002).
Found by make fuzz (profile dev, seeds 100..101), shrunk by hypothesis.
Run: .venv/bin/python -m pytest test/regressions/test_fuzz_fe048ed8fee1.py
"""

from __future__ import annotations

from tools.fuzz.check import assert_overlay_agrees
from tools.fuzz.program import FuzzCase, InputSpec

SIGNATURE = 'crash with flags on: InductorError: AssertionError: buf#; crashes only with both flags on (re-tiling and loop ordering after fusion); flags off compiles and agrees with eager'

SOURCE = '''\
import torch
import torch.nn.functional as F


def program(x0, w1, w2):
    v1 = F.group_norm(x0, 4, w1, w2, eps=1e-5)
    return (v1,)
'''

CASE = FuzzCase(
    source=SOURCE,
    inputs=(
        InputSpec(shape=(4, 32), dtype='float32', layout='contiguous', role='data'),
        InputSpec(shape=(32,), dtype='float32', layout='contiguous', role='weight'),
        InputSpec(shape=(32,), dtype='float32', layout='contiguous', role='weight'),
    ),
    input_seed=0,
    dynamic=False,
    config='default',
)


def test_fuzz_fe048ed8fee1():
    assert_overlay_agrees(CASE)
