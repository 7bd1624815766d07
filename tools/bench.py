"""Benchmarks: eager vs compiled stock (overlay flags off) vs compiled patched.

    python -m tools.bench [--threads 1,2] [--reps 21] [--only layernorm,...]
    python -m tools.bench --suite shapes     # normalizations over many shapes

All three variants of a workload run in one process, interleaved repetition
by repetition, because this machine is shared and noisy.  Each row reports
the best and the median time (ratios use the best, the steady-state kernel
time; the median also carries the machine's noise), the loop nests of both
compiled versions, the achieved bandwidth against the minimum bytes the
workload must move, and the machine's copy bandwidth measured in the same run
(roofline ratio).

glibc's malloc returns every output of 32 MiB or more to the kernel, so each
call page-faults on fresh memory and those faults can hide the kernels.  The
suite runs in a child process with GLIBC_TUNABLES that keep freed memory, then
again in one with the default allocator, whose medians appear beside.

Results go to bench/results/ as markdown, JSON and (when matplotlib is
installed) a PNG chart: bench.* for the main suite, shapes.* for the shapes
suite, which runs LayerNorm, softmax, var_mean and GroupNorm over row
lengths and group sizes the main suite does not cover (short rows, long
rows, few groups), to catch a shape the overlay makes slower than stock.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import io
import json
import logging
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

NO_PAGE_FAULT_TUNABLES = (
    "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=4294967296"
)
RESULTS_DIR = Path("bench/results")
# Rounds run before timing: the allocator settles on its heap layout and the
# outputs' pages are faulted in.
WARMUP_ROUNDS = 3
# Each variant's outputs sit at one heap address for the whole run, so the
# distance between an input and an output modulo 4 KiB (which decides 4K
# aliasing stalls between loads and stores) would favour one variant by
# chance: the same code read 1.93 ms in one slot and 2.58 ms in another.
# Repetitions cycle through copies of the inputs staggered across a page.
INPUT_COPIES = 8
STAGGER_BYTES = 576  # 9 cache lines: copies land on 8 different page offsets


@dataclasses.dataclass
class Workload:
    name: str
    make: Callable  # () -> (fn, args, min_bytes)


def nbytes(*tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _workloads():
    import torch
    import torch.nn.functional as F

    def layernorm():
        m, x = torch.nn.LayerNorm(1024), torch.randn(8192, 1024)
        return m, (x,), 2 * nbytes(x)

    def groupnorm():
        m, x = torch.nn.GroupNorm(32, 256), torch.randn(8, 256, 56, 56)
        return m, (x,), 2 * nbytes(x)

    def groupnorm_seed():
        m, x = torch.nn.GroupNorm(2, 16), torch.randn(2, 16, 32, 32)
        return m, (x,), 2 * nbytes(x)

    def bias_gelu_layernorm():
        m, b, x = torch.nn.LayerNorm(768), torch.randn(768), torch.randn(8192, 768)
        return (lambda x: m(F.gelu(x + b))), (x,), 2 * nbytes(x)

    def softmax():
        x = torch.randn(4096, 4096)
        return (lambda x: torch.softmax(x, -1)), (x,), 2 * nbytes(x)

    def softmax_dim0():
        x = torch.randn(4096, 1024)
        return (lambda x: torch.softmax(x, 0)), (x,), 2 * nbytes(x)

    def rmsnorm():
        w, x = torch.randn(2048), torch.randn(8192, 2048)

        def rms(x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

        return rms, (x,), 2 * nbytes(x)

    def layernorm_channels_last():
        m = torch.nn.LayerNorm(256)
        x = torch.randn(8, 256, 56, 56)

        def block(x):  # ConvNeXt style: permute, LayerNorm over channels, back
            return m(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

        return block, (x,), 2 * nbytes(x)

    # The channel workloads are larger than the 32 MiB L3, like the
    # normalizations above: each unfused pass goes to memory.
    def softmax_channels():  # per-pixel class softmax, NCHW
        x = torch.randn(128, 16, 56, 56)
        return (lambda x: torch.softmax(x, 1)), (x,), 2 * nbytes(x)

    def l2norm_channels():  # F.normalize over the channels of NCHW
        x = torch.randn(64, 32, 56, 56)
        return (lambda x: F.normalize(x, dim=1)), (x,), 2 * nbytes(x)

    def channel_norm():  # normalize over channels at every pixel, NCHW
        x = torch.randn(64, 32, 56, 56)

        def norm(x):
            mean = x.mean(1, keepdim=True)
            return (x - mean) * torch.rsqrt(x.var(1, keepdim=True) + 1e-5)

        return norm, (x,), 2 * nbytes(x)

    def qknorm_interleaved_rope():  # RMS norm of q, then RoPE on its pairs
        q, w = torch.randn(1, 32, 4096, 128), torch.randn(128)
        cos, sin = torch.randn(1, 1, 4096, 64), torch.randn(1, 1, 4096, 64)

        def qknorm_rope(q):
            q = q * torch.rsqrt(q.pow(2).mean(-1, keepdim=True) + 1e-6) * w
            pairs = q.reshape(*q.shape[:-1], -1, 2)
            a, b = pairs[..., 0], pairs[..., 1]
            rotated = [a * cos - b * sin, a * sin + b * cos]
            return torch.stack(rotated, dim=-1).flatten(-2)

        return qknorm_rope, (q,), 2 * nbytes(q)

    def attention_softmax():
        q, k = torch.randn(8, 8, 256, 64), torch.randn(8, 8, 256, 64)
        mask = torch.randn(256, 256)

        def attn(q, k):
            return torch.softmax(q @ k.transpose(-1, -2) * 0.125 + mask, -1)

        return attn, (q, k), 2 * 8 * 8 * 256 * 256 * 4

    # Small maps and slabs, where a split into more kernels costs more than
    # it saves: 0023 and 0022 must keep stock's form here (their cost guards).
    def log_softmax_7x7_maps():  # 1000 classes over flattened 7x7 maps
        x = torch.randn(32, 1000, 49)
        return (lambda x: torch.log_softmax(x, 1)), (x,), 2 * nbytes(x)

    def log_softmax_14x14_maps():
        x = torch.randn(32, 1000, 196)
        return (lambda x: torch.log_softmax(x, 1)), (x,), 2 * nbytes(x)

    def sum_small_slabs():  # 100 rows of 400 bytes under each output row
        x = torch.randn(100, 100, 100)
        return (lambda x: x.sum(1)), (x,), nbytes(x)

    def groupnorm_small_maps():  # channels-last, 180 KiB
        m = torch.nn.GroupNorm(3, 90)
        x = torch.randn(2, 90, 16, 16).to(memory_format=torch.channels_last)
        return m, (x,), 2 * nbytes(x)

    return [
        Workload(f.__name__, f)
        for f in (
            layernorm,
            groupnorm,
            groupnorm_seed,
            bias_gelu_layernorm,
            softmax,
            softmax_dim0,
            rmsnorm,
            layernorm_channels_last,
            softmax_channels,
            l2norm_channels,
            channel_norm,
            qknorm_interleaved_rope,
            attention_softmax,
            log_softmax_7x7_maps,
            log_softmax_14x14_maps,
            sum_small_slabs,
            groupnorm_small_maps,
        )
    ]


def _shape_workloads():
    import torch

    def make(fn_factory, shape):
        def build():
            x = torch.randn(*shape)
            return fn_factory(shape), (x,), 2 * nbytes(x)

        return build

    def layernorm(shape):
        return torch.nn.LayerNorm(shape[-1])

    def softmax(shape):
        return lambda x: torch.softmax(x, -1)

    def var_mean(shape):
        return lambda x: torch.var_mean(x, -1)

    workloads = []
    for rows, cols in [(8192, 512), (4096, 768), (2048, 2048), (512, 8192),
                       (4096, 1000), (64, 30000)]:  # fmt: skip
        for kind in (layernorm, softmax, var_mean):
            name = f"{kind.__name__}_{rows}x{cols}"
            workloads.append(Workload(name, make(kind, (rows, cols))))
    for groups, n, c, hw in [(32, 16, 128, 28), (16, 32, 512, 14), (8, 8, 64, 64),
                             (1, 8, 64, 32)]:  # fmt: skip
        name = f"groupnorm{groups}_{n}x{c}x{hw}x{hw}"
        factory = lambda shape, g=groups: torch.nn.GroupNorm(g, shape[1])  # noqa: E731
        workloads.append(Workload(name, make(factory, (n, c, hw, hw))))
    return workloads


SUITES = {"main": ("bench", _workloads), "shapes": ("shapes", _shape_workloads)}


def _fresh(fn):
    """A wrapper with its own code object, hence its own dynamo cache entry.

    Dynamo caches compiled code on the code object; compiling the same
    function twice under different configs would otherwise share one entry.
    """

    def call(*args):
        return fn(*args)

    call.__code__ = call.__code__.replace()
    return call


@contextlib.contextmanager
def _output_code():
    """Collect the generated module's source while compiling.

    Unlike torch._inductor.utils.run_and_get_cpp_code this does not reset
    dynamo: a reset would drop the variant compiled before, and the timing
    loop would silently recompile it under the default (patched) config.
    """
    from torch._inductor import config
    from torch._inductor.codecache import output_code_log

    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    level = output_code_log.level
    output_code_log.addHandler(handler)
    output_code_log.setLevel(logging.DEBUG)
    try:
        with config.patch(debug=True):
            yield buffer
    finally:
        output_code_log.setLevel(level)
        output_code_log.removeHandler(handler)


def _compile(fn, args, overlay: bool, fullgraph: bool = False):
    import torch
    from torch._inductor import config

    from fusion_overlay import flags as overlay_flags
    from tools.loopnest import count_nests

    # patched = the overlay as shipped: its flags at their defaults
    # (every flag on); stock = all flags off.
    flags: dict = {"force_disable_caches": True}
    if not overlay:
        flags.update(overlay_flags.config_patch(False))
    # dynamic=False: the _fresh wrappers share a name and line, and dynamo's
    # automatic dynamic shapes would otherwise compile later workloads with
    # symbolic sizes.
    compiled = torch.compile(_fresh(fn), dynamic=False, fullgraph=fullgraph)
    with config.patch(flags), torch.no_grad(), _output_code() as code:
        start = time.perf_counter()
        compiled(*args)
        compile_s = time.perf_counter() - start
    return compiled, count_nests(code.getvalue()), compile_s


def _compiled_graphs() -> int:
    from torch._dynamo.utils import counters

    return sum(counters["stats"].values()) + sum(counters["frames"].values())


def _copy_bandwidth(reps: int) -> float:
    """GB/s of a large tensor copy (read + write), the roofline reference."""
    import torch

    src = torch.randn(32 * 1024 * 1024 // 4 * 4)  # 128 MiB
    dst = torch.empty_like(src)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        dst.copy_(src)
        times.append(time.perf_counter() - start)
    return 2 * src.numel() * 4 / statistics.median(times) / 1e9


def _cpu_pressure() -> str:
    try:
        return Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except OSError:
        return "unavailable"


def _staggered_copies(args, copies: int = INPUT_COPIES) -> list[tuple]:
    """Copies of the inputs whose addresses differ modulo a page."""
    import torch

    arg_sets, pads = [], []
    for i in range(copies):
        # large enough to be carved from the heap's end, between the copies
        pad_bytes = (1 << 20) + i * STAGGER_BYTES
        pads.append(torch.empty(pad_bytes, dtype=torch.uint8))
        arg_sets.append(tuple(a.clone() for a in args))
    return arg_sets


class GeneratedCodeClock:
    """Seconds spent inside Inductor's generated code during a call.

    A compiled call runs dynamo's guards and AOT autograd's runtime wrapper,
    then the generated module's ``call`` (through ``CompiledFxGraph``).  The
    first two are the same Python for stock and patched; their cost depends
    on how much of their data the previous call evicted from the caches, so
    a memory-bound case that streams its input can pay several times the
    warm floor of a tiny call.  Timing the generated code separately tells
    what the overlay's kernels cost from what the call layers cost.
    """

    def __init__(self):
        self.seconds = 0.0

    @contextlib.contextmanager
    def installed(self):
        from torch._inductor.output_code import CompiledFxGraph

        original = CompiledFxGraph.__call__
        clock = self

        def timed_call(graph, inputs):
            start = time.perf_counter()
            try:
                return original(graph, inputs)
            finally:
                clock.seconds += time.perf_counter() - start

        CompiledFxGraph.__call__ = timed_call  # type: ignore[method-assign]
        try:
            yield self
        finally:
            CompiledFxGraph.__call__ = original  # type: ignore[method-assign]


def _time_interleaved(
    variants: dict,
    arg_sets: list[tuple],
    reps: int,
    warmup: int = WARMUP_ROUNDS,
    generated: dict[str, list[float]] | None = None,
) -> dict[str, list[float]]:
    """Per variant, the time of each repetition.

    Every call takes the next input copy, so no call reads inputs that the
    call before it left in the last-level cache (inputs up to 32 MiB fit
    there: with one copy per repetition, the variant timed second ran 26%
    faster than the same code timed first).  The variants' order rotates
    from one repetition to the next.  ``generated``, when given, receives
    per variant the seconds each repetition spent inside Inductor's
    generated code (0 for eager).
    """
    import torch

    times: dict[str, list[float]] = {name: [] for name in variants}
    clock = GeneratedCodeClock()
    compiled_before = _compiled_graphs()
    with torch.no_grad(), clock.installed():
        for _ in range(warmup):
            for fn in variants.values():
                for args in arg_sets:
                    fn(*args)
        names = list(variants)
        calls = 0
        for rep in range(reps):
            shift = rep % len(names)
            for name in names[shift:] + names[:shift]:
                args = arg_sets[calls % len(arg_sets)]
                calls += 1
                clock.seconds = 0.0
                start = time.perf_counter()
                variants[name](*args)
                times[name].append(time.perf_counter() - start)
                if generated is not None:
                    generated.setdefault(name, []).append(clock.seconds)
    if _compiled_graphs() != compiled_before:
        raise RuntimeError("a variant recompiled while being timed; its config is lost")
    return times


def _summary(samples: list[float]) -> dict[str, float]:
    q = statistics.quantiles(samples, n=4)
    return {
        "min_ms": min(samples) * 1e3,
        "median_ms": statistics.median(samples) * 1e3,
        "p25_ms": q[0] * 1e3,
        "p75_ms": q[-1] * 1e3,
    }


def paired_ratio(times: list[float], reference: list[float]) -> float:
    """Median over repetitions of time / reference time in the same
    repetition: the machine's drift cancels within a repetition."""
    return statistics.median(t / r for t, r in zip(times, reference, strict=True))


