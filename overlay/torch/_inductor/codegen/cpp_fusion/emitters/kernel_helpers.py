"""C++ helpers the overlay's kernels call, defined before the kernel function.

Generated kernels are compiled for every ISA the wheel supports (x86 AVX512,
AVX2 and no vectors, aarch64 NEON and SVE, POWER VSX, s390x ZVECTOR) and by
GCC, Clang or MSVC.  An intrinsic or compiler builtin therefore never appears
in a kernel's loops: the loops call one of these helpers, which keeps the
intrinsic behind its ISA or compiler guard and does the plain thing
elsewhere (a plain store, no fence, no prefetch).

A helper is a ``Helper``: its name, its C++ definition and its place among
the definitions.  The streaming stores' helpers are defined here; a feature
may keep its own in its module (as the prefetch of
emitters/prefetch.py).  A kernel records the helpers it calls with
``use(args, helper)`` on its ``KernelArgs``, the object the kernels of a
group share; ``KernelGroup.codegen_group`` writes their definitions after
the ``cpp_prefix.h`` include (``write_definitions``), in the helpers' fixed
order, so the text does not depend on which feature asked first.  Each
definition has an include guard, since the C++ wrapper puts every kernel of
a graph in one translation unit.
"""

from __future__ import annotations

from typing import NamedTuple

from torch._inductor.utils import IndentedBuffer


class Helper(NamedTuple):
    name: str  # what the kernel's loops call
    definition: str  # C++, include-guarded; helpers may share one
    order: int  # where the definition goes among a kernel's helpers


_STORE, _FENCE = "stream_store_f32", "stream_fence"

# Streaming stores exist for full float vectors on AVX512 and AVX2; the
# fence orders the calling thread's, so it is needed exactly where they are.
_STREAMING = f"""\
#ifndef INDUCTOR_OVERLAY_STREAM_STORE_F32
#define INDUCTOR_OVERLAY_STREAM_STORE_F32
// A non-temporal store of a full float vector at an address aligned to the
// vector width where the ISA has one; a plain store otherwise.
template <typename vec_t>
inline void {_STORE}(float* ptr, const vec_t& vec) {{
#if defined(CPU_CAPABILITY_AVX512)
    if constexpr (std::is_same_v<vec_t, at::vec::Vectorized<float>>) {{
        if ((reinterpret_cast<std::uintptr_t>(ptr) & 63) == 0) {{
            _mm512_stream_ps(ptr, vec);
            return;
        }}
    }}
#elif defined(CPU_CAPABILITY_AVX2)
    if constexpr (std::is_same_v<vec_t, at::vec::Vectorized<float>>) {{
        if ((reinterpret_cast<std::uintptr_t>(ptr) & 31) == 0) {{
            _mm256_stream_ps(ptr, vec);
            return;
        }}
    }}
#endif
    vec.store(ptr);
}}
// Orders the calling thread's streaming stores before its later stores.
inline void {_FENCE}() {{
#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
    _mm_sfence();
#endif
}}
#endif"""

STREAM_STORE = Helper(_STORE, _STREAMING, 0)
STREAM_FENCE = Helper(_FENCE, _STREAMING, 1)


def _used_by(args) -> dict[str, Helper]:
    """The helpers the kernels of ``args`` call, kept on ``args`` itself."""
    used = getattr(args, "cpp_helpers", None)
    if used is None:
        used = args.cpp_helpers = {}
    return used


def use(args, helper: Helper) -> str:
    """Record that a kernel of ``args`` calls ``helper``; its name."""
    used = _used_by(args)
    if used.get(helper.name, helper) != helper:
        raise ValueError(f"two C++ helpers named {helper.name!r}")
    used[helper.name] = helper
    return helper.name


def write_definitions(code: IndentedBuffer, args) -> None:
    """The definitions of the helpers the kernels of ``args`` call, if any."""
    written: set[str] = set()
    for helper in sorted(_used_by(args).values(), key=lambda h: h.order):
        if helper.definition not in written:
            code.splice(helper.definition)
            written.add(helper.definition)
