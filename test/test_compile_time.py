"""tools/compile_time.py: the report's ratios come from the medians of rounds."""

from __future__ import annotations

import pytest

from tools import compile_time


def _round(python_s: float, cxx_s: float) -> dict:
    return {"prog": {"python_cpu_s": python_s, "cxx_cpu_s": cxx_s, "wall_s": 1.0}}


def test_ratios_are_of_medians_over_rounds():
    runs = {
        "stock": [_round(2.0, 8.0), _round(9.0, 8.0), _round(2.0, 6.0)],
        "lof_off": [_round(2.2, 8.0)] * 3,
        "shipped": [_round(3.0, 7.0), _round(2.1, 8.0), _round(2.1, 8.0)],
    }
    summary = compile_time.summarize(runs)
    assert summary["stock"]["python_cpu_s"]["median"] == 2.0
    assert summary["shipped"]["python_cpu_s"]["max"] == 3.0
    assert summary["shipped"]["ratio_to_stock"]["python_cpu_s"] == 2.1 / 2.0
    assert summary["shipped"]["ratio_to_stock"]["cpu_s"] == 10.1 / 10.0
    assert "| shipped | 2.10 (2.10-3.00) |" in compile_time.markdown("t", summary, 3)


def test_shipped_variant_is_every_flag_at_its_default():
    from fusion_overlay.flags import CONFIG_KEYS, FLAGS

    shipped = compile_time.variant_config("shipped")
    assert shipped == {key: flag.default for key, flag in zip(CONFIG_KEYS, FLAGS)}
    assert (
        compile_time.variant_config("lof_off")["cpp.loop_ordering_after_fusion"]
        is False
    )
    assert not any(compile_time.variant_config("stock").values())


def test_fuzz_suite_is_the_seed_programs_under_their_own_config():
    from tools.fuzz.corpus import CORPUS
    from tools.fuzz.program import CONFIGS

    programs = list(compile_time.fuzz_seed_programs(quick=False))
    assert len(programs) == len(CORPUS)
    for (_, _, args, config), case in zip(programs, CORPUS):
        assert len(args) == len(case.inputs)
        assert CONFIGS[case.config].items() <= config.items()
        assert config.get("cpp.threads", 0) == case.threads


def test_a_child_compiles_a_fuzz_seed_program_and_reports_its_cpu_time():
    per_program = compile_time.child("fuzz", "shipped", quick=False, only={"seed02"})
    assert list(per_program) == ["seed02"]
    assert per_program["seed02"]["python_cpu_s"] > 0


def test_a_child_counts_calls_and_writes_its_profile(tmp_path):
    import pstats

    per_program = compile_time.child(
        "fuzz", "stock", quick=False, only={"seed02"}, profile_out=str(tmp_path)
    )
    calls = per_program["seed02"]["python_calls"]
    profile = pstats.Stats(str(tmp_path / "fuzz-stock.pstats"))
    assert calls == profile.total_calls > 10_000  # type: ignore[attr-defined]
    # the compile itself was profiled: Inductor's scheduler ran under it
    assert any(fn[2] == "fuse_nodes" for fn in profile.stats)  # type: ignore[attr-defined]


def test_call_counts_get_their_own_table_with_ratios_to_stock():
    def counted(calls):
        return {
            "p": {
                "python_cpu_s": 1.0,
                "cxx_cpu_s": 1.0,
                "wall_s": 1.0,
                "python_calls": calls,
            }
        }

    runs = {
        "stock": [counted(2e6)],
        "lof_off": [counted(3e6)],
        "shipped": [counted(2.5e6)],
    }
    summary = compile_time.summarize(runs)
    assert summary["shipped"]["ratio_to_stock"]["python_calls"] == 1.25
    text = compile_time.markdown_calls("fuzz", summary)
    assert "| shipped | 2.50 M | 1.250 |" in text
    assert "| stock | 2.00 M | 1.000 |" in text


def test_a_without_variant_turns_one_shipped_flag_off():
    shipped = compile_time.variant_config("shipped")
    without = compile_time.variant_config("without:outer_block_fusion")
    assert without["cpp.outer_block_fusion"] is False
    assert {k: v for k, v in without.items() if k != "cpp.outer_block_fusion"} == {
        k: v for k, v in shipped.items() if k != "cpp.outer_block_fusion"
    }
    assert compile_time.variant_config("without:cpp.outer_block_fusion") == without


def test_an_unknown_variant_or_flag_is_refused_before_anything_runs():
    with pytest.raises(SystemExit, match="no overlay flag cpp.no_such_flag"):
        compile_time.main(["--without", "no_such_flag", "--suite", "fuzz"])
    with pytest.raises(SystemExit, match="unknown variant"):
        compile_time.variant_config("shiped")


def test_without_variants_get_their_ratio_to_stock():
    runs = {
        "stock": [_round(2.0, 8.0)],
        "shipped": [_round(3.0, 8.0)],
        "without:outer_block_fusion": [_round(2.5, 8.0)],
    }
    summary = compile_time.summarize(runs)
    ratio = summary["without:outer_block_fusion"]["ratio_to_stock"]
    assert ratio["python_cpu_s"] == 1.25
