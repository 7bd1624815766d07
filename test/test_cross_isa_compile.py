"""The corpus's kernels compile for every vector ISA the wheel supports.

tools/isa_codegen.py makes Inductor generate the corpus (tools/corpus_codegen.py)
for one ISA, with the cache size the overlay assumes shrunk so that its
streaming stores (x86 only), fences and prefetches apply to the small
programs.  x86 ISAs the host runs are compiled by Inductor and checked
against eager, the others compiled with the host's g++ (``-fsyntax-only``).
The other ISAs' kernels (aarch64 NEON and SVE, POWER VSX, s390x ZVECTOR),
the corpus and a sample of fuzz programs, are compiled with Debian's cross
compilers (``-fsyntax-only``, all of an ISA's kernels in one translation
unit) against the wheel's headers, with the macros and arch flags Inductor's
builder would pass there.  Every helper the overlay's kernels may call
(streaming store and fence, prefetch) is also compiled on its own for every
target, so that the branches of its guards that a target's kernels never
call compile too, and the prefetch helper's MSVC branches with clang
targeting MSVC.  `make test` installs the cross compilers and clang
(`make cross-compiler`).
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
# 4 KiB: the corpus's 8 KiB tensors count as larger than the cache
CACHE_BYTES = 4096
X86 = ("avx512", "avx2", "none")
# foreign ISA -> (cross compiler, the -march its build uses before the ISA's
# own arch flags, or where Inductor passes none)
CROSS = {
    "neon": ("aarch64-linux-gnu-g++", ["-march=armv8-a"]),
    "sve256": ("aarch64-linux-gnu-g++", []),
    "vsx": ("powerpc64le-linux-gnu-g++", ["-mcpu=power8"]),
    "zvector": ("s390x-linux-gnu-g++", ["-march=z14"]),
}
FUZZ_SAMPLE = 6  # fuzz programs compiled for each foreign ISA, next to the corpus
# The x86 wheel's sleef.h declares only the x86 entry points; without this
# macro the aarch64 vector headers use their own fallbacks for them (the
# kernels' code is the same either way).
NOT_FOR_CROSS_SYNTAX = {"AT_BUILD_ARM_VEC256_WITH_SLEEF"}
# The VSX and ZVECTOR headers call Sleef's 128-bit entry points, which the x86
# wheel's sleef.h does not declare: declared for the syntax check (float x 4
# and double x 2 vectors, one or two operands), from the headers' own calls.
SLEEF_HEADERS = ("ATen/cpu/vec/vec256/vsx", "ATen/cpu/vec/vec256/zarch")
SLEEF_BINARY = ("atan2", "copysign", "fmod", "hypot", "nextafter", "pow")


def generate(
    isa: str, out: Path, fuzz_sample: int = 0, only=None, overlay: bool = True
) -> dict:
    env = {**os.environ, "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "tools.isa_codegen", "--isa", isa, "--out", str(out),
         "--cache-bytes", str(CACHE_BYTES), "--fuzz-sample", str(fuzz_sample),
         *(["--only", *only] if only is not None else []),
         *([] if overlay else ["--overlay-off"])],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads((out / "manifest.json").read_text())


def kernels(out: Path, manifest: dict) -> list[Path]:
    return [out / k for p in manifest["programs"].values() for k in p["kernels"]]


INCLUDE = Path(torch.__file__).parent / "include"


def sleef_declarations() -> str:
    names = sorted(
        {
            name
            for folder in SLEEF_HEADERS
            for header in (INCLUDE / folder).glob("*.h")
            for name in re.findall(r"\bSleef_\w+", header.read_text())
        }
    )
    lines = [
        "#pragma once",
        "typedef float sleef_f4 __attribute__((vector_size(16)));",
        "typedef double sleef_d2 __attribute__((vector_size(16)));",
    ]
    for name in names:
        kind = "sleef_f4" if "f4" in name else "sleef_d2" if "d2" in name else None
        if kind is None:
            continue  # another width: not called on these ISAs
        operands = 2 if any(op in name for op in SLEEF_BINARY) else 1
        lines.append(f"{kind} {name}({', '.join([kind] * operands)});")
    return "\n".join(lines) + "\n"


def cross_syntax_check(
    source: Path, manifest: dict, tmp_path: Path
) -> subprocess.CompletedProcess:
    cxx, march = CROSS.get(manifest["isa"], ("g++", []))  # x86: the host's
    defines = [f"-D{m}" for m in manifest["macros"] if m not in NOT_FOR_CROSS_SYNTAX]
    shim = tmp_path / "sleef_declarations.h"
    if manifest["isa"] in ("vsx", "zvector") and not shim.exists():
        shim.write_text(sleef_declarations())
    command = [
        cxx, "-std=c++20", "-fsyntax-only", "-fopenmp", *march,
        *manifest["arch_flags"].split(), *defines,
        *(["-include", str(shim)] if shim.exists() else []),
        f"-I{INCLUDE}", f"-I{INCLUDE / 'torch/csrc/api/include'}", str(source),
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def require_cross_compiler(isa: str) -> None:
    cxx = CROSS[isa][0]
    if shutil.which(cxx) is None:
        pytest.fail(
            f"{cxx} not found: run `make cross-compiler` (Debian's cross "
            "compilers) or `make test`, which installs them"
        )


STREAMING = ("stream_store_f32(", "stream_fence()")
# Spellings of one compiler or ISA in the overlay's kernel helpers
# (cpp_fusion/emitters/kernel_helpers.py), and the preprocessor branch each
# must sit in, so that MSVC (Inductor's Windows compiler) or a build for
# another ISA never compiles one: kernels call the helpers, never these.
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
    """Compiled by Inductor and checked against eager where the host runs
    the ISA; otherwise compiled by the host's g++ (``-fsyntax-only``)."""
    out = tmp_path / isa
    manifest = generate(isa, out)
    if not manifest["native"]:  # compiled only, with the host's g++
        assert not syntax_errors(out, manifest, tmp_path)
        assert_features_taken(out, manifest, streams=True)
        return
    wrong = [n for n, p in manifest["programs"].items() if not p["allclose"]]
    assert not wrong, f"{isa}: differs from eager: {wrong}"
    if isa != "none":  # scalar kernels have no vector stores to stream
        assert_features_taken(out, manifest, streams=True)


