"""pytest plugin for upstream test files newer than torch 2.13.0.

``tools.upstream_test`` loads it (``-p upstream_compat``) into every run, on
stock and patched torch alike.  A newer test module may import a name that
2.13.0 does not have yet; such a module fails at collection, so none of its
tests run, although most test behaviour 2.13.0 has.  Each name below becomes
a placeholder that skips the test that uses it, so the rest run and report.

It imports nothing from this repo: it is copied next to the run, alone.
"""

from __future__ import annotations

import importlib
import unittest

# module -> names that upstream test files import and torch 2.13.0 lacks
NEWER_THAN_PIN = {
    "torch._inductor.codegen.simd": ("MemoryCoalescing",),
}


def _placeholder(module: str, name: str) -> type:
    reason = f"{module}.{name} is newer than the installed torch"

    class Placeholder:
        def __init__(self, *args, **kwargs):
            raise unittest.SkipTest(reason)

    Placeholder.__name__ = Placeholder.__qualname__ = name
    return Placeholder


def pytest_configure(config) -> None:
    for module_name, names in NEWER_THAN_PIN.items():
        module = importlib.import_module(module_name)
        for name in names:
            if not hasattr(module, name):
                setattr(module, name, _placeholder(module_name, name))
