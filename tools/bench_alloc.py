"""What the CPU allocator costs a compiled call (``make bench-alloc``).

    python -m tools.bench_alloc [--threads 1,2] [--reps 15] [--only mul2,...]

A compiled program returns fresh outputs on every call, and so does eager.
With glibc's default malloc, an allocation of 32 MiB or more is a fresh
``mmap``: every call page-faults its output in and ``munmap``s the one
before.  The other benches run under GLIBC_TUNABLES that keep freed memory
(``bench.NO_PAGE_FAULT_TUNABLES``); users mostly run without them.  This
bench runs the same workloads, eager, compiled stock (every overlay flag
off) and compiled with the overlay as shipped, under each allocator a user
can pick without rebuilding anything:

- ``default``: glibc's malloc as it comes;
- ``tuned``: glibc's malloc with the tunables the benches use;
- ``jemalloc`` and ``tcmalloc``: preloaded (``LD_PRELOAD``) from the
  system's ``libjemalloc.so.2`` and ``libtcmalloc_minimal.so.4`` (Debian's
  ``libjemalloc2`` and ``libtcmalloc-minimal4``), skipped with a note where
  the library is not installed;
- ``jemalloc-kept``: jemalloc with ``MALLOC_CONF`` that keeps freed pages
  (``JEMALLOC_KEPT``).

Each allocator runs in its own process (one allocator per process is the
only way to preload one).  In it, the three alternate repetition
by repetition over staggered input copies (``bench._time_interleaved``: each
timed call includes freeing its output), and the minor page faults of each
variant are counted over further calls (``getrusage``).  The table gives
medians, the compiled/eager ratio per allocator, and each variant's time
against its own time under ``default``.
"""

from __future__ import annotations

import argparse
import ctypes.util
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
from pathlib import Path

from tools import bench

ALLOCATORS = ("default", "tuned", "jemalloc", "jemalloc-kept", "tcmalloc")
# the shared objects preloaded for the allocators that replace malloc
PRELOADED = {
    "jemalloc": "libjemalloc.so.2",
    "jemalloc-kept": "libjemalloc.so.2",
    "tcmalloc": "libtcmalloc_minimal.so.4",
}
# jemalloc as it comes returned freed blocks of 8 MiB and more to the kernel
# at once (docs/results.md, "The allocator"); with no decay it keeps them,
# as the tuned glibc does
JEMALLOC_KEPT = "dirty_decay_ms:-1,muzzy_decay_ms:-1"
DEBIAN_PACKAGES = {
    "libjemalloc.so.2": "libjemalloc2",
    "libtcmalloc_minimal.so.4": "libtcmalloc-minimal4",
}
RESULTS_STEM = "alloc"
FAULT_CALLS = 5  # calls per variant over which page faults are counted


class AllocatorMissing(RuntimeError):
    pass


def _library(soname: str) -> str | None:
    """The path of ``soname`` in the system's library directories, if any."""
    arch = f"{platform.machine()}-linux-gnu"
    for directory in (f"/usr/lib/{arch}", f"/lib/{arch}", "/usr/lib", "/usr/lib64"):
        path = Path(directory) / soname
        if path.exists():
            return str(path)
    name = ctypes.util.find_library(soname.removeprefix("lib").split(".so")[0])
    return name if name and Path(name).is_absolute() else None


def environment(allocator: str, base: dict[str, str]) -> dict[str, str]:
    """``base`` with the settings that select ``allocator`` for a child;
    AllocatorMissing (nothing changed) where its library is not installed."""
    if allocator not in ALLOCATORS:
        raise ValueError(f"unknown allocator {allocator!r}: one of {ALLOCATORS}")
    settings = ("GLIBC_TUNABLES", "LD_PRELOAD", "MALLOC_CONF")
    env = {k: v for k, v in base.items() if k not in settings}
    if allocator == "tuned":
        env["GLIBC_TUNABLES"] = bench.NO_PAGE_FAULT_TUNABLES
    elif allocator in PRELOADED:
        path = _library(PRELOADED[allocator])
        if path is None:
            raise AllocatorMissing(
                f"{allocator}: {PRELOADED[allocator]} is not installed "
                f"(Debian: apt-get install {DEBIAN_PACKAGES[PRELOADED[allocator]]})"
            )
        env["LD_PRELOAD"] = path
        if allocator == "jemalloc-kept":
            env["MALLOC_CONF"] = JEMALLOC_KEPT
    return env


