"""Generate the corpus's C++ kernels for a vector ISA other than the host's.

    python -m tools.isa_codegen --isa neon --out DIR [--only NAME ...]

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
"""

from __future__ import annotations

import os

os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import argparse
import contextlib
import json
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
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


def generate(isa_name: str, out: Path, only: list[str] | None, threads: int) -> dict:
    from torch._inductor import config

    from tools.corpus_codegen import outputs_close, PROGRAMS

    isa = ISAS[isa_name]()
    native = host_runs(isa)
    out.mkdir(parents=True, exist_ok=True)
    programs: dict[str, dict] = {}
    for name in only or PROGRAMS:
        torch.manual_seed(0)
        case = PROGRAMS[name]()
        try:
            with (
                forced_isa(isa, native=native) as sources,
                config.patch({**case.config, "cpp.threads": threads}),
                torch.no_grad(),
            ):
                torch._dynamo.reset()
                expected = case.fn(*case.args)
                actual = torch.compile(case.fn, fullgraph=True)(*case.args)
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
            result["allclose"] = outputs_close(expected, actual, case.tol)[0]
        programs[name] = result
    manifest = {
        "isa": isa_name,
        "native": native,
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
        "--cache-bytes",
        type=int,
        help="the last-level cache size the overlay assumes "
        "($TORCHINDUCTOR_CPP_STREAMING_CACHE_BYTES)",
    )
    args = parser.parse_args(argv)
    if args.cache_bytes is not None:
        os.environ["TORCHINDUCTOR_CPP_STREAMING_CACHE_BYTES"] = str(args.cache_bytes)
    manifest = generate(args.isa, args.out, args.only, args.threads)
    failed = [n for n, p in manifest["programs"].items() if "error" in p]
    for name in failed:
        print(f"{name}: {manifest['programs'][name]['error']}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
