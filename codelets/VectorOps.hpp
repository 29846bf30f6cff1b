// 8-float vectors for the tile kernels. Generic vector extensions are
// understood by both g++ and popc's clang; host fast paths (F16C loads, AVX
// mask tests) are selected by the compiler's target macros.
//
// Alignment: on the IPU, a kernel's vector fields are declared 8-byte aligned
// (kVectorAlign) and every load8/store8 lands on a multiple of 8 floats (or
// halves) from such a field's start, so the compiler may use 64-bit accesses.
// The host's loads are unaligned ones.
#pragma once
#include <poplar/HalfFloat.hpp>

#if !defined(__IPU__) && (defined(__F16C__) || defined(__AVX__))
#include <immintrin.h>
#endif

// g++ notes (-Wpsabi) that a 32-byte vector passed or returned by value has
// another ABI without AVX. These helpers are inline in every codelet and never
// called across a compiled boundary, so there is no ABI to keep.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace snn {

// The alignment (bytes) of the vertex fields that load8/store8 walk.
constexpr unsigned kVectorAlign = 8;

typedef float f32x8 __attribute__((vector_size(32)));

template <typename T> inline const T *vectorAligned(const T *p) {
#if defined(__IPU__)
  return static_cast<const T *>(__builtin_assume_aligned(p, kVectorAlign));
#else
  return p;
#endif
}

inline f32x8 load8(const float *p) {
  f32x8 v;
  __builtin_memcpy(&v, vectorAligned(p), sizeof v);
  return v;
}

inline f32x8 load8(const half *p) {
#if defined(__IPU__)
  // Vectors of half exist where half is the IPU's native type. (On popc's cpu
  // target, the IPUModel's, half is a class, as public codelets assume.)
  typedef half f16x8 __attribute__((vector_size(16)));
  f16x8 h;
  __builtin_memcpy(&h, vectorAligned(p), sizeof h);
  return __builtin_convertvector(h, f32x8);
#elif defined(__F16C__)
  return (f32x8)_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
#else
  f32x8 v;
  for (unsigned j = 0; j < 8; ++j)
    v[j] = float(p[j]);
  return v;
#endif
}

inline void store8(float *p, f32x8 v) {
#if defined(__IPU__)
  p = static_cast<float *>(__builtin_assume_aligned(p, kVectorAlign));
#endif
  __builtin_memcpy(p, &v, sizeof v);
}

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
