"""Fuzz repro 5f277458f42e: crash with flags on.

NameError: name 'buf0' is not defined

Found by tools.fuzz (profile dev, worker seed 11, the 10,000-program campaign's shard 3);
fixed by FailedMerge.run dropping the arguments of buffers a fallback keeps local.
Run: .venv/bin/python -m pytest test/regressions/test_fuzz_5f277458f42e.py
"""

from __future__ import annotations

import pytest  # noqa: F401  (for an xfail marker)

from tools.fuzz.check import assert_overlay_agrees
from tools.fuzz.program import FuzzCase, InputSpec

SIGNATURE = "crash with flags on: NameError: name 'buf#' is not defined"

SOURCE = '''\
import torch
import torch.nn.functional as F


def program(x0):
    v1 = torch.softmax(x0, dim=1)
    return (v1,)
'''

CASE = FuzzCase(
    source=SOURCE,
    inputs=(
        InputSpec(shape=(4, 4, 1), dtype='bfloat16', layout='contiguous', role='data'),
    ),
    input_seed=0,
    dynamic=True,
    config='seed',
)


def test_fuzz_5f277458f42e():
    assert_overlay_agrees(CASE)
