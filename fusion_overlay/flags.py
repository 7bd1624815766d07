"""The overlay's switches: one registry for every tool, test and the README.

Each flag is an attribute of ``torch._inductor.config.cpp`` that its patch
adds, read from an environment variable at import.  All of them off gives
stock's code of the same torch release (test/test_flags_off_matches_stock.py).  A
flag that ``requires`` others does nothing without them (the overlay's
``cpp_fusion/flag_requirements.py`` says which, and enforces it): ``unmet_requirements``
names such a setting, ``python -m fusion_overlay.overlay status`` reports it for the
environment's variables, and the README's flag table is this registry
(``python -m fusion_overlay.flags --readme`` rewrites it; a test compares).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import os
import sys
from collections.abc import Mapping
from pathlib import Path


REQUIREMENTS_MODULE = "torch/_inductor/codegen/cpp_fusion/flag_requirements.py"


@dataclasses.dataclass(frozen=True)
class Flag:
    name: str  # attribute of torch._inductor.config.cpp
    patch: str  # the patch(es) whose feature it switches, "0002" or "0005 0015"
    effect: str  # one line: what turning it on changes
    default: bool = True
    env: str = ""  # default: TORCHINDUCTOR_CPP_<NAME>
    # where its behaviour is tested: "test/<file>.py" or "test/<file>.py::<test>"
    tests: tuple[str, ...] = ()
    # the release whose stock has the change, so that its series (and every
    # later one) drops the patch and the flag; "" while upstream has not
    upstream_since: str = ""

    def __post_init__(self) -> None:
        if not self.env:
            object.__setattr__(self, "env", f"TORCHINDUCTOR_CPP_{self.name.upper()}")

    @property
    def requires(self) -> tuple[str, ...]:
        """The flags without which it changes nothing (the overlay's table)."""
        return overlay_requirements().get(self.name, ())


@functools.cache
def overlay_requirements() -> dict[str, tuple[str, ...]]:
    """``REQUIRES`` of the overlay's ``cpp_fusion/flag_requirements.py``, the
    one place a requirement is written and enforced; read as the literal it
    is, since that module imports torch."""
    from fusion_overlay.patchset import DEFAULT_OVERLAY_DIR

    path = DEFAULT_OVERLAY_DIR / REQUIREMENTS_MODULE
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "REQUIRES" for t in node.targets
        ):
            table = node.value  # MappingProxyType({...}): the literal inside
            if isinstance(table, ast.Call) and table.args:
                table = table.args[0]
            return ast.literal_eval(table)
    raise RuntimeError(f"{path}: no REQUIRES table")


