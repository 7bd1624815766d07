"""Skip the flags-on g++ call for a kernel whose source is the flags-off one.

Many programs get the same kernels with the overlay's flags off and on, and
were still compiled twice: flags on builds with 0017's ``-fweb``, so the two
builds never share a module in Inductor's cache.  The check compares what
the overlay's codegen computes against stock's; a kernel whose C++ source is
stock's computes what stock's computes, whatever a GCC option does to its
register allocation.  So the flags-on compile takes the module the flags-off
compile of the same check just built for that exact source (and argument
types), and g++ runs only for kernels the overlay changed.

``record()`` around the flags-off compile, ``reuse()`` around the flags-on
compile of the same program or batch; ``reused()`` tells how many kernels
the last ``reuse()`` took.  Inductor loads every such kernel through
``CppPythonBindingsCodeCache.load_pybinding_async`` (``load_pybinding``
calls it too), which ``install()`` wraps once.
"""

from __future__ import annotations

import contextlib
from typing import Any

_built: dict[tuple, Any] = {}  # the last flags-off compile's kernels
_state: dict[str, Any] = {"mode": "", "reused": 0}
_installed: list[bool] = []


def install() -> None:
    """Wrap Inductor's loader of C++ kernels with Python bindings, once."""
    if _installed:
        return
    from torch._inductor.codecache import CppPythonBindingsCodeCache

    original = CppPythonBindingsCodeCache.load_pybinding_async.__func__  # type: ignore[attr-defined]

    def load_pybinding_async(cls, *args, **kwargs):
        key = _key(args, {k: v for k, v in kwargs.items() if k != "submit_fn"})
        if _state["mode"] == "reuse" and key in _built:
            _state["reused"] += 1
            built = _built[key]
            return lambda: built
        get_result = original(cls, *args, **kwargs)
        if _state["mode"] != "record":
            return get_result

        def recorded():
            _built[key] = get_result()
            return _built[key]

        return recorded

    CppPythonBindingsCodeCache.load_pybinding_async = classmethod(  # type: ignore[method-assign, assignment]
        load_pybinding_async
    )
    _installed.append(True)


def _key(args: tuple, kwargs: dict) -> tuple:
    """What the source of a binding is: its argument types, code and options."""
    argtypes, *rest = args
    options = tuple(sorted((k, repr(v)) for k, v in kwargs.items()))
    return (tuple(argtypes), *map(repr, rest), options)


@contextlib.contextmanager
def record():
    """Keep the kernels this (flags-off) compile builds, and only those."""
    _built.clear()
    with _mode("record"):
        yield


@contextlib.contextmanager
def reuse():
    """Take the recorded build of every kernel with the same source."""
    _state["reused"] = 0
    try:
        with _mode("reuse"):
            yield
    finally:
        _built.clear()


def reused() -> int:
    return _state["reused"]


@contextlib.contextmanager
def _mode(mode: str):
    _state["mode"] = mode
    try:
        yield
    finally:
        _state["mode"] = ""