def run_workload(
    workload: Workload,
    threads: int,
    reps: int,
    copy_gbs: float,
    fullgraph: bool = False,
    copies: int = INPUT_COPIES,
    warmup: int = WARMUP_ROUNDS,
    check: Callable | None = None,
) -> dict:
    """Compile stock and patched, then time them with eager, interleaved.

    fullgraph: refuse graph breaks (frames resumed after a break are cached on
    the workload's own code objects, which both variants would share).
    check: ``(variants, args) -> dict`` of more columns (an accuracy check),
    called after the timing with the eager, stock and patched callables.
    """
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    fn, args, min_bytes = workload.make()
    torch._dynamo.reset()  # drop the previous workload's compiled variants
    stock, stock_nests, stock_compile = _compile(fn, args, False, fullgraph)
    patched, patched_nests, patched_compile = _compile(fn, args, True, fullgraph)
    generated: dict[str, list[float]] = {}
    times = _time_interleaved(
        {"eager": fn, "stock": stock, "patched": patched},
        _staggered_copies(args, copies),
        reps,
        warmup,
        generated,
    )
    checked = (
        check({"eager": fn, "stock": stock, "patched": patched}, args) if check else {}
    )
    stats = {name: _summary(t) for name, t in times.items()}
    patched_layers = [t - g for t, g in zip(times["patched"], generated["patched"])]
    patched_s = stats["patched"]["min_ms"] / 1e3
    return {
        "workload": workload.name,
        "threads": threads,
        **{f"{name}_{k}": v for name, s in stats.items() for k, v in s.items()},
        "stock_over_eager": paired_ratio(times["stock"], times["eager"]),
        "patched_over_eager": paired_ratio(times["patched"], times["eager"]),
        "patched_over_stock": paired_ratio(times["patched"], times["stock"]),
        # the generated code alone (no guards, no AOT wrapper) against eager
        "patched_generated_median_ms": statistics.median(generated["patched"]) * 1e3,
        "patched_generated_over_eager": paired_ratio(
            generated["patched"], times["eager"]
        ),
        "patched_call_layers_median_ms": statistics.median(patched_layers) * 1e3,
        "stock_nests": stock_nests,
        "patched_nests": patched_nests,
        "min_bytes": min_bytes,
        "patched_gbs": min_bytes / patched_s / 1e9,
        "roofline": min_bytes / patched_s / 1e9 / copy_gbs,
        "stock_compile_s": stock_compile,
        "patched_compile_s": patched_compile,
        "cpu_pressure": _cpu_pressure(),
        **checked,
    }