ALL_FLAGS = (
    Flag(
        "outer_loop_fusion_retile",
        "0002",
        "outer-loop fusion that re-tiles kernels whose vector tilings of a "
        "shared outer level disagree",
        env="TORCHINDUCTOR_CPP_OUTER_LOOP_RETILE",
        tests=("test/test_outer_loop_retile.py",),
    ),
    Flag(
        "loop_ordering_after_fusion",
        "0005 0015",
        "decide CPU loop orders after fusion, and the C++ fusion rules that needs",
        tests=(
            "test/test_cpu_loop_ordering.py",
            "test/test_cpu_loop_ordering_upstream.py",
        ),
    ),
    Flag(
        "outer_loop_split",
        "0003",
        "split a consumer's loops, or join at a shared depth, to share its "
        "producer's outer loop",
        tests=("test/test_outer_loop_retile.py",),
    ),
    Flag(
        "two_step_variance_in_cache",
        "0004",
        "two-step variance for rows that stay in cache under a fused loop",
        tests=(
            "test/test_outer_loop_retile.py::test_groupnorm_rows_of_4k_use_two_step_variance",
            "test/test_outer_loop_retile.py::test_rows_the_fusion_would_refuse_keep_welford",
        ),
    ),
    Flag(
        "outer_loop_local_buffer_check",
        "0006",
        "drop an outer-loop fusion whose local buffer sits under a vector-tiled "
        "outer level, a stock miscompile",
        tests=(
            "test/test_outer_loop_retile.py::test_no_local_buffer_under_a_vector_tiled_outer_loop",
        ),
        upstream_since="2.14.1",
    ),
    Flag(
        "realize_reused_erf",
        "0007",
        "store reused pointwise results that use erf/expm1 instead of recomputing them",
        tests=(
            "test/test_outer_loop_retile.py::test_bias_gelu_layernorm_one_nest_and_erf_once",
        ),
    ),
    Flag(
        "outer_loop_regroup",
        "0012",
        "when an outer-loop fusion fails to merge, generate it without its last "
        "member, then that member",
        tests=("test/test_outer_loop_regroup.py",),
    ),
    Flag(
        "outer_block_fusion",
        "0009",
        "outer-loop fusion of reductions over a middle dimension with their "
        "broadcasting consumers",
        tests=("test/test_outer_block_fusion.py",),
    ),
    Flag(
        "block_local_buffers",
        "0011",
        "per-iteration local buffers for the intermediates of 0009's fusions",
        tests=("test/test_block_local_buffers.py",),
    ),
    Flag(
        "multi_accumulator_reductions",
        "0008",
        "four rotating accumulators for long horizontal sum/max/min reductions",
        tests=("test/test_reduction_accumulators.py",),
    ),
    Flag(
        "hoist_invariant_loads",
        "0010",
        "load scalars the innermost loop reads at one index once, before the loop",
        tests=("test/test_invariant_loads.py",),
    ),
    Flag(
        "streaming_stores",
        "0013",
        "non-temporal stores for large float32 outputs of kernels that touch "
        "more memory than the last-level cache",
        tests=("test/test_streaming_stores.py",),
    ),
    Flag(
        "outer_loop_prefetch",
        "0014",
        "in an outer-loop fused kernel larger than the last-level cache, "
        "prefetch the next rows during the last pass",
        tests=("test/test_outer_loop_prefetch.py",),
    ),
    Flag(
        "unroll_rotated_reductions",
        "0017",
        "unroll the innermost loop of a reduction whose accumulators rotate "
        "(0008) by the accumulator count, and build GCC's code with `-fweb`, so "
        "the rotation costs no moves",
        tests=("test/test_unroll_rotated_reductions.py",),
    ),
    Flag(
        "outer_loop_shallower_fusion",
        "0018",
        "when an outer-loop fusion fails to merge at the scheduler's depth, "
        "merge it over fewer outer loops where its kernels agree and the "
        "shorter loop still feeds every thread",
        tests=("test/test_outer_loop_shallower.py",),
    ),
    Flag(
        "outer_block_tiles",
        "0019",
        "fuse a statistics kernel and its consumer over tiles of the pixel loop "
        "when one image exceeds 0009's cache budget or, with no batch loop, "
        "when the pair shares no loop at all, let log_softmax's output join its "
        "statistics' outer-loop fusion over pixel tiles where the pair exceeds "
        "the last-level cache, and fuse softmax's two pointwise kernels over "
        "the loops where their reads stay in a block",
        tests=("test/test_outer_block_tiles.py",),
    ),
    Flag(
        "outer_block_prepend",
        "0020",
        "let a stored producer join its consumers' kernel: in front of an "
        "element-wise outer-loop fusion (or a pointwise consumer), block by "
        "block, splitting its merged loop into the consumer's outer loops where "
        "needed, or reindexed onto a reduction consumer's loops; if the members "
        "then fail to merge, the producer is generated alone and the rest stays "
        "fused",
        tests=("test/test_outer_block_prepend.py",),
    ),
    Flag(
        "softmax_reciprocal",
        "0021",
        "softmax over the last dim multiplies each row by the reciprocal of its "
        "sum, as ATen's CPU kernel does, instead of dividing every element",
        tests=("test/test_softmax_reciprocal.py",),
    ),
    Flag(
        "group_norm_channel_sums",
        "0022",
        "GroupNorm over channels-last memory of 192 KiB or more takes each "
        "channel's mean and squared deviations over blocks of pixels (full "
        "channel vectors), then combines a group's channels, as ATen's "
        "channels-last kernel does, instead of per-group statistics over each "
        "pixel's short slice of channels",
        tests=("test/test_group_norm_channel_sums.py",),
    ),
    Flag(
        "outer_reduction_blocks",
        "0023",
        "a sum, max, min, prod or any over an outer or middle dim (reads that "
        "stride over the reduction and are contiguous along an output dim) "
        "whose rows under one output index span 128 KiB or more (a softmax's or "
        "variance's only over rows 2 KiB apart or more) reduces blocks of about "
        "16 rows into partials, then the partials, with upstream's two-level "
        "split reduction, instead of a column walk down every row",
        tests=("test/test_outer_reduction_blocks.py",),
    ),
)