def one_translation_unit(sources: list[Path], path: Path) -> Path:
    """The kernels of ``sources`` in one file, each ``kernel`` renamed: the
    headers are parsed once for all of them.  The overlay's helpers carry
    include guards, as the C++ wrapper already relies on."""
    lines = ["#include <torch/csrc/inductor/cpp_prefix.h>"]
    for index, source in enumerate(sources):
        lines += [
            f"#define kernel kernel_{index}",
            f'#include "{source}"',
            "#undef kernel",
        ]
    path.write_text("\n".join(lines) + "\n")
    return path


def error_lines(result: subprocess.CompletedProcess) -> list[str]:
    return [ln for ln in result.stderr.splitlines() if "error" in ln][:3]


def syntax_errors(out: Path, manifest: dict, tmp_path: Path) -> dict[str, list]:
    """program -> the first errors of its kernels that do not compile.

    The kernels are checked together; when that fails, the kernels the
    diagnostics name (all of them, if none is named) are checked alone and
    the rest together again, until what is left compiles."""
    program_of = {
        out / kernel: name
        for name, program in manifest["programs"].items()
        for kernel in program["kernels"]
    }
    errors: dict[str, list] = {}
    left = list(program_of)
    while left:
        unit = one_translation_unit(left, tmp_path / "kernels.cpp")
        result = cross_syntax_check(unit, manifest, tmp_path)
        if result.returncode == 0:
            break
        named = [k for k in left if str(k) in result.stderr] or left
        for kernel in named:
            alone = cross_syntax_check(kernel, manifest, tmp_path)
            if alone.returncode != 0:
                errors.setdefault(program_of[kernel], []).extend(error_lines(alone))
        left = [k for k in left if k not in named]
    return errors


def test_kernels_checked_together_report_each_broken_program(tmp_path):
    """A kernel that does not compile is found, with its program, among
    kernels that do; one whose error is reported in a header is too."""
    require_cross_compiler("neon")
    from tools.isa_codegen import ISAS, build_flags

    body = "{\n    %s\n}\n"
    sources = {
        "fine": "at::vec::Vectorized<float>::loadu(in).store(out);",
        "undeclared": "undeclared_helper(out);",
        "in_a_header": "at::vec::Vectorized<float>::loadu(in).no_such_method();",
        "also_fine": "out[0] = in[0];",
    }
    programs = {}
    for name, statement in sources.items():
        (tmp_path / f"{name}.0.cpp").write_text(
            "#include <torch/csrc/inductor/cpp_prefix.h>\n"
            'extern "C" void kernel(const float* in, float* out)\n' + body % statement
        )
        programs[name] = {"kernels": [f"{name}.0.cpp"]}
    manifest = {"isa": "neon", **build_flags(ISAS["neon"]()), "programs": programs}
    errors = syntax_errors(tmp_path, manifest, tmp_path)
    assert sorted(errors) == ["in_a_header", "undeclared"]
    assert all(errors.values()), errors


