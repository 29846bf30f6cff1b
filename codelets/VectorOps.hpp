// 8-float vectors for the tile kernels. Generic vector extensions are
// understood by both g++ and popc's clang; host fast paths (F16C loads, AVX
// mask tests) are selected by the compiler's target macros.
#pragma once
#include <poplar/HalfFloat.hpp>

#if !defined(__IPU__) && (defined(__F16C__) || defined(__AVX__))
#include <immintrin.h>
#endif

namespace snn {

typedef float f32x8 __attribute__((vector_size(32)));
typedef half f16x8 __attribute__((vector_size(16)));

inline f32x8 load8(const float *p) {
  f32x8 v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}

inline f32x8 load8(const half *p) {
#if defined(__F16C__) && !defined(__IPU__)
  return (f32x8)_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
#else
  f16x8 h;
  __builtin_memcpy(&h, p, sizeof h);
  return __builtin_convertvector(h, f32x8);
#endif
}

inline void store8(float *p, f32x8 v) { __builtin_memcpy(p, &v, sizeof v); }

// Whether any lane of a is greater than the same lane of b.
inline bool anyGreater(f32x8 a, f32x8 b) {
#if defined(__AVX__) && !defined(__IPU__)
  return _mm256_movemask_ps(_mm256_cmp_ps((__m256)a, (__m256)b, _CMP_GT_OQ)) != 0;
#else
  const auto gt = a > b;
  int any = 0;
  for (unsigned j = 0; j < 8; ++j)
    any |= gt[j];
  return any != 0;
#endif
}

} // namespace snn
