// Emission of a tile's spike list and eligible-only list for one sample and
// step, straight from the updated membrane: ascending ids, spikes strictly
// above threshold, eligible-only strictly above threshold - gradWindow.
// Host (AVX2): a compare pass over groups of 8 neurons, then a compress
// (lane mask -> packing permutation; 8 lanes stored, the list end advances by
// the popcount) of only the groups with something to list. Elsewhere: groups
// with nothing to list are skipped after one vector test, and within a group
// every neuron is written at the current end of both lists, which only
// advance when it belongs there. Either way each list needs capacity for all
// numNeurons entries. commonThreshold: threshold holds one value, every
// neuron's.
#pragma once
#include "VectorOps.hpp"

namespace snn {

#if defined(__AVX2__) && !defined(__IPU__)
// [256 x 8]: for a lane mask, the indices of its set lanes ascending, then 0s.
inline const int *compressTable() {
  struct Table {
    int v[256 * 8];
    Table() {
      for (unsigned m = 0; m < 256; ++m) {
        unsigned k = 0;
        for (unsigned j = 0; j < 8; ++j)
          if (m & (1u << j))
            v[8 * m + k++] = int(j);
        for (; k < 8; ++k)
          v[8 * m + k] = 0;
      }
    }
  };
  static const Table table;
  return table.v;
}
#endif

struct EmittedCounts {
  unsigned spikes;
  unsigned eligible;
};

inline EmittedCounts emitSpikeLists(const float *__restrict membrane,
                                    const float *__restrict threshold, bool commonThreshold,
                                    float *__restrict spiked, unsigned numNeurons,
                                    unsigned firstNeuron, float gradWindow,
                                    int *__restrict spikeIds,
                                    float *__restrict spikeMembrane,
                                    int *__restrict eligibleIds,
                                    float *__restrict eligibleMembrane) {
  unsigned ns = 0, ne = 0;
  auto emit = [&](unsigned n) {
    const float u = membrane[n];
    const float thr = threshold[commonThreshold ? 0 : n];
    const bool s = u > thr;
    const bool e = u > thr - gradWindow;
    spikeIds[ns] = int(firstNeuron + n);
    spikeMembrane[ns] = u;
    ns += s;
    eligibleIds[ne] = int(firstNeuron + n);
    eligibleMembrane[ne] = u;
    ne += e & !s;
    spiked[n] = s ? 1.0f : 0.0f;
  };
  unsigned n = 0;
#if defined(__AVX2__) && !defined(__IPU__)
  // Two passes per block of 64 groups of 8 neurons. The first compares every
  // group with min(threshold - gradWindow, threshold) only (a spike is above it
  // too, whatever the window), stores S[t] = 0, and notes the groups with
  // anything above it in a bit mask (branch-free, no dependence between
  // groups); the second takes only those: both compares, S[t], and the packing
  // (a lane mask selects a permutation that moves the listed lanes, ascending,
  // to the front; all 8 lanes are stored at the end of the list, which
  // advances by the popcount). At a few percent activity most groups list
  // nothing.
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 window = _mm256_set1_ps(gradWindow);
  const __m256 thr0 = _mm256_set1_ps(threshold[0]);
  const __m256 floor0 = _mm256_min_ps(_mm256_sub_ps(thr0, window), thr0);
  const int *table = compressTable();
  while (n + 8 <= numNeurons) {
    const unsigned groups = (numNeurons - n) / 8 < 64 ? (numNeurons - n) / 8 : 64;
    unsigned long long busy = 0;
    for (unsigned g = 0; g < groups; ++g) {
      const unsigned at = n + 8 * g;
      const __m256 thr = commonThreshold ? thr0 : (__m256)load8(threshold + at);
      const __m256 floor =
          commonThreshold ? floor0 : _mm256_min_ps(_mm256_sub_ps(thr, window), thr);
      const __m256 eGt = _mm256_cmp_ps((__m256)load8(membrane + at), floor, _CMP_GT_OQ);
      store8(spiked + at, f32x8{});
      busy |= (unsigned long long)(_mm256_movemask_ps(eGt) != 0) << g;
    }
    for (; busy != 0; busy &= busy - 1) {
      const unsigned g = unsigned(__builtin_ctzll(busy)), at = n + 8 * g;
      const __m256 u = (__m256)load8(membrane + at);
      const __m256 thr = commonThreshold ? thr0 : (__m256)load8(threshold + at);
      const __m256 sGt = _mm256_cmp_ps(u, thr, _CMP_GT_OQ);
      const __m256 eGt = _mm256_cmp_ps(u, _mm256_sub_ps(thr, window), _CMP_GT_OQ);
      store8(spiked + at, (f32x8)_mm256_and_ps(sGt, one));
      const unsigned ms = unsigned(_mm256_movemask_ps(sGt));
      const unsigned me = unsigned(_mm256_movemask_ps(eGt)) & ~ms;
      const __m256i idv = _mm256_add_epi32(lane, _mm256_set1_epi32(int(firstNeuron + at)));
      const __m256i ps = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(table + 8 * ms));
      const __m256i pe = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(table + 8 * me));
      _mm256_storeu_si256(reinterpret_cast<__m256i *>(spikeIds + ns),
                          _mm256_permutevar8x32_epi32(idv, ps));
      _mm256_storeu_ps(spikeMembrane + ns, _mm256_permutevar8x32_ps(u, ps));
      _mm256_storeu_si256(reinterpret_cast<__m256i *>(eligibleIds + ne),
                          _mm256_permutevar8x32_epi32(idv, pe));
      _mm256_storeu_ps(eligibleMembrane + ne, _mm256_permutevar8x32_ps(u, pe));
      ns += unsigned(__builtin_popcount(ms));
      ne += unsigned(__builtin_popcount(me));
    }
    n += 8 * groups;
  }
#else
  for (; n + 8 <= numNeurons; n += 8) {
    const f32x8 thr = commonThreshold ? f32x8{} + threshold[0] : load8(threshold + n);
    if (anyGreater(load8(membrane + n), thr - gradWindow)) {
      for (unsigned j = 0; j < 8; ++j)
        emit(n + j);
    } else {
      store8(spiked + n, f32x8{});
    }
  }
#endif
  for (; n < numNeurons; ++n)
    emit(n);
  return {ns, ne};
}

} // namespace snn
