"""C++ helpers the overlay's kernels call, defined before the kernel function.

Generated kernels are compiled for every ISA the wheel supports (x86 AVX512,
AVX2 and no vectors, aarch64 NEON and SVE, POWER VSX, s390x ZVECTOR) and by
GCC, Clang or MSVC.  An intrinsic or compiler builtin therefore never appears
in a kernel's loops: the loops call one of these helpers, which keeps the
intrinsic behind its ISA or compiler guard and does the plain thing
elsewhere (a plain store, no fence, no prefetch).

The streaming stores' helpers are defined here; a feature may keep its own
in its module (``define``, as the prefetch of cpp_outer_loop_prefetch.py).
A kernel records the helpers it calls with ``use(args, name)``;
``KernelGroup.codegen_group`` writes their definitions after the
``cpp_prefix.h`` include (``write_definitions``).  Each definition has an
include guard, since the C++ wrapper puts every kernel of a graph in one
translation unit.
"""

from __future__ import annotations

from weakref import WeakKeyDictionary

from torch.utils._ordered_set import OrderedSet

from ..utils import IndentedBuffer

STREAM_STORE = "stream_store_f32"
STREAM_FENCE = "stream_fence"

# Streaming stores exist for full float vectors on AVX512 and AVX2; the
# fence orders the calling thread's, so it is needed exactly where they are.
_STREAMING = f"""\
#ifndef INDUCTOR_OVERLAY_STREAM_STORE_F32
#define INDUCTOR_OVERLAY_STREAM_STORE_F32
// A non-temporal store of a full float vector at an address aligned to the
// vector width where the ISA has one; a plain store otherwise.
template <typename vec_t>
inline void {STREAM_STORE}(float* ptr, const vec_t& vec) {{
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
inline void {STREAM_FENCE}() {{
#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
    _mm_sfence();
#endif
}}
#endif"""

# name -> definition, written in this order; a feature that keeps its helper
# in its own module adds it (``define``)
_DEFINITIONS = {STREAM_STORE: _STREAMING, STREAM_FENCE: _STREAMING}

# KernelArgs -> the helpers its kernel calls (KernelArgs is one per kernel
# group; the entry goes with it)
_used: WeakKeyDictionary = WeakKeyDictionary()


def define(name: str, definition: str) -> str:
    """Add helper ``name`` with its C++ ``definition`` (a feature's own,
    kept in its module); the name.  Helpers are written in the order they
    were defined."""
    if _DEFINITIONS.get(name, definition) != definition:
        raise ValueError(f"C++ helper {name!r} is already defined otherwise")
    _DEFINITIONS[name] = definition
    return name


def use(args, name: str) -> str:
    """Record that the kernel of ``args`` calls helper ``name``; the name."""
    if name not in _DEFINITIONS:
        raise ValueError(f"no C++ helper {name!r}; known: {sorted(_DEFINITIONS)}")
    _used.setdefault(args, OrderedSet()).add(name)
    return name


def write_definitions(code: IndentedBuffer, args) -> None:
    """The definitions of the helpers the kernel of ``args`` calls, if any."""
    used = _used.get(args, ())
    written: OrderedSet[str] = OrderedSet()
    for name, definition in _DEFINITIONS.items():
        if name in used and definition not in written:
            code.splice(definition)
            written.add(definition)
