"""What the overlay changes, on two normalization layers.

    python -m tools.demo        (make demo)

For a LayerNorm over (512, 1024) and the seed GroupNorm, compiles each with
the overlay's flags off (= stock 2.13.0 codegen) and on, prints the outer loop
nests of every generated C++ kernel, then times eager, flags off and flags on,
interleaved, and prints the medians.
"""

from __future__ import annotations

import os

os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # 2 shared cores

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from fusion_overlay.flags import config_patch
from tools.loopnest import analyze

FLAGS_OFF = config_patch(False)
FLAGS_ON = config_patch(True)
SEED_CONFIG = {"realize_opcount_threshold": 1, "inplace_buffers": False}


@dataclass
class Workload:
    name: str
    module: torch.nn.Module
    inputs: list[torch.Tensor]
    config: dict = field(default_factory=dict)


def workloads() -> list[Workload]:
    torch.manual_seed(0)
    return [
        Workload(
            "LayerNorm(1024) on (512, 1024)",
            torch.nn.LayerNorm(1024),
            [torch.randn(512, 1024)],
        ),
        Workload(
            "seed GroupNorm(2, 16) on (2, 16, 32, 32)",
            torch.nn.GroupNorm(2, 16),
            [torch.randn(2, 16, 32, 32)],
            SEED_CONFIG,
        ),
    ]


def compile_with(workload: Workload, flags: dict) -> tuple[Callable, str]:
    """Compile outside Dynamo, so the callable keeps its code when the next
    compile runs under other flags (a Dynamo reset would drop it)."""
    from torch._inductor.utils import run_and_get_cpp_code

    torch._dynamo.reset()
    graph = torch.fx.symbolic_trace(workload.module)
    options = {**workload.config, **flags}
    compiled, code = run_and_get_cpp_code(
        torch._inductor.compile, graph, [*workload.inputs], options
    )
    return compiled, code


def ms_per_call(fn: Callable, inputs: list, iters: int) -> float:
    start = time.perf_counter()
    for _ in range(iters):
        fn(*inputs)
    return (time.perf_counter() - start) / iters * 1e3


def interleaved_medians(
    fns: dict[str, Callable], inputs: list, rounds: int = 21, sample_ms: float = 10.0
) -> dict:
    """Round-robin the contenders so drift on a shared machine hits all alike;
    each sample runs ~sample_ms so one preemption does not decide it."""
    iters = {
        name: max(1, int(sample_ms / ms_per_call(fn, inputs, 3)))
        for name, fn in fns.items()
    }
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            samples[name].append(ms_per_call(fn, inputs, iters[name]))
    return {name: statistics.median(values) for name, values in samples.items()}


def describe_nests(code: str) -> str:
    nests = [kernel.nests for kernel in analyze(code)]
    return f"{sum(nests)} outer loop nest(s) in {len(nests)} kernel(s) {nests}"


def show(workload: Workload) -> None:
    print(f"\n== {workload.name}")
    with torch.no_grad():
        off, off_code = compile_with(workload, FLAGS_OFF)
        on, on_code = compile_with(workload, FLAGS_ON)
        print(f"  flags off (stock codegen): {describe_nests(off_code)}")
        print(f"  flags on  (overlay):       {describe_nests(on_code)}")
        eager = workload.module
        for compiled in (off, on):
            torch.testing.assert_close(
                compiled(*workload.inputs), eager(*workload.inputs)
            )
        times = interleaved_medians(
            {"eager": eager, "flags off": off, "flags on": on}, workload.inputs
        )
    for name, ms in times.items():
        print(f"  {name:<10} {ms:8.3f} ms   ({times['eager'] / ms:4.2f}x eager)")
    print(f"  flags on vs off: {times['flags off'] / times['flags on']:.2f}x")


def main() -> None:
    load = os.getloadavg()[0]
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"load average {load:.1f}"
    )
    if load > 0.5 * (os.cpu_count() or 1):
        print(
            "note: the machine is busy; OpenMP kernels time badly when their "
            "threads are preempted"
        )
    for workload in workloads():
        show(workload)


if __name__ == "__main__":
    main()