@pytest.mark.parametrize("isa", list(CROSS))
def test_foreign_isa_kernels_compile(isa, tmp_path):
    """The corpus and FUZZ_SAMPLE fuzz programs, generated for ``isa``.  A
    program whose stock kernels (every overlay flag off) fail the same way
    is upstream's (the ZVECTOR headers lack comparison operators that
    Inductor's VectorizedN code calls), reported but not failed."""
    require_cross_compiler(isa)
    out = tmp_path / isa
    manifest = generate(isa, out, fuzz_sample=FUZZ_SAMPLE)
    fuzzed = [name for name in manifest["programs"] if name.startswith("fuzz_")]
    assert len(fuzzed) == FUZZ_SAMPLE
    errors = syntax_errors(out, manifest, tmp_path)
    if errors:
        stock_out = tmp_path / f"{isa}-stock"
        stock = generate(
            isa,
            stock_out,
            FUZZ_SAMPLE if set(errors) & set(fuzzed) else 0,
            overlay=False,
            only=[n for n in errors if n not in fuzzed],
        )
        stock_errors = syntax_errors(stock_out, stock, tmp_path)
        upstream = sorted(set(errors) & set(stock_errors))
        print(f"{isa}: stock's kernels fail too (upstream): {upstream}")
        errors = {n: e for n, e in errors.items() if n not in stock_errors}
    assert not errors, "\n".join(f"{n}: {e}" for n, e in errors.items())
    assert_features_taken(out, manifest, streams=False)


def helpers_translation_unit() -> str:
    """Every kernel helper's definition and a call of each: what a kernel
    that used them all would hold before its function."""
    from torch._inductor.codegen.cpp_fusion.emitters import kernel_helpers as helpers
    from torch._inductor.codegen.cpp_fusion.emitters import prefetch as prefetch
    from torch._inductor.utils import IndentedBuffer

    class Args:  # a kernel's KernelArgs, as far as the helpers need one
        pass

    args, code = Args(), IndentedBuffer()
    for helper in (helpers.STREAM_STORE, helpers.STREAM_FENCE, prefetch.PREFETCH):
        helpers.use(args, helper)
    helpers.write_definitions(code, args)
    return (
        "#include <torch/csrc/inductor/cpp_prefix.h>\n"
        + code.getvalue()
        + "\nvoid kernel(float* out, const float* in) {\n"
        f"    {prefetch.PREFETCH.name}(in, 256);\n"
        f"    {helpers.STREAM_STORE.name}(out, "
        "at::vec::Vectorized<float>::loadu(in));\n"
        f"    {helpers.STREAM_FENCE.name}();\n"
        "}\n"
    )


@pytest.mark.parametrize("isa", list(CROSS))
def test_every_helper_compiles_on_a_foreign_isa(isa, tmp_path):
    """The streaming store and fence compile where the kernels never call
    them (no non-temporal stores off x86), the prefetch everywhere."""
    require_cross_compiler(isa)
    from tools.isa_codegen import ISAS, build_flags

    source = tmp_path / "helpers.cpp"
    source.write_text(helpers_translation_unit())
    manifest = {"isa": isa, **build_flags(ISAS[isa]())}
    result = cross_syntax_check(source, manifest, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]


# The prefetch helper's MSVC branches (_mm_prefetch on x64, __prefetch on
# ARM64) are taken by no compiler above: GCC and Clang (clang-cl too) take
# __builtin_prefetch.  clang targeting MSVC with __clang__ and __GNUC__
# undefined takes them, against clang's MSVC-compatible <intrin.h>.  There
# is no MSVC C runtime or STL offline: test/msvc_stubs/ declares what
# <intrin.h> and the helper use from them, and ARM64's __prefetch, which
# only MSVC's own headers declare.  So the x64 branch is checked against a
# real declaration of _mm_prefetch; the ARM64 branch for its syntax and the
# call's arity.
MSVC_TARGETS = {"x64": "x86_64-pc-windows-msvc", "arm64": "aarch64-pc-windows-msvc"}
MSVC_PREFETCH = {"x64": "_mm_prefetch(", "arm64": "__prefetch("}
MSVC_STUBS = Path(__file__).resolve().parent / "msvc_stubs"


def msvc_clang(arch: str, source: Path, *flags: str) -> subprocess.CompletedProcess:
    if shutil.which("clang") is None:
        pytest.fail("no clang: `make cross-compiler` installs it")
    cmd = [
        "clang", f"--target={MSVC_TARGETS[arch]}", "-x", "c++", "-std=c++17",
        "-U__clang__", "-U__GNUC__", "-Wno-builtin-macro-redefined",
        "-isystem", str(MSVC_STUBS), "-include", str(MSVC_STUBS / "msvc_prelude.h"),
        *flags, str(source),
    ]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


@pytest.mark.parametrize("arch", list(MSVC_TARGETS))
def test_prefetch_helper_compiles_for_msvc(arch, tmp_path):
    from torch._inductor.codegen.cpp_fusion.emitters import prefetch as prefetch

    source = tmp_path / "prefetch.cpp"
    source.write_text(
        prefetch.PREFETCH.definition
        + f"\nvoid use(const float* x) {{ {prefetch.PREFETCH.name}(x, 256); }}\n"
    )
    checked = msvc_clang(arch, source, "-fsyntax-only")
    assert checked.returncode == 0, checked.stderr[-3000:]
    preprocessed = msvc_clang(arch, source, "-E", "-P").stdout
    helper = preprocessed[preprocessed.index("inline void prefetch_ahead") :]
    assert MSVC_PREFETCH[arch] in helper and "__builtin_prefetch" not in helper
