"""Which overlay flag needs which, and the one check of it.

A feature whose flag requires others is on only while they are on too:
``enabled(flag)`` is how every overlay module asks whether a feature is on,
so a requirement is written once, in ``REQUIRES``, and enforced here alone.
The install tool's flag registry (``fusion_overlay/flags.py``) reads this
table for the README and for ``fusion-overlay status``'s warnings.

Origin: the flags of 0011, 0017, 0019, 0020 and 0021 (each feature's page
says why it needs the others).
"""

from __future__ import annotations

from types import MappingProxyType

from torch._inductor import config

# flag -> the flags without which it changes nothing; a literal, which the
# install tool reads without importing torch
REQUIRES = MappingProxyType(
    {
        # 0011 keeps the intermediates of 0009's block fusions in local buffers
        "block_local_buffers": ("outer_block_fusion",),
        # 0017 unrolls the loops whose accumulators 0008 rotates
        "unroll_rotated_reductions": ("multi_accumulator_reductions",),
        # 0019 tiles 0009's block fusions; a statistics join whose merge fails
        # needs 0012's regroup, or its members fall back one kernel each
        "outer_block_tiles": ("outer_block_fusion", "outer_loop_regroup"),
        # 0020's producer joins block by block, as 0009 fuses
        "outer_block_prepend": ("outer_block_fusion",),
        # without 0010 the output loop reloads the sum each iteration and the
        # compiler divides there anyway: a division and a multiply per vector
        "softmax_reciprocal": ("hoist_invariant_loads",),
    }
)


def enabled(flag: str) -> bool:
    """``config.cpp.<flag>``, and every flag it requires, on."""
    if not getattr(config.cpp, flag):
        return False
    return all(enabled(required) for required in REQUIRES.get(flag, ()))