def markdown_table(rows: list[dict], header: str) -> str:
    lines = [
        header,
        "",
        "| workload | thr | eager ms (best / median) | stock ms | patched ms "
        "| stock/eager | patched/eager | patched/stock (paired medians) "
        "| nests stock→patched "
        "| GB/s | roofline | default malloc (best): eager / stock / patched ms "
        "| compile s stock / patched |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['workload']} | {r['threads']} | "
            f"{r['eager_min_ms']:.2f} / {r['eager_median_ms']:.2f} | "
            f"{r['stock_min_ms']:.2f} / {r['stock_median_ms']:.2f} | "
            f"{r['patched_min_ms']:.2f} / {r['patched_median_ms']:.2f} | "
            f"{r['stock_over_eager']:.2f} | {r['patched_over_eager']:.2f} | "
            f"{r['patched_over_stock']:.2f} | "
            f"{r['stock_nests']}→{r['patched_nests']} | "
            f"{r['patched_gbs']:.1f} | {r['roofline']:.2f} | "
            f"{r.get('eager_default_malloc_ms', float('nan')):.2f} / "
            f"{r.get('stock_default_malloc_ms', float('nan')):.2f} / "
            f"{r.get('patched_default_malloc_ms', float('nan')):.2f} | "
            f"{r['stock_compile_s']:.1f} / {r['patched_compile_s']:.1f} |"
        )
    return "\n".join(lines)


