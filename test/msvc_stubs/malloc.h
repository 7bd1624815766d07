// Stub of the MSVC C runtime's <malloc.h> (clang's <mm_malloc.h> includes it).
#pragma once
#include <stdlib.h>
