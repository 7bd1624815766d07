"""A flag's requirements are written and checked in one place.

cpp_fusion/flag_requirements.py holds which flag needs which, and
``enabled(flag)`` is how the overlay's modules ask whether a feature is on:
with a flag it requires off, a feature changes nothing, and no module reads
such a flag by itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
from compile_utils import compile_shipped_and_inspect, requires_vectors, run_independent

import torch._inductor.codegen.cpp_fusion.costs as costs
from torch._inductor import config
from torch._inductor.codegen.cpp_fusion import flag_requirements
from torch._inductor.codegen.cpp_fusion.flag_requirements import REQUIRES, enabled

OVERLAY = Path(__file__).resolve().parent.parent / "overlay"
PACKAGE = OVERLAY / "torch" / "_inductor" / "codegen" / "cpp_fusion"


@pytest.mark.parametrize("flag", sorted(REQUIRES))
def test_a_feature_is_on_only_with_every_flag_it_requires(flag):
    every_flag = {f"cpp.{name}": True for name in {flag, *REQUIRES[flag]}}
    with config.patch(every_flag):
        assert enabled(flag)
    with config.patch({**every_flag, f"cpp.{flag}": False}):
        assert not enabled(flag)
    for required in REQUIRES[flag]:
        with config.patch({**every_flag, f"cpp.{required}": False}):
            assert not enabled(flag), required


def test_every_required_flag_is_a_flag_of_the_config():
    for flag, required in REQUIRES.items():
        for name in (flag, *required):
            assert isinstance(getattr(config.cpp, name), bool), name


def _reads_of_requiring_flags(tree: ast.Module) -> list[str]:
    """``config.cpp.<flag>`` and ``getattr(config.cpp, "<flag>")`` for a flag
    that requires others."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in REQUIRES:
            found.append(node.attr)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in REQUIRES
        ):
            found.append(node.args[1].value)
    return found


def test_no_overlay_module_reads_a_requiring_flag_itself():
    reads = {
        str(path.relative_to(PACKAGE)): _reads_of_requiring_flags(
            ast.parse(path.read_text())
        )
        for path in PACKAGE.rglob("*.py")
        if path.name != "flag_requirements.py"
    }
    assert {path: names for path, names in reads.items() if names} == {}


def test_the_installed_module_is_the_overlays():
    # the tests above read the installed package; the scan reads overlay/
    assert (
        Path(flag_requirements.__file__).read_text()
        == (PACKAGE / "flag_requirements.py").read_text()
    )


def test_a_fallback_is_off_without_a_flag_its_flag_requires():
    from torch._inductor.codegen.cpp import CppScheduling

    scheduling = object.__new__(CppScheduling)  # the list needs no scheduler
    requiring = [f for f in scheduling.outer_loop_fallbacks() if f.flag in REQUIRES]
    assert requiring  # 0020's prepend
    for fallback in requiring:
        every_flag = {
            f"cpp.{n}": True for n in (fallback.flag, *REQUIRES[fallback.flag])
        }
        with config.patch(every_flag):
            assert fallback.enabled()
        for required in REQUIRES[fallback.flag]:
            with config.patch({**every_flag, f"cpp.{required}": False}):
                assert not fallback.enabled(), (fallback.name, required)


def softmax_over_channels(x):
    return torch.softmax(x, dim=1)


def log_softmax_over_channels(x):
    return torch.log_softmax(x, dim=1)


@requires_vectors
@pytest.mark.parametrize("required", REQUIRES["outer_block_tiles"])
@pytest.mark.parametrize("fn", [softmax_over_channels, log_softmax_over_channels])
def test_tiles_without_a_flag_they_require_generate_the_code_of_tiles_off(
    fn, required, monkeypatch
):
    # softmax's pair of pointwise kernels tiles only past the last-level cache
    monkeypatch.setattr(costs, "last_level_cache_bytes", lambda: 1 << 20)
    x = torch.randn(4, 3, 256, 256)
    threads = {"cpp.threads": 2}
    tiled = compile_shipped_and_inspect(fn, (x,), extra_config=threads)
    assert tiled.nests == [1]  # the fusion that the requirement turns off
    without = {**threads, f"cpp.{required}": False}
    kept = compile_shipped_and_inspect(fn, (x,), extra_config=without)
    off = compile_shipped_and_inspect(
        fn, (x,), extra_config={**without, "cpp.outer_block_tiles": False}
    )
    assert run_independent(kept.code) == run_independent(off.code)
