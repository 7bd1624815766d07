"""tools/compile_time.py: the report's ratios come from the medians of rounds."""

from __future__ import annotations

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