def flags_of(release: str) -> tuple[Flag, ...]:
    """The flags the series of `release` adds: all but those stock has since."""
    from fusion_overlay.patchset import release_key

    return tuple(
        flag
        for flag in ALL_FLAGS
        if not flag.upstream_since
        or release_key(release) < release_key(flag.upstream_since)
    )


def _running_release() -> str:
    from fusion_overlay.patchset import default_release

    return default_release()


# The flags of the running torch's release: what its patched config has.
RELEASE = _running_release()
FLAGS = flags_of(RELEASE)
NAMES = tuple(flag.name for flag in FLAGS)
CONFIG_KEYS = tuple(f"cpp.{name}" for name in NAMES)
ENV_VARS = tuple(flag.env for flag in FLAGS)
BY_NAME = {flag.name: flag for flag in FLAGS}


def config_patch(on: bool) -> dict[str, bool]:
    """A torch._inductor.config.patch() argument setting every flag to on."""
    return dict.fromkeys(CONFIG_KEYS, on)


def shipped_config() -> dict[str, bool]:
    """A torch._inductor.config.patch() argument: every flag at its default."""
    return {key: flag.default for key, flag in zip(CONFIG_KEYS, FLAGS)}


def env_all_off() -> dict[str, str]:
    return dict.fromkeys(ENV_VARS, "0")


def settings_from_env(environ: Mapping[str, str] | None = None) -> dict[str, bool]:
    """flag name -> on, as the patched config reads the environment."""
    environ = os.environ if environ is None else environ
    return {f.name: environ.get(f.env, "1" if f.default else "0") == "1" for f in FLAGS}


def unmet_requirements(settings: Mapping[str, bool]) -> list[str]:
    """One line per flag that is on while a flag it requires is off."""
    return [
        f"cpp.{flag.name} is on but does nothing: it requires "
        + ", ".join(f"cpp.{r}" for r in flag.requires if not settings.get(r, True))
        + " (off)"
        for flag in FLAGS
        if settings.get(flag.name)
        and not all(settings.get(r, True) for r in flag.requires)
    ]


def readme_table() -> str:
    """The README's flag table."""
    rows = [
        "| config | environment variable | default | patch | requires | effect |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for flag in ALL_FLAGS:
        requires = ", ".join(f"`cpp.{r}`" for r in flag.requires) or "-"
        effect = flag.effect
        if flag.upstream_since:
            effect += (
                f" (series before {flag.upstream_since} only: stock has it since)"
            )
        rows.append(
            f"| `cpp.{flag.name}` | `{flag.env}` | {'on' if flag.default else 'off'} "
            f"| {flag.patch} | {requires} | {effect} |"
        )
    return "\n".join(rows) + "\n"


README = Path(__file__).resolve().parent.parent / "README.md"
TABLE_BEGIN = "<!-- flag table: python -m fusion_overlay.flags --readme -->\n"
TABLE_END = "<!-- end of flag table -->\n"


def readme_with_table(text: str) -> str:
    """``text`` (the README) with the table between its markers regenerated."""
    head, rest = text.split(TABLE_BEGIN, 1)
    _, tail = rest.split(TABLE_END, 1)
    return head + TABLE_BEGIN + readme_table() + TABLE_END + tail


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--readme"]:
        README.write_text(readme_with_table(README.read_text()))
        return 0
    if argv == ["--test-files"]:
        # the files that test the features' behaviour (make test-versions)
        files = dict.fromkeys(t.partition("::")[0] for f in ALL_FLAGS for t in f.tests)
        print(" ".join(files))
        return 0
    print(readme_table(), end="")
    for line in unmet_requirements(settings_from_env()):
        print(f"warning: {line}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
