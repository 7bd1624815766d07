"""Fusion report: loop nests with the overlay off and on, and why pairs fused or not.

    python -m tools.fusion_report script.py [--dynamic] [--seed-config]

``script.py`` defines ``fn`` (a callable or nn.Module) and ``inputs`` (a tuple
of tensors, or a function returning one).  The report compiles ``fn`` twice,
with the overlay's flags off (stock 2.13.0 behaviour) and on, and prints for
each: the loop nests of every generated C++ kernel, the overlay's counters, and
the scheduler's fusion decisions (``cannot fuse A with B: reason``, fusions
made, and every re-tile, split, reorder and rejection of the overlay).
"""

from __future__ import annotations

import argparse
import logging
import runpy
import sys

import torch

from fusion_overlay.flags import config_patch

FUSION_LOGGERS = (
    "torch._inductor.scheduler",
    "torch._inductor.codegen.cpp_fusion.outer_loop.retile",
    "torch._inductor.codegen.cpp_fusion.outer_loop.split",
    "torch._inductor.codegen.cpp_fusion.emitters.accumulators",
    "torch._inductor.codegen.cpp_fusion.scheduling.block_fusion",
    "torch._inductor.codegen.cpp_fusion.scheduling.loop_ordering",
)
DECISION_MARKERS = (
    "cannot fuse",
    "fusing ",
    "outer-loop retile",
    "outer-loop split",
    "Reorder loops",
    "reorder ",
    "reindexed",
    "keep fused loop order",
)


class DecisionLog(logging.Handler):
    """Collects the fusion decisions the scheduler and the overlay log."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if any(marker in message for marker in DECISION_MARKERS):
            line = message.strip()
            if line not in self.lines:
                self.lines.append(line)


class UsageError(Exception):
    """The script does not define what the report needs."""


def load_program(path: str):
    namespace = runpy.run_path(path)
    missing = [name for name in ("fn", "inputs") if name not in namespace]
    if missing:
        raise UsageError(
            f"{path} defines no {' and no '.join(missing)}: the script must define "
            "fn (a callable or nn.Module) and inputs (a tuple of tensors, or a "
            "function returning one); see examples/seed_groupnorm.py"
        )
    fn, inputs = namespace["fn"], namespace["inputs"]
    if not callable(fn):
        raise UsageError(f"{path}: fn must be callable, not {type(fn).__name__}")
    return fn, tuple(inputs() if callable(inputs) else inputs)


def compile_once(fn, inputs, overlay: bool, dynamic: bool, extra: dict):
    """Compile fresh under the given flags; return (C++ code, decisions, counters)."""
    from torch._inductor import config, metrics
    from torch._inductor.utils import run_and_get_cpp_code

    torch._logging.set_logs(fusion=True)
    handler = DecisionLog()
    loggers = [logging.getLogger(name) for name in FUSION_LOGGERS]
    for logger in loggers:
        logger.addHandler(handler)
    torch._dynamo.reset()
    metrics.reset()
    flags = {
        **config_patch(overlay),
        "force_disable_caches": True,
        **extra,
    }
    try:
        with config.patch(flags), torch.no_grad():
            _, code = run_and_get_cpp_code(torch.compile(fn, dynamic=dynamic), *inputs)
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
        torch._logging.set_logs()
    counters = {
        "outer-loop fusions merged": len(metrics.cpp_outer_loop_fused_inner_counts),
        "re-tiled merges": metrics.cpp_outer_loop_retiled,
        "loop reorders": metrics.num_loop_reordering,
    }
    return code, handler.lines, counters


def render(title: str, code: str, decisions: list[str], counters: dict) -> str:
    from tools.loopnest import analyze

    kernels = analyze(code)
    lines = [
        f"== {title}: {len(kernels)} kernel(s), "
        f"{sum(k.nests for k in kernels)} loop nest(s)"
    ]
    lines += [f"   kernel {i}: {k.nests} nest(s)" for i, k in enumerate(kernels)]
    lines += [f"   {name}: {value}" for name, value in counters.items()]
    lines.append("   decisions:")
    lines += [f"     {d}" for d in decisions] or ["     (none logged)"]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("script")
    parser.add_argument("--dynamic", action="store_true")
    parser.add_argument(
        "--seed-config",
        action="store_true",
        help="realize_opcount_threshold=1, inplace_buffers=False (the forum report's)",
    )
    opts = parser.parse_args(argv)
    extra = (
        {"realize_opcount_threshold": 1, "inplace_buffers": False}
        if opts.seed_config
        else {}
    )
    try:
        fn, inputs = load_program(opts.script)
    except UsageError as error:
        parser.error(str(error))
    for title, overlay in (("overlay off (stock)", False), ("overlay on", True)):
        print(render(title, *compile_once(fn, inputs, overlay, opts.dynamic, extra)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
