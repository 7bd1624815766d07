// What a kernel helper takes from MSVC's STL and intrinsics headers that
// clang does not ship: the std integer types, and ARM64's __prefetch
// (MSVC's <arm64intr.h>, which clang's <intrin.h> does not declare).
#pragma once
namespace std {
using ptrdiff_t = __PTRDIFF_TYPE__;
using uintptr_t = __UINTPTR_TYPE__;
}  // namespace std
#if defined(_M_ARM64)
extern "C" void __prefetch(const void*);
#endif
