// Stub of the MSVC C runtime's <setjmp.h> (clang's <intrin.h> includes it).
#pragma once
typedef int jmp_buf[16];
