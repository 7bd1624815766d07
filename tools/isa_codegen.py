"""Generate the corpus's C++ kernels for a vector ISA other than the host's.

    python -m tools.isa_codegen --isa neon --out DIR [--only NAME ...]
                                [--fuzz-sample N [--fuzz-seed S]]

Inductor picks its vector ISA with ``cpu_vec_isa.pick_vec_isa()``, which
chooses among ``cpu_vec_isa.valid_vec_isa_list()`` (the ISAs this CPU runs)
by ``config.cpp.simdlen``.  We replace that list with the one ISA asked for
and set ``simdlen`` to its width, so codegen (loop tiling, vector types,
``CPU_CAPABILITY_*`` macros of the build) is the one a machine with that ISA
gets.  ``config.cpp.vec_isa_ok`` skips the probe that would try to run a
foreign ISA's code here.

An ISA the host runs (``native``) is compiled by Inductor as usual and each
program is checked against eager.  For a foreign one the kernels are not
built: each kernel's source is recorded and a stub stands in for it, so the
outputs mean nothing; test/test_cross_isa_compile.py compiles the sources
with a cross compiler (``-fsyntax-only``) and the macros and arch flags
written to ``DIR/manifest.json``.

The overlay's memory features only act on kernels larger than the last-level
cache; ``--cache-bytes`` sets the size they assume so that the corpus's small
programs take their paths (streaming stores, fences, prefetches).
``--fuzz-sample N`` adds N programs the fuzzer draws (a fixed seed), each
compiled under the config and flags the fuzzer would give it.
"""

from __future__ import annotations

import os

os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import argparse
import contextlib
import functools
import json
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple
from unittest import mock

import torch

ISAS: dict[str, Callable] = {}


def _isa(name: str):
    def register(make: Callable) -> Callable:
        ISAS[name] = make
        return make

    return register


@_isa("avx512")
def _avx512():
    from torch._inductor.cpu_vec_isa import VecAVX512

    return VecAVX512()


@_isa("avx2")
def _avx2():
    from torch._inductor.cpu_vec_isa import VecAVX2

    return VecAVX2()


@_isa("none")
def _no_vectors():
    return None  # scalar kernels: Inductor's invalid_vec_isa


@_isa("neon")
def _neon():
    from torch._inductor.cpu_vec_isa import VecNEON

    return VecNEON()


@_isa("sve256")
def _sve256():
    from torch._inductor.cpu_vec_isa import VecSVE

    return VecSVE(256)


@_isa("vsx")
def _vsx():
    from torch._inductor.cpu_vec_isa import VecVSX

    return VecVSX()


@_isa("zvector")
def _zvector():
    from torch._inductor.cpu_vec_isa import VecZVECTOR

    return VecZVECTOR()


def host_runs(isa) -> bool:
    """Whether this CPU runs ``isa``'s code (a scalar kernel runs anywhere)."""
    from torch._inductor import cpu_vec_isa

    runs = cpu_vec_isa.valid_vec_isa_list()
    return isa is None or any(str(v) == str(isa) for v in runs)


def build_flags(isa) -> dict:
    """The macros and arch flags Inductor's C++ builder passes for ``isa``."""
    if isa is None:
        return {"macros": [], "arch_flags": ""}
    return {
        "macros": [m for m in isa.build_macro() if m],
        "arch_flags": isa.build_arch_flags(),
    }


@contextlib.contextmanager
def forced_isa(isa, *, native: bool) -> Iterator[list[str]]:
    """Codegen for ``isa``; yields the list the kernels' sources are appended to."""
    from torch._inductor import config, cpu_vec_isa
    from torch._inductor.async_compile import AsyncCompile

    sources: list[str] = []
    compile_pybinding = AsyncCompile.cpp_pybinding

    def record(self, argtypes, source_code):
        sources.append(source_code)
        if native:
            return compile_pybinding(self, argtypes, source_code)
        return lambda *args: None  # a foreign ISA's kernel cannot run here

    patch = {
        # simdlen picks from the list by width; with it set, Inductor
        # ignores $ATEN_CPU_CAPABILITY
        "cpp.simdlen": isa.bit_width() if isa is not None else 1,
        "cpp.vec_isa_ok": None if native else True,
        "force_disable_caches": True,
    }
    isas = [isa] if isa is not None else []
    with (
        mock.patch.object(cpu_vec_isa, "valid_vec_isa_list", lambda: isas),
        mock.patch.object(AsyncCompile, "cpp_pybinding", record),
        config.patch(patch),
    ):
        yield sources


class _Program(NamedTuple):
    fn: Callable
    args: tuple
    config: dict
    dynamic: bool
    close: Callable  # (expected, actual) -> bool