def _chart(rows: list[dict], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    labels = [f"{r['workload']} t{r['threads']}" for r in rows]
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(rows) + 1))
    ys = range(len(rows))
    ax.barh(
        [y + 0.2 for y in ys],
        [1 / r["stock_over_eager"] for r in rows],
        0.4,
        label="stock",
    )
    ax.barh(
        [y - 0.2 for y in ys],
        [1 / r["patched_over_eager"] for r in rows],
        0.4,
        label="patched",
    )
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(list(ys), labels)
    ax.set_xlabel("speed vs eager (higher is better)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    return True


def _run_suite(opts) -> dict:
    """Measure every workload in this process (the allocator is already set)."""
    import torch

    only = {name for name in opts.only.split(",") if name}
    threads = sorted({int(t) for t in opts.threads.split(",")})
    copy_gbs = _copy_bandwidth(opts.reps)
    # The first compile of a process pays for imports and the C++ toolchain
    # probe; pay it here so that compile times compare stock and patched.
    _compile(lambda x: x.sum(0) + 1, (torch.randn(8, 8),), overlay=False)
    rows = []
    for workload in SUITES[opts.suite][1]():
        if only and workload.name not in only:
            continue
        for t in threads:
            row = run_workload(workload, t, opts.reps, copy_gbs)
            rows.append(row)
            print(
                f"  [{opts.malloc}] {row['workload']:24s} t={t} "
                f"eager {row['eager_min_ms']:.2f} stock {row['stock_min_ms']:.2f} "
                f"patched {row['patched_min_ms']:.2f} ms (best) "
                f"nests {row['stock_nests']}->{row['patched_nests']}",
                flush=True,
            )
    from torch._inductor import cpu_vec_isa

    isa = str(cpu_vec_isa.pick_vec_isa() or "no vectors")
    return {"torch": torch.__version__, "copy_gbs": copy_gbs, "rows": rows, "isa": isa}


def _run_child(opts, malloc: str, out: Path) -> dict:
    """Run the suite in a fresh process with the chosen allocator settings."""
    import subprocess

    env = dict(os.environ)
    env.pop("GLIBC_TUNABLES", None)
    if malloc == "tuned":
        env["GLIBC_TUNABLES"] = NO_PAGE_FAULT_TUNABLES
    args = [
        sys.executable,
        "-m",
        "tools.bench",
        "--child",
        str(out),
        "--malloc",
        malloc,
        "--threads",
        opts.threads,
        "--reps",
        str(opts.reps),
        "--only",
        opts.only,
        "--suite",
        opts.suite,
    ]
    subprocess.run(args, env=env, check=True)
    return json.loads(out.read_text())


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def run_record(argv: list[str], isa: str, module: str = "tools.bench") -> dict:
    """Command, machine and date of a benchmark run (tools/results_pages.py)."""
    return {
        "command": " ".join([f"python -m {module}", *argv]).strip(),
        "machine": f"{cpu_model()}, {platform.machine()}, {isa}, "
        f"{os.cpu_count()} cores",
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "torch": _torch_version(),
    }


def _torch_version() -> str:
    """This interpreter's torch version, read without importing torch."""
    from fusion_overlay.target import default_target_root, read_torch_version

    return read_torch_version(default_target_root())[0] or "unknown"


def _merge_default_malloc(rows: list[dict], default_rows: list[dict]) -> None:
    by_key = {(r["workload"], r["threads"]): r for r in default_rows}
    for row in rows:
        other = by_key.get((row["workload"], row["threads"]))
        for name in ("eager", "stock", "patched"):
            row[f"{name}_default_malloc_ms"] = (
                other[f"{name}_min_ms"] if other else float("nan")
            )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default=f"1,{os.cpu_count()}")
    parser.add_argument("--reps", type=int, default=21)
    parser.add_argument("--only", default="")
    parser.add_argument("--suite", choices=sorted(SUITES), default="main")
    parser.add_argument(
        "--no-default-malloc",
        action="store_true",
        help="skip the second run with glibc's default allocator",
    )
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--malloc", default="tuned", help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)

    if opts.child:
        opts.child.write_text(json.dumps(_run_suite(opts)))
        return 0

    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        print(
            f"allocator: GLIBC_TUNABLES={NO_PAGE_FAULT_TUNABLES} "
            "(no page faults on large outputs)"
        )
        tuned = _run_child(opts, "tuned", Path(tmp) / "tuned.json")
        rows = tuned["rows"]
        if not opts.no_default_malloc:
            print(
                "allocator: glibc default "
                "(outputs of 32 MiB or more page-fault on every call)"
            )
            default = _run_child(opts, "default", Path(tmp) / "default.json")
            _merge_default_malloc(rows, default["rows"])
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    header = (
        f"torch {tuned['torch']}, {platform.machine()}, {os.cpu_count()} cores, "
        f"{stamp}; GLIBC_TUNABLES={NO_PAGE_FAULT_TUNABLES}; "
        f"copy bandwidth {tuned['copy_gbs']:.1f} GB/s; "
        f"best and median of {opts.reps} interleaved reps over "
        f"{INPUT_COPIES} staggered input copies (ratios: median of "
        "per-repetition ratios); "
        f"CPU pressure at the end: {_cpu_pressure()}"
    )
    table = markdown_table(rows, header)
    print(table)
    opts.out.mkdir(parents=True, exist_ok=True)
    stem = SUITES[opts.suite][0]
    (opts.out / f"{stem}.md").write_text(table + "\n")
    run = run_record(sys.argv[1:] if argv is None else argv, tuned.get("isa", "?"))
    (opts.out / f"{stem}.json").write_text(
        json.dumps(
            {
                "header": header,
                "copy_gbs": tuned["copy_gbs"],
                "rows": rows,
                "run": run,
            },
            indent=2,
        )
    )
    if _chart(rows, opts.out / f"{stem}.png"):
        print(f"chart: {opts.out / f'{stem}.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
