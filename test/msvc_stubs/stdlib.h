// Stub of the MSVC C runtime's <stdlib.h>: what clang's <mm_malloc.h> uses.
#pragma once
typedef __SIZE_TYPE__ size_t;
void* malloc(size_t);
void free(void*);
void* _aligned_malloc(size_t, size_t);
void _aligned_free(void*);
