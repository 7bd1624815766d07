"""The corpus's kernels compile for every vector ISA the wheel supports.

tools/isa_codegen.py makes Inductor generate the corpus (tools/corpus_codegen.py)
for one ISA, with the cache size the overlay assumes shrunk so that its
streaming stores (x86 only), fences and prefetches apply to the small programs.  x86
ISAs the host runs are compiled by Inductor and checked against eager; aarch64
kernels (NEON, SVE) are compiled with Debian's g++-aarch64-linux-gnu
(``-fsyntax-only``) against the wheel's headers, with the macros and arch
flags Inductor's builder would pass there.  `make test` installs the cross
compiler (`make cross-compiler`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parent.parent
CROSS_CXX = "aarch64-linux-gnu-g++"
# 4 KiB: the corpus's 8 KiB tensors count as larger than the cache
CACHE_BYTES = 4096
X86 = ("avx512", "avx2", "none")
AARCH64 = ("neon", "sve256")
# The x86 wheel's sleef.h declares only the x86 entry points; without this
# macro the aarch64 vector headers use their own fallbacks for them (the
# kernels' code is the same either way).
NOT_FOR_CROSS_SYNTAX = {"AT_BUILD_ARM_VEC256_WITH_SLEEF"}


def generate(isa: str, out: Path) -> dict:
    env = {**os.environ, "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "tools.isa_codegen", "--isa", isa, "--out", str(out),
         "--cache-bytes", str(CACHE_BYTES)],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads((out / "manifest.json").read_text())


def kernels(out: Path, manifest: dict) -> list[Path]:
    return [out / k for p in manifest["programs"].values() for k in p["kernels"]]


def cross_syntax_check(source: Path, manifest: dict) -> subprocess.CompletedProcess:
    include = Path(torch.__file__).parent / "include"
    defines = [f"-D{m}" for m in manifest["macros"] if m not in NOT_FOR_CROSS_SYNTAX]
    arch = manifest["arch_flags"].split() or ["-march=armv8-a"]
    command = [
        CROSS_CXX, "-std=c++20", "-fsyntax-only", "-fopenmp", *arch, *defines,
        f"-I{include}", f"-I{include / 'torch/csrc/api/include'}", str(source),
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


STREAMING = ("stream_store_f32(", "stream_fence()")
# Spellings of one compiler or ISA in the overlay's kernel helpers
# (cpp_kernel_helpers.py), and the preprocessor branch each must sit in, so
# that MSVC (Inductor's Windows compiler) or a build for another ISA never
# compiles one: kernels call the helpers, never these.
GUARDED = {
    "__builtin_prefetch": "defined(__GNUC__) || defined(__clang__)",
    "_mm_prefetch": "defined(_MSC_VER) && (defined(_M_X64) || defined(_M_IX86))",
    "__prefetch(": "defined(_MSC_VER) && defined(_M_ARM64)",
    "_mm512_stream_ps": "defined(CPU_CAPABILITY_AVX512)",
    "_mm256_stream_ps": "defined(CPU_CAPABILITY_AVX2)",
    "_mm_sfence": "defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)",
}
DIRECTIVE = re.compile(r"#\s*(ifdef|ifndef|if|elif|else|endif)\b\s*(.*)")


def unguarded(code: str) -> list[str]:
    """Lines that use a GUARDED spelling outside a branch of its condition
    (the innermost open #if/#elif)."""
    branches: list[str] = []  # the open branch's condition, per nesting level
    found = []
    for line in code.splitlines():
        directive = DIRECTIVE.match(line.strip())
        if directive:
            kind, condition = directive.groups()
            if kind.startswith("if"):
                branches.append(condition)
            elif kind == "endif":
                branches.pop()
            else:
                branches[-1] = condition if kind == "elif" else "#else"
            continue
        for spelling, condition in GUARDED.items():
            if spelling in line and branches[-1:] != [condition]:
                found.append(line.strip())
    return found


def assert_features_taken(out: Path, manifest: dict, *, streams: bool) -> None:
    """Prefetches appear in some kernel; streaming stores and their fences
    too where the ISA has non-temporal stores (x86), in none elsewhere."""
    code = "\n".join(path.read_text() for path in kernels(out, manifest))
    assert "prefetch_ahead(" in code, f"no kernel of {manifest['isa']} prefetches"
    assert "__builtin_prefetch" in code  # the helper's definition
    assert not unguarded(code), f"{manifest['isa']}: {unguarded(code)[:3]}"
    for helper in STREAMING:
        assert (helper in code) == streams, (
            f"{manifest['isa']}: {helper} {'missing' if streams else 'emitted'}"
        )


def test_a_compiler_builtin_outside_its_guard_is_found():
    helper = (
        "#if defined(__GNUC__) || defined(__clang__)\n"
        "    __builtin_prefetch(address, 0, 3);\n"
        "#elif defined(_MSC_VER) && (defined(_M_X64) || defined(_M_IX86))\n"
        "    _mm_prefetch(address, _MM_HINT_T0);\n"
        "#endif\n"
    )
    assert unguarded(helper) == []
    swapped = helper.replace("_mm_prefetch(", "__builtin_prefetch(", 1)
    assert unguarded(swapped) == ["__builtin_prefetch(address, _MM_HINT_T0);"]
    kernel_line = "    __builtin_prefetch(in_ptr0 + x0);\n"
    assert unguarded(helper + kernel_line) == [kernel_line.strip()]
    assert unguarded("#if defined(CPU_CAPABILITY_AVX512)\n_mm_sfence();\n#endif") == [
        "_mm_sfence();"
    ]


@pytest.mark.parametrize("isa", X86)
def test_x86_kernels_compile_and_agree_with_eager(isa, tmp_path):
    out = tmp_path / isa
    manifest = generate(isa, out)
    if not manifest["native"]:
        pytest.skip(f"this CPU does not run {isa}")
    wrong = [n for n, p in manifest["programs"].items() if not p["allclose"]]
    assert not wrong, f"{isa}: differs from eager: {wrong}"
    if isa != "none":  # scalar kernels have no vector stores to stream
        assert_features_taken(out, manifest, streams=True)


@pytest.mark.parametrize("isa", AARCH64)
def test_aarch64_kernels_compile(isa, tmp_path):
    if shutil.which(CROSS_CXX) is None:
        pytest.fail(
            f"{CROSS_CXX} not found: run `make cross-compiler` (Debian's "
            "g++-aarch64-linux-gnu) or `make test`, which installs it"
        )
    out = tmp_path / isa
    manifest = generate(isa, out)
    failures = []
    for source in kernels(out, manifest):
        result = cross_syntax_check(source, manifest)
        if result.returncode != 0:
            errors = [ln for ln in result.stderr.splitlines() if "error" in ln]
            failures.append(f"{source.name}: {errors[:3]}")
    assert not failures, "\n".join(failures)
    assert_features_taken(out, manifest, streams=False)
