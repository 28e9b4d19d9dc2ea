#pragma once
// <immintrin.h> for the AVX-512 kernels, with GCC 12's false positive silenced:
// its intrinsics start from _mm512_undefined_*(), which it reports as
// uninitialized once they are inlined into templates (-Wuninitialized,
// -Wmaybe-uninitialized). Include this instead of <immintrin.h> in a kernel
// file; the pragmas then cover that file.
#include <immintrin.h>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
