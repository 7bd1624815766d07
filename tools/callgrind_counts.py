"""Instruction and cache-miss counts per call: eager, stock and patched.

    python -m tools.callgrind_counts CASE [--variant eager|compiled] [--calls N]
                                     [--threads T] [--cpp-wrapper] [--stock]

Runs CASE under ``valgrind --tool=callgrind --cache-sim=yes`` with
instrumentation switched on only around N calls made after three warm-up
calls (CALLGRIND_START/STOP_INSTRUMENTATION from a small C helper built
with gcc and loaded with ctypes), then prints per call: instructions (Ir)
per element of the output, split into the compiled kernel, libtorch_cpu
(eager's kernel; Sleef's exp/log that the compiled code calls), the
interpreter and the rest of the call path, and the D1/LL read and write
misses.  ``--stock`` runs ``.venv-stock``'s Python instead of this one.

Counts, unlike timings, do not move when other processes share the
machine.  Valgrind 3.19 does not decode AVX-512, so the run sets
ATEN_CPU_CAPABILITY=avx2 and builds the compiled kernels with a g++
wrapper that appends -mno-avx512f (Inductor passes -march=native), in a
cache directory of its own.  The simulated last-level cache is 32 MiB,
16-way; the cases' tensors are warm in it, as in a loop of calls.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

MARKER_C = """#include <valgrind/callgrind.h>
void cg_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void cg_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; CALLGRIND_DUMP_STATS_AT("calls"); }
"""
WORK = Path(tempfile.gettempdir()) / "callgrind_counts"


def cases():
    import torch

    F = torch.nn.functional
    w768, b768 = torch.randn(768), torch.randn(768)
    w320, b320 = torch.randn(320), torch.randn(320)
    nchw = torch.randn(2, 320, 64, 64)
    return {
        "layernorm_bert": (lambda x: F.layer_norm(x, (768,), w768, b768),
                           torch.randn(8, 128, 768)),
        "layernorm_vit": (lambda x: F.layer_norm(x, (768,), w768, b768),
                          torch.randn(8, 197, 768)),
        "softmax_384": (lambda x: torch.softmax(x, -1), torch.randn(1, 12, 384, 384)),
        "log_softmax_1000ch": (lambda x: torch.log_softmax(x, 1),
                               torch.randn(8, 1000, 7, 7)),
        "softmax_3ch": (lambda x: torch.softmax(x, 1), torch.randn(8, 3, 256, 256)),
        "log_softmax_3ch": (lambda x: torch.log_softmax(x, 1),
                            torch.randn(8, 3, 256, 256)),
        "log_softmax_3ch_one_image": (lambda x: torch.log_softmax(x, 1),
                                      torch.randn(1, 3, 256, 256)),
        "add_one_attention_scores": (lambda x: x + 1, torch.randn(4, 12, 128, 128)),
        "group_norm_unet": (lambda x: F.group_norm(x, 32, w320, b320), nchw),
        "group_norm_unet_channels_last": (
            lambda x: F.group_norm(x, 32, w320, b320),
            nchw.to(memory_format=torch.channels_last)),
        "floor": (lambda x: x + 1, torch.randn(1)),
    }  # fmt: skip


def run_case(name: str, variant: str, calls: int, threads: int) -> None:
    """The child: N calls of one case between the callgrind markers."""
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(threads)
    torch._inductor.config.cpp.threads = threads
    marker = ctypes.CDLL(str(WORK / "marker.so"))
    fn, x = cases()[name]
    if variant == "compiled":
        fn = torch.compile(fn)
    with torch.no_grad():
        for _ in range(3):
            fn(x)
        marker.cg_start()
        for _ in range(calls):
            fn(x)
        marker.cg_stop()


def _group(line: str) -> str:
    if ":kernel" in line:
        return "compiled kernel"
    obj = re.search(r"\[([^\]]+)\]\s*$", line)
    name = obj.group(1).rsplit("/", 1)[-1] if obj else ""
    if name.startswith("libtorch_cpu"):
        return "libtorch_cpu"
    if name.startswith("libpython") or "Python-3" in line:
        return "interpreter"
    return "call path (libtorch_python, libc, ...)"


def summarize(out: Path, calls: int, numel: int) -> str:
    totals, groups = read_counts(out)
    lines = [f"per call: {totals['Ir'] / calls:,.0f} Ir, "
             f"{totals['Ir'] / calls / numel:.3f} per element"]
    for group, ir in groups.most_common():
        per_call = ir / calls
        lines.append(f"  {group:40s} {per_call:>12,.0f}  {per_call / numel:.3f}/elem")
    misses = ", ".join(f"{e} {totals.get(e, 0) / calls:,.0f}"
                       for e in ("D1mr", "D1mw", "DLmr", "DLmw"))
    lines.append(f"  misses per call: {misses}")
    return "\n".join(lines)  # fmt: skip


def read_counts(out: Path) -> tuple[dict[str, int], collections.Counter[str]]:
    """The dump's event totals, and its instructions per group of code."""
    text = subprocess.run(
        ["callgrind_annotate", "--threshold=100", "--auto=no", str(out)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    shown = re.search(r"^Events shown:\s+(.*)$", text, re.M)
    if shown is None:
        raise SystemExit(f"callgrind_annotate printed no events for {out}")
    events = shown.group(1).split()
    groups: collections.Counter[str] = collections.Counter()
    totals: dict[str, int] = {}
    for line in text.splitlines():
        values = re.findall(r"([\d,]+) \(\s*[\d.]+%\)|(?<=\s)\.(?=\s)", line)
        if not values or not re.match(r"^\s*[\d,]+ \(", line):
            continue
        ir = int(values[0].replace(",", ""))
        if "PROGRAM TOTALS" in line:
            nums = re.findall(r"([\d,]+) \(", line)
            totals = dict(zip(events, (int(n.replace(",", "")) for n in nums)))
        else:
            groups[_group(line)] += ir
    return totals, groups


def _prepare() -> dict[str, str]:
    WORK.mkdir(exist_ok=True)
    (WORK / "marker.c").write_text(MARKER_C)
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(WORK / "marker.so"),
                    str(WORK / "marker.c")], check=True)  # fmt: skip
    cxx = WORK / "g++"
    cxx.write_text('#!/bin/sh\nexec g++ "$@" -mno-avx512f\n')
    cxx.chmod(0o755)
    return {"ATEN_CPU_CAPABILITY": "avx2", "CXX": str(cxx), "PYTHONHASHSEED": "0"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case")
    parser.add_argument("--variant", choices=["eager", "compiled"], default="compiled")
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cpp-wrapper", action="store_true")
    parser.add_argument("--stock", action="store_true")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    if opts.child:
        if opts.cpp_wrapper:
            import torch

            torch._inductor.config.cpp_wrapper = True
        run_case(opts.case, opts.variant, opts.calls, opts.threads)
        return 0
    if opts.case not in cases():
        parser.error(f"unknown case {opts.case!r}")
    env = {**os.environ, **_prepare(), "OMP_NUM_THREADS": str(opts.threads),
           "OMP_WAIT_POLICY": "passive"}  # fmt: skip
    python = "./.venv-stock/bin/python" if opts.stock else sys.executable
    venv = "stock" if opts.stock else "here"
    tag = f"{opts.case}.{opts.variant}.{venv}.{os.getpid()}"
    env["TORCHINDUCTOR_CACHE_DIR"] = str(WORK / f"cache-{venv}")
    child = [python, "-m", "tools.callgrind_counts", opts.case, "--child",
             "--variant", opts.variant, "--calls", str(opts.calls),
             "--threads", str(opts.threads)]
    child += ["--cpp-wrapper"] if opts.cpp_wrapper else []
    if opts.variant == "compiled":  # compile outside valgrind first
        subprocess.run(child, env=env, check=True)
    out = WORK / f"callgrind.{tag}"
    subprocess.run(["valgrind", "--tool=callgrind", "--cache-sim=yes",
                    "--LL=33554432,16,64", "--instr-atstart=no",
                    f"--callgrind-out-file={out}", *child],
                   env=env, check=True, capture_output=True)  # fmt: skip
    dump = next(WORK.glob(f"callgrind.{tag}.*"))
    import torch  # noqa: F401  (numel of the case's output)

    _, x = cases()[opts.case]
    print(f"{opts.case} {opts.variant} ({venv}), "
          f"{opts.threads} thread(s){', cpp_wrapper' if opts.cpp_wrapper else ''}")
    print(summarize(dump, opts.calls, x.numel()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
