"""TorchBench models read from a user's pytorch/benchmark checkout.

``TORCHBENCH_SRC`` names the checkout; its files
are read, never copied into this repository.  Only each model's own package
is imported: its ``BenchmarkModel`` base class and task enum come from
stand-ins here, since TorchBench's harness pulls in dependencies a model's
forward never uses.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
import types
from pathlib import Path
from typing import Any

PYHPC = (
    "pyhpc_equation_of_state",
    "pyhpc_isoneutral_mixing",
    "pyhpc_turbulent_kinetic_energy",
)


class TorchBenchError(Exception):
    pass


def checkout(src: str | os.PathLike | None = None) -> Path:
    """The checkout's root, refused with a clear message when it lacks models."""
    src = src or os.environ.get("TORCHBENCH_SRC")
    if not src:
        raise TorchBenchError(
            "set TORCHBENCH_SRC to a pytorch/benchmark checkout "
            "(git clone https://github.com/pytorch/benchmark)"
        )
    root = Path(src).expanduser().resolve()
    if not (root / "torchbenchmark" / "models").is_dir():
        raise TorchBenchError(
            f"{root} is not a pytorch/benchmark checkout: no torchbenchmark/models"
        )
    return root


class _BenchmarkModel:
    """Stands in for torchbenchmark.util.model.BenchmarkModel: the batch size
    and device are all a model's __init__ reads from it."""

    DEFAULT_EVAL_BSIZE: int | None = None

    def __init__(self, test, device, batch_size=None, extra_args=()):
        self.test, self.device = test, device
        self.batch_size = batch_size or self.DEFAULT_EVAL_BSIZE


def _install_stand_ins(root: Path) -> None:
    """A ``torchbenchmark`` package whose models import from the checkout but
    whose harness modules are the stand-ins above."""
    if (
        "torchbenchmark" in sys.modules
        and getattr(sys.modules["torchbenchmark"], "_fusion_overlay_root", None) == root
    ):
        return
    for name in [
        n
        for n in sys.modules
        if n == "torchbenchmark" or n.startswith("torchbenchmark.")
    ]:
        del sys.modules[name]
    package = types.ModuleType("torchbenchmark")
    package.__path__ = [str(root / "torchbenchmark")]
    setattr(package, "_fusion_overlay_root", root)  # noqa: B010
    models = types.ModuleType("torchbenchmark.models")
    models.__path__ = [str(root / "torchbenchmark" / "models")]
    util = types.ModuleType("torchbenchmark.util")
    util.__path__ = []
    model = types.ModuleType("torchbenchmark.util.model")
    setattr(model, "BenchmarkModel", _BenchmarkModel)  # noqa: B010
    tasks = types.ModuleType("torchbenchmark.tasks")
    setattr(tasks, "OTHER", types.SimpleNamespace(OTHER_TASKS="other"))  # noqa: B010
    for m in (package, models, util, model, tasks):
        sys.modules[m.__name__] = m


@dataclasses.dataclass
class Loaded:
    name: str
    module: Any  # torch.nn.Module in eval mode
    inputs: tuple  # TorchBench's own inputs (float64 where it makes them so)


def load(name: str, root: Path, device: str = "cpu") -> Loaded:
    _install_stand_ins(root)
    package = importlib.import_module(f"torchbenchmark.models.{name}")
    bench_model = package.Model(test="eval", device=device)
    module, inputs = bench_model.get_module()
    return Loaded(name, module.eval(), tuple(inputs))


def cast_floats(inputs: tuple, dtype) -> tuple:
    """The floating inputs in ``dtype``; integer and boolean ones unchanged."""
    return tuple(
        x.to(dtype) if getattr(x, "is_floating_point", lambda: False)() else x
        for x in inputs
    )


def pyhpc_workloads(src: str | os.PathLike | None = None, dtype_name: str = "float32"):
    """TorchBench's pyhpc models at their default eval size, as bench workloads.

    Timed in float32, what a CPU user runs; the inputs TorchBench makes in
    float64 are cast (``pyhpc_check`` compares against float64).
    """
    from tools import bench

    root = checkout(src)

    def workload(name: str):
        def make():
            import torch

            loaded = load(name, root)
            args = cast_floats(loaded.inputs, getattr(torch, dtype_name))
            with torch.no_grad():
                outputs = loaded.module(*args)
            return loaded.module, args, bench.nbytes(*args, *_tensors(outputs))

        return bench.Workload(name.removeprefix("pyhpc_"), make)

    return [workload(name) for name in PYHPC]


# A variant's float32 error against the float64 reference may exceed eager
# float32's by this factor before the check fails: the models are
# ill-conditioned in float32, and a fused kernel that evaluates the same
# expressions in another order moves the error either way.
ERROR_FACTOR = 2.0


def relative_error(outputs, reference, where=None) -> float:
    """Largest absolute error over every output, relative to the largest
    magnitude of the reference output it belongs to.  Compared where the
    reference is finite in the output's dtype (a float64 value beyond
    float32's range overflows in every float32 variant alike) and, given
    ``where`` (per output, a mask: where eager float32 is finite), only
    there; a non-finite output anywhere else is an infinite error."""
    import torch

    outs, refs = _tensors(outputs), _tensors(reference)
    masks = list(where) if where is not None else [None] * len(outs)
    worst = 0.0
    for out, ref, mask in zip(outs, refs, masks, strict=True):
        fits = torch.isfinite(ref.to(out.dtype))
        if mask is not None:
            fits &= mask
        if not bool(torch.isfinite(out)[fits].all()):
            return float("inf")
        ref, got = ref.double()[fits], out.double()[fits]
        scale = ref.abs().max().item() if ref.numel() else 0.0
        if scale:
            worst = max(worst, (got - ref).abs().max().item() / scale)
    return worst


def pyhpc_check(name: str, src: str | os.PathLike | None = None):
    """A ``bench.run_workload`` check: each variant's float32 outputs against
    the float64 eager reference from TorchBench's own inputs."""

    def check(variants: dict, args: tuple) -> dict:
        import torch

        loaded = load(f"pyhpc_{name}", checkout(src))
        with torch.no_grad():
            reference = loaded.module(*cast_floats(loaded.inputs, torch.float64))
            outputs = {v: fn(*args) for v, fn in variants.items()}
        # where float32 itself overflows (a 0 * inf in eager float32 too),
        # no variant has a value to compare
        finite = [torch.isfinite(t) for t in _tensors(outputs["eager"])]
        errors = {v: relative_error(o, reference, finite) for v, o in outputs.items()}
        allowed = ERROR_FACTOR * max(errors["eager"], errors["stock"])
        return {
            **{f"{v}_f64_error": e for v, e in errors.items()},
            "eager_f32_nonfinite": sum(int((~m).sum()) for m in finite),
            "f64_check": "ok" if errors["patched"] <= allowed else "FAIL",
        }

    return check


def _tensors(value) -> list:
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    return [value] if hasattr(value, "untyped_storage") else []