def _workloads():
    import torch
    import torch.nn.functional as F

    def mul2():  # the allocator's case in its plainest form: 64 MiB out
        x = torch.randn(1 << 24)
        return (lambda x: x * 2), (x,)

    def layernorm():  # rows of 1000 above the last-level cache, 65 MB
        m, x = torch.nn.LayerNorm(1000), torch.randn(16384, 1000)
        return m, (x,)

    def groupnorm_silu():  # Stable Diffusion's UNet block, 10 MiB
        m, x = torch.nn.GroupNorm(32, 320), torch.randn(2, 320, 64, 64)
        return (lambda x: F.silu(m(x))), (x,)

    def softmax():  # BERT-large attention scores, 9 MiB
        x = torch.randn(1, 16, 384, 384)
        return (lambda x: torch.softmax(x, -1)), (x,)

    def rmsnorm():  # a LLaMA-width RMSNorm, 8 MiB
        w, x = torch.randn(4096), torch.randn(1, 512, 4096)

        def fn(x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

        return fn, (x,)

    return {
        "mul2_64MiB": mul2,
        "layernorm_16384x1000": layernorm,
        "groupnorm_silu_2x320x64x64": groupnorm_silu,
        "softmax_1x16x384x384": softmax,
        "rmsnorm_1x512x4096": rmsnorm,
    }


def _faults_per_call(fn, arg_sets) -> float:
    import torch

    with torch.no_grad():
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for i in range(FAULT_CALLS):
            fn(*arg_sets[i % len(arg_sets)])
        after = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    return (after - before) / FAULT_CALLS


def _child(opts) -> None:
    import torch

    rows = []
    for name, make in _workloads().items():
        if opts.only and name.split("_")[0] not in opts.only.split(","):
            continue
        fn, args = make()
        arg_sets = bench._staggered_copies(args, copies=2)
        for threads in map(int, opts.threads.split(",")):
            # the compiled code is specialized to the thread count
            torch.set_num_threads(threads)
            torch._dynamo.reset()
            stock, _, _ = bench._compile(fn, args, overlay=False)
            compiled, _, _ = bench._compile(fn, args, overlay=True)
            variants = {"eager": bench._fresh(fn), "stock": stock, "compiled": compiled}
            times = bench._time_interleaved(variants, arg_sets, opts.reps)
            row = {"workload": name, "threads": threads, "allocator": opts.malloc}
            for variant, samples in times.items():
                row[f"{variant}_ms"] = statistics.median(samples) * 1e3
                row[f"{variant}_faults"] = _faults_per_call(variants[variant], arg_sets)
            for reference in ("eager", "stock"):
                row[f"compiled_over_{reference}"] = bench.paired_ratio(
                    times["compiled"], times[reference]
                )
            rows.append(row)
            print(json.dumps(row), flush=True)
        opts.child.write_text(json.dumps(rows))


def markdown(rows: list[dict], header: str) -> str:
    default = {
        (r["workload"], r["threads"]): r for r in rows if r["allocator"] == "default"
    }
    lines = [
        header,
        "",
        "| workload | thr | allocator | eager ms | stock ms | compiled ms "
        "| compiled/eager | compiled/stock | eager / compiled vs default "
        "| page faults per call: eager / compiled |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        base = default.get((r["workload"], r["threads"]))
        versus = (
            f"{r['eager_ms'] / base['eager_ms']:.2f} / "
            f"{r['compiled_ms'] / base['compiled_ms']:.2f}"
            if base
            else "n/a"
        )
        lines.append(
            f"| {r['workload']} | {r['threads']} | {r['allocator']} | "
            f"{r['eager_ms']:.3f} | {r['stock_ms']:.3f} | {r['compiled_ms']:.3f} | "
            f"{r['compiled_over_eager']:.2f} | {r['compiled_over_stock']:.2f} | "
            f"{versus} | "
            f"{r['eager_faults']:.0f} / {r['compiled_faults']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default=f"1,{os.cpu_count()}")
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--only", default="", help="workload names' first word")
    parser.add_argument("--allocators", default=",".join(ALLOCATORS))
    parser.add_argument("--out", type=Path, default=bench.RESULTS_DIR)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--malloc", default="default", help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    if opts.child:
        _child(opts)
        return 0
    opts.out.mkdir(parents=True, exist_ok=True)
    rows, notes = [], []
    for allocator in opts.allocators.split(","):
        try:
            env = environment(allocator, dict(os.environ))
        except AllocatorMissing as missing:
            notes.append(f"skipped: {missing}")
            print(notes[-1], file=sys.stderr)
            continue
        out = opts.out / f"{RESULTS_STEM}_{allocator}.json"
        out.unlink(missing_ok=True)
        args = [sys.executable, "-m", "tools.bench_alloc", "--child", str(out)]
        args += ["--malloc", allocator, "--threads", opts.threads]
        args += ["--reps", str(opts.reps), "--only", opts.only]
        subprocess.run(args, env=env, check=False)
        if out.exists():
            rows += json.loads(out.read_text())
        else:
            notes.append(f"{allocator}: the child wrote no rows")
    rows.sort(key=lambda r: (r["workload"], r["threads"]))
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    header = (
        f"{bench.cpu_model()}, {os.cpu_count()} cores, {stamp}; medians of "
        f"{opts.reps} interleaved reps over 2 staggered input copies, each "
        "timed call including the free of its output; compiled = the overlay "
        "as shipped" + "".join(f"; {n}" for n in notes)
    )
    text = markdown(rows, header)
    print(text)
    (opts.out / f"{RESULTS_STEM}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
