"""pytest plugin for upstream test files of other commits than torch 2.13.0.

``tools.upstream_test`` loads it (``-p upstream_compat``) into every run, on
stock and patched torch alike.  A newer test module may import a name that
2.13.0 does not have yet; such a module fails at collection, so none of its
tests run, although most test behaviour 2.13.0 has; an older one may import
a name that 2.13.0 removed or moved.  Each missing name below becomes a
placeholder that skips the test that uses it, each moved one an alias of
its new home, so the rest run and report.

It also keeps one shard of the collected tests when ``UPSTREAM_TEST_SHARD``
is ``I/N`` (``tools.upstream_test run --shard``).

It imports nothing from this repo: it is copied next to the run, alone.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import os
import sys
import unittest

# module -> names that upstream test files import and torch 2.13.0 lacks:
# newer ones, and older ones that 2.13.0 removed
NOT_IN_PIN = {
    "torch._inductor.codegen.simd": ("MemoryCoalescing",),
    "torch._inductor.compile_fx": ("complex_memory_overlap",),
    "torch.testing._internal.common_utils": ("disable_functorch",),
}
# module -> lists that older test files append to and 2.13.0 no longer has
# (test_torchinductor_opinfo registers a function with dynamo's
# tensor_dunder_fns): an empty list, the append then changes nothing
LISTS_NOT_IN_PIN = {"torch._dynamo.variables.torch": ("tensor_dunder_fns",)}
# (module, name) that older test files import -> where 2.13.0 has it
MOVED_IN_PIN = {
    ("torch.testing._internal.common_utils", "dtype_abbrs"): (
        "torch.utils._dtype_abbrs",
        "dtype_abbrs",
    ),
    ("torch._inductor.utils", "has_triton"): ("torch.utils._triton", "has_triton"),
    # now HAS_CUDA_AND_TRITON (the older OpInfo file imports the old name)
    ("torch.testing._internal.inductor_utils", "HAS_CUDA"): (
        "torch.testing._internal.inductor_utils",
        "HAS_CUDA_AND_TRITON",
    ),
}
# test module -> helpers that other test files of the newer commit import
# from it and an older copy of it lacks
TEST_MODULE_ADDITIONS = {"test_torchinductor": ("skip_if_cpp_wrapper",)}


def _placeholder(module: str, name: str) -> type:
    reason = f"{module}.{name} is newer than the installed torch"

    class Placeholder:
        def __init__(self, *args, **kwargs):
            raise unittest.SkipTest(reason)

    Placeholder.__name__ = Placeholder.__qualname__ = name
    return Placeholder


def pytest_configure(config) -> None:
    for module_name, names in NOT_IN_PIN.items():
        module = importlib.import_module(module_name)
        for name in names:
            if not hasattr(module, name):
                setattr(module, name, _placeholder(module_name, name))
    for module_name, names in LISTS_NOT_IN_PIN.items():
        module = importlib.import_module(module_name)
        for name in names:
            if not hasattr(module, name):
                setattr(module, name, [])
    for (module_name, name), (home, home_name) in MOVED_IN_PIN.items():
        module = importlib.import_module(module_name)
        if not hasattr(module, name):
            setattr(module, name, getattr(importlib.import_module(home), home_name))
    for (module_name, name), adapter in ADAPTED.items():
        module = importlib.import_module(module_name)
        if not hasattr(module, name):
            setattr(module, name, adapter)


def _skip_ops_by_name(test_case_name: str, base_test_name: str, to_skip):
    """The older ``skipOps(test_case_name, base_test_name, to_skip)`` of
    common_methods_invocations, which the older OpInfo file imports: the
    installed torch's ``common_device_type.skipOps(to_skip)`` takes the same
    skips and reads the test's names from the function it decorates."""
    from torch.testing._internal.common_device_type import skipOps

    return skipOps(to_skip)


# (module, name) -> an adapter of a name older test files import from there
ADAPTED = {
    ("torch.testing._internal.common_methods_invocations", "skipOps"): (
        _skip_ops_by_name
    ),
}


def skip_if_cpp_wrapper(reason: str):
    """Skip a test under ``config.cpp_wrapper`` (newer test_torchinductor's
    decorator of the same name)."""

    def decorator(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            from torch._inductor import config

            if config.cpp_wrapper:
                raise unittest.SkipTest(f"cpp_wrapper: {reason}")
            return fn(*args, **kwargs)

        return wrapper

    return decorator


def pytest_pycollect_makemodule(module_path, parent) -> None:
    """Before a test file is imported, import the test modules beside it that
    it may import, and give them the helpers they lack."""
    for name, helpers in TEST_MODULE_ADDITIONS.items():
        if name in sys.modules or not (module_path.parent / f"{name}.py").is_file():
            continue
        if str(module_path.parent) not in sys.path:
            sys.path.insert(0, str(module_path.parent))
        try:
            module = importlib.import_module(name)
        except unittest.SkipTest:
            continue
        for helper in helpers:
            if not hasattr(module, helper):
                setattr(module, helper, globals()[helper])


def in_shard(test_id: str, index: int, count: int) -> bool:
    """Whether a test belongs to shard ``index`` of ``count`` (1-based): by a
    hash of its id, the same on every machine and every xdist worker."""
    digest = hashlib.sha1(test_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") % count == index - 1


def pytest_collection_modifyitems(config, items) -> None:
    shard = os.environ.get("UPSTREAM_TEST_SHARD", "1/1")
    index, count = (int(part) for part in shard.split("/"))
    if count == 1:
        return
    kept = [item for item in items if in_shard(item.nodeid, index, count)]
    config.hook.pytest_deselected(items=[i for i in items if i not in kept])
    items[:] = kept
