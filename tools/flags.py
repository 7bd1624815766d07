"""The overlay's switches, listed once for every tool and test.

Each is an attribute of ``torch._inductor.config.cpp`` that its patch adds,
read from an environment variable at import.  All of them off gives the
code of stock torch 2.13.0 (test/test_flags_off_matches_stock.py).
"""

from __future__ import annotations

from typing import NamedTuple


class Flag(NamedTuple):
    name: str  # attribute of torch._inductor.config.cpp
    env: str
    default: bool


def _flag(name: str, default: bool) -> Flag:
    return Flag(name, f"TORCHINDUCTOR_CPP_{name.upper()}", default)


FLAGS = (
    Flag("outer_loop_fusion_retile", "TORCHINDUCTOR_CPP_OUTER_LOOP_RETILE", True),
    _flag("loop_ordering_after_fusion", True),
    _flag("outer_loop_split", True),
    _flag("two_step_variance_in_cache", True),
    _flag("outer_loop_local_buffer_check", True),
    _flag("realize_reused_erf", True),
    _flag("outer_loop_regroup", True),
    _flag("outer_block_fusion", True),
    _flag("block_local_buffers", True),
    _flag("multi_accumulator_reductions", True),
    _flag("hoist_invariant_loads", True),
    _flag("streaming_stores", True),
    _flag("outer_loop_prefetch", True),
    _flag("unroll_rotated_reductions", True),
    _flag("outer_loop_shallower_fusion", True),
    _flag("outer_block_tiles", True),
    _flag("outer_block_prepend", True),
    _flag("softmax_reciprocal", True),
    _flag("group_norm_channel_sums", True),
    _flag("outer_reduction_blocks", True),
)

NAMES = tuple(flag.name for flag in FLAGS)
CONFIG_KEYS = tuple(f"cpp.{name}" for name in NAMES)
ENV_VARS = tuple(flag.env for flag in FLAGS)


def config_patch(on: bool) -> dict[str, bool]:
    """A torch._inductor.config.patch() argument setting every flag to on."""
    return dict.fromkeys(CONFIG_KEYS, on)


def shipped_config() -> dict[str, bool]:
    """A torch._inductor.config.patch() argument: every flag at its default."""
    return {key: flag.default for key, flag in zip(CONFIG_KEYS, FLAGS)}


def env_all_off() -> dict[str, str]:
    return dict.fromkeys(ENV_VARS, "0")