def corpus_program(name: str) -> _Program:
    from tools.corpus_codegen import PROGRAMS, outputs_close

    torch.manual_seed(0)
    case = PROGRAMS[name]()
    return _Program(
        case.fn, tuple(case.args), dict(case.config), False,
        lambda expected, actual: outputs_close(expected, actual, case.tol)[0],
    )  # fmt: skip


def fuzz_programs(n: int, seed: int) -> dict[str, Callable[[], _Program]]:
    """``n`` fuzz programs (``strategy.sample_cases``), each under the
    config, flags and dynamic shapes the fuzzer would compile it with."""
    from tools.fuzz.check import case_config, compare, tolerances
    from tools.fuzz.strategy import sample_cases
    from fusion_overlay.flags import config_patch

    def program(case) -> _Program:
        flags = config_patch(True) if case.flags == "all" else {}
        return _Program(
            case.build(), tuple(case.make_inputs()),
            {**flags, **case_config(case, overlay=True)}, case.dynamic,
            lambda expected, actual: compare(
                tuple(actual), tuple(expected), tolerances(case)[0]
            ).ok,
        )  # fmt: skip

    return {
        f"fuzz_{case.digest()}": functools.partial(program, case)
        for case in sample_cases(n, seed)
    }


def generate(
    isa_name: str,
    out: Path,
    only: list[str] | None,
    threads: int,
    fuzz_sample: int = 0,
    fuzz_seed: int = 0,
    overlay_off: bool = False,
) -> dict:
    """The kernels of the corpus (or ``only``) and ``fuzz_sample`` fuzz
    programs for ``isa_name``, written to ``out`` with a manifest;
    ``overlay_off``: every overlay flag off (stock's kernels)."""
    from torch._inductor import config

    from tools.corpus_codegen import PROGRAMS
    from fusion_overlay.flags import config_patch

    stock = config_patch(False) if overlay_off else {}

    isa = ISAS[isa_name]()
    native = host_runs(isa)
    out.mkdir(parents=True, exist_ok=True)
    makers: dict[str, Callable[[], _Program]] = {
        name: functools.partial(corpus_program, name)
        for name in (PROGRAMS if only is None else only)
    }
    if fuzz_sample:
        makers.update(fuzz_programs(fuzz_sample, fuzz_seed))
    programs: dict[str, dict] = {}
    for name, make in makers.items():
        try:
            program = make()
            with (
                forced_isa(isa, native=native) as sources,
                config.patch({"cpp.threads": threads, **program.config, **stock}),
                torch.no_grad(),
            ):
                torch._dynamo.reset()
                expected = program.fn(*program.args)
                compiled = torch.compile(
                    program.fn, fullgraph=True, dynamic=program.dynamic
                )
                actual = compiled(*program.args)
        except Exception:
            programs[name] = {"error": traceback.format_exc(limit=8)}
            continue
        files = []
        for index, source in enumerate(sources):
            path = out / f"{name}.{index}.cpp"
            path.write_text(source)
            files.append(path.name)
        result: dict = {"kernels": files}
        if native:
            result["allclose"] = bool(program.close(expected, actual))
        programs[name] = result
    manifest = {
        "isa": isa_name,
        "native": native,
        "overlay": not overlay_off,
        **build_flags(isa),
        "programs": programs,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--isa", required=True, choices=sorted(ISAS))
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--only", nargs="*", help="a subset of the corpus")
    parser.add_argument("--threads", type=int, default=2, help="config.cpp.threads")
    parser.add_argument(
        "--fuzz-sample", type=int, default=0, help="also N fuzz programs"
    )
    parser.add_argument("--fuzz-seed", type=int, default=0)
    parser.add_argument(
        "--overlay-off", action="store_true", help="every overlay flag off (stock)"
    )
    parser.add_argument(
        "--cache-bytes",
        type=int,
        help="the last-level cache size the overlay assumes "
        "($TORCHINDUCTOR_CPP_STREAMING_CACHE_BYTES)",
    )
    args = parser.parse_args(argv)
    if args.cache_bytes is not None:
        os.environ["TORCHINDUCTOR_CPP_STREAMING_CACHE_BYTES"] = str(args.cache_bytes)
        # the code of a cache size, not of the host's CPU vendor (0014's
        # short rows): the same on every machine
        os.environ["TORCHINDUCTOR_CPP_PREFETCH_SHORT_ROWS"] = "1"
    manifest = generate(
        args.isa, args.out, args.only, args.threads, args.fuzz_sample,
        args.fuzz_seed, args.overlay_off,
    )  # fmt: skip
    failed = [n for n, p in manifest["programs"].items() if "error" in p]
    for name in failed:
        print(f"{name}: {manifest['programs'][name]['error']}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
