// Backward through one tile's neuron state for one sample and step t (the
// executor walks t downwards). Carries are dense per neuron; the surrogate
// is evaluated only at the tile's listed entries of step t (spikes first,
// then eligible-only), which is where dL/dS can be non-zero. The reset
// masks need S[t-1]: every spike of step t-1 on the tile, including any the
// list's capacity dropped (they reset their neuron all the same). `notSpiked`
// is all ones between calls (the caller sets it once); a call clears it at
// those spikes, so it holds 1 - S[t-1], and sets them back before returning.
#pragma once
#include <poplar/Vertex.hpp>

#include "NeuronTerms.hpp"
#include "SurrogateDerivative.hpp"

namespace snn {

// gU[n] += gS * surrogate' at the listed entries; the listed part of
// dL/dthreshold is accumulated on the way (thresholdGrad null: not needed).
// Common: threshold[0] is every neuron's, so the block's surrogate reads no
// threshold per entry (a gather, which does not vectorise).
template <unsigned Kind, bool Common>
inline void listedSurrogateGradKind(float *__restrict gU, float *__restrict thresholdGrad,
                                    const float *__restrict threshold,
                                    const int *__restrict ids, const float *__restrict mem,
                                    const float *__restrict grad, unsigned numListed,
                                    unsigned firstNeuron, float p0, float p1) {
  // Blocks of 64: the surrogate over the block (one kind, so it vectorises),
  // then the scatter into the tile's neurons in list order. The block's
  // entries are read through pointers to its start: indexed as ids[k0 + k]
  // (unsigned, which may wrap) they were not known to be contiguous, and
  // every load of ids, mem and grad became a gather.
  float g[64];
  for (unsigned k0 = 0; k0 < numListed; k0 += 64) {
    const unsigned m = numListed - k0 < 64 ? numListed - k0 : 64;
    const int *__restrict id = ids + k0;
    const float *__restrict u = mem + k0;
    const float *__restrict gs = grad + k0;
    for (unsigned k = 0; k < m; ++k) {
      const float thr = Common ? threshold[0] : threshold[unsigned(id[k]) - firstNeuron];
      g[k] = gs[k] * surrogateDerivative(Kind, p0, p1, u[k] - thr);
    }
    if (thresholdGrad) {
      for (unsigned k = 0; k < m; ++k) {
        const unsigned n = unsigned(id[k]) - firstNeuron;
        gU[n] += g[k];
        thresholdGrad[n] -= g[k];
      }
    } else {
      for (unsigned k = 0; k < m; ++k)
        gU[unsigned(id[k]) - firstNeuron] += g[k];
    }
  }
}

template <unsigned Kind>
inline void listedSurrogateGradOf(float *__restrict gU, float *__restrict thresholdGrad,
                                  const float *__restrict threshold, bool commonThreshold,
                                  const int *__restrict ids, const float *__restrict mem,
                                  const float *__restrict grad, unsigned numListed,
                                  unsigned firstNeuron, float p0, float p1) {
  if (commonThreshold)
    listedSurrogateGradKind<Kind, true>(gU, thresholdGrad, threshold, ids, mem, grad,
                                        numListed, firstNeuron, p0, p1);
  else
    listedSurrogateGradKind<Kind, false>(gU, thresholdGrad, threshold, ids, mem, grad,
                                         numListed, firstNeuron, p0, p1);
}

// gU[n] += gS * surrogate' at the listed entries; the listed part of
// dL/dthreshold is accumulated on the way. commonThreshold: threshold holds one
// value, every neuron's.
inline void addListedSurrogateGrad(float *__restrict gU, float *__restrict thresholdGrad,
                                   const float *__restrict threshold, bool commonThreshold,
                                   const int *__restrict ids, const float *__restrict mem,
                                   const float *__restrict grad, unsigned numListed,
                                   unsigned firstNeuron, unsigned kind, float p0, float p1) {
  switch (kind) {
  case SURROGATE_ATAN:
    return listedSurrogateGradOf<SURROGATE_ATAN>(gU, thresholdGrad, threshold,
                                                 commonThreshold, ids, mem, grad, numListed,
                                                 firstNeuron, p0, p1);
  case SURROGATE_FAST_SIGMOID:
    return listedSurrogateGradOf<SURROGATE_FAST_SIGMOID>(gU, thresholdGrad, threshold,
                                                         commonThreshold, ids, mem, grad,
                                                         numListed, firstNeuron, p0, p1);
  case SURROGATE_SIGMOID:
    return listedSurrogateGradOf<SURROGATE_SIGMOID>(gU, thresholdGrad, threshold,
                                                    commonThreshold, ids, mem, grad,
                                                    numListed, firstNeuron, p0, p1);
  case SURROGATE_TRIANGLE:
    return listedSurrogateGradOf<SURROGATE_TRIANGLE>(gU, thresholdGrad, threshold,
                                                     commonThreshold, ids, mem, grad,
                                                     numListed, firstNeuron, p0, p1);
  default:
    return listedSurrogateGradOf<SURROGATE_STRAIGHT_THROUGH>(gU, thresholdGrad, threshold,
                                                             commonThreshold, ids, mem, grad,
                                                             numListed, firstNeuron, p0, p1);
  }
}

// gU[n] = carry[n], plus gS * surrogate' at the listed entries; the listed
// part of dL/dthreshold is accumulated on the way.
inline void listedSurrogateGrad(float *__restrict gU, const float *__restrict carry,
                                float *__restrict thresholdGrad,
                                const float *__restrict threshold, bool commonThreshold,
                                const int *__restrict ids, const float *__restrict mem,
                                const float *__restrict grad, unsigned numListed,
                                unsigned numNeurons, unsigned firstNeuron,
                                unsigned kind, float p0, float p1) {
  for (unsigned n = 0; n < numNeurons; ++n)
    gU[n] = carry[n];
  addListedSurrogateGrad(gU, thresholdGrad, threshold, commonThreshold, ids, mem, grad,
                         numListed, firstNeuron, kind, p0, p1);
}

// Runs update() with notSpiked = 1 - S[t-1]: cleared at the step t-1 spikes,
// which are set back to one afterwards.
template <typename Update>
inline void withPrevSpikesCleared(float *notSpiked, const int *prevSpikeIds,
                                  unsigned numPrevSpikes, unsigned firstNeuron,
                                  Update &&update) {
  for (unsigned k = 0; k < numPrevSpikes; ++k)
    notSpiked[unsigned(prevSpikeIds[k]) - firstNeuron] = 0.0f;
  update();
  for (unsigned k = 0; k < numPrevSpikes; ++k)
    notSpiked[unsigned(prevSpikeIds[k]) - firstNeuron] = 1.0f;
}

// One pass per neuron of a LIF tile: dL/dU[t] (in the carry) out as dL/dI[t],
// its reset term into dL/dthreshold (subtract reset) and its leak term into
// dL/dbeta where those are wanted, and the carry for step t-1. One instance
// per (reset, wanted gradients), so that each loop is branch-free and
// vectorises. Kept one pass: g++ would otherwise split the copy into dL/dI
// off into a library memmove per call and walk the tile twice.
template <unsigned Reset, bool ThresholdGrad, bool BetaGrad, bool CommonBeta>
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-loop-distribute-patterns")))
#endif
inline void resetGradPass(float *__restrict gU, float *__restrict c, float *__restrict gthr,
                          float *__restrict gb, const float *__restrict keep,
                          const float *__restrict up, const float *__restrict beta,
                          unsigned numNeurons) {
  const float b0 = beta[0];
  for (unsigned n = 0; n < numNeurons; ++n) {
    const float bn = CommonBeta ? b0 : beta[n];
    const float g = c[n];
    gU[n] = g;
    if (Reset == RESET_ZERO) { // the zeroed membrane keeps none of U[t-1]
      if (BetaGrad)
        gb[n] += g * keep[n] * up[n];
      c[n] = bn * g * keep[n];
    } else {
      if (Reset == RESET_SUBTRACT && ThresholdGrad)
        gthr[n] -= (1.0f - keep[n]) * g;
      if (BetaGrad)
        gb[n] += g * up[n];
      c[n] = bn * g;
    }
  }
}

template <unsigned Reset, bool CommonBeta>
inline void resetGradOf(float *gU, float *c, float *gthr, float *gb, const float *keep,
                        const float *up, const float *b, unsigned numNeurons) {
  if (up)
    gthr ? resetGradPass<Reset, true, true, CommonBeta>(gU, c, gthr, gb, keep, up, b,
                                                        numNeurons)
         : resetGradPass<Reset, false, true, CommonBeta>(gU, c, gthr, gb, keep, up, b,
                                                         numNeurons);
  else
    gthr ? resetGradPass<Reset, true, false, CommonBeta>(gU, c, gthr, gb, keep, up, b,
                                                         numNeurons)
         : resetGradPass<Reset, false, false, CommonBeta>(gU, c, gthr, gb, keep, up, b,
                                                          numNeurons);
}

// resetGradPass for the reset mode, and for the gradients wanted: dL/dthreshold
// where gthr is set, dL/dbeta where up (U[t-1]) is. commonBeta: b holds one
// value, every neuron's (one load fewer per neuron than the filled vector).
template <unsigned Reset>
inline void resetGrad(float *gU, float *c, float *gthr, float *gb, const float *keep,
                      const float *up, const float *b, bool commonBeta, unsigned numNeurons) {
  if (commonBeta)
    resetGradOf<Reset, true>(gU, c, gthr, gb, keep, up, b, numNeurons);
  else
    resetGradOf<Reset, false>(gU, c, gthr, gb, keep, up, b, numNeurons);
}

} // namespace snn

class LifStateGrad : public poplar::Vertex {
public:
  poplar::Input<poplar::Vector<int>> listIds; // global ids: spikes, then eligible-only
  poplar::Input<poplar::Vector<float>> listMembrane;
  poplar::Input<poplar::Vector<float>> listGrad; // dL/dS at the listed entries
  poplar::Input<unsigned> numListed;
  poplar::Input<poplar::Vector<int>> prevSpikeIds; // all spikes of step t-1
  poplar::Input<unsigned> numPrevSpikes;
  poplar::Input<poplar::Vector<float>> beta;      // the tile's, or one: every neuron's
  poplar::Input<poplar::Vector<float>> threshold; // the tile's, or one: every neuron's
  poplar::Input<poplar::Vector<float>> prevMembrane; // U[t-1]; empty: no beta grad
  poplar::InOut<poplar::Vector<float>> carry;        // dL/dU[t] flowing into step t-1
  poplar::InOut<poplar::Vector<float>> notSpiked; // ones; 1 - S[t-1] during the call
  poplar::InOut<poplar::Vector<float>> currentGrad; // written, then read back
  poplar::InOut<poplar::Vector<float>> betaGrad;
  poplar::InOut<poplar::Vector<float>> thresholdGrad; // empty: not needed
  unsigned numNeurons;
  unsigned firstNeuron;
  unsigned reset;
  unsigned surrogateKind;
  float surrogateP0;
  float surrogateP1;

  bool compute() {
    snn::withPrevSpikesCleared(&notSpiked[0], &prevSpikeIds[0], *numPrevSpikes, firstNeuron,
                               [this] { update(); });
    return true;
  }

private:
  // dL/dU[t] is added up in the carry itself (the carry from step t+1, then the
  // listed entries), and one pass per neuron writes it out as dL/dI[t] and turns
  // it into the carry for step t-1: the same operations, in the same order, as
  // a copy into dL/dI followed by a pass per term, in one pass over the tile.
  void update() {
    float *__restrict gU = &currentGrad[0];
    float *__restrict c = &carry[0];
    float *__restrict gthr = thresholdGrad.size() != 0 ? &thresholdGrad[0] : nullptr;
    const float *__restrict b = &beta[0];
    snn::addListedSurrogateGrad(c, gthr, &threshold[0], threshold.size() == 1, &listIds[0],
                                &listMembrane[0], &listGrad[0], *numListed, firstNeuron,
                                surrogateKind, surrogateP0, surrogateP1);
    const float *__restrict keep = &notSpiked[0];
    const float *__restrict up = prevMembrane.size() != 0 ? &prevMembrane[0] : nullptr;
    float *__restrict gb = &betaGrad[0];
    const bool commonBeta = beta.size() == 1;
    if (reset == snn::RESET_SUBTRACT)
      snn::resetGrad<snn::RESET_SUBTRACT>(gU, c, gthr, gb, keep, up, b, commonBeta,
                                          numNeurons);
    else if (reset == snn::RESET_ZERO) // (no reset term in dL/dthreshold)
      snn::resetGrad<snn::RESET_ZERO>(gU, c, nullptr, gb, keep, up, b, commonBeta, numNeurons);
    else
      snn::resetGrad<snn::RESET_NONE>(gU, c, nullptr, gb, keep, up, b, commonBeta, numNeurons);
  }
};

class SynapticStateGrad : public poplar::Vertex {
public:
  poplar::Input<poplar::Vector<int>> listIds; // global ids: spikes, then eligible-only
  poplar::Input<poplar::Vector<float>> listMembrane;
  poplar::Input<poplar::Vector<float>> listGrad; // dL/dS at the listed entries
  poplar::Input<unsigned> numListed;
  poplar::Input<poplar::Vector<int>> prevSpikeIds; // all spikes of step t-1
  poplar::Input<unsigned> numPrevSpikes;
  poplar::Input<poplar::Vector<float>> alpha;
  poplar::Input<poplar::Vector<float>> beta;
  poplar::Input<poplar::Vector<float>> threshold; // the tile's, or one: every neuron's
  poplar::Input<poplar::Vector<float>> prevMembrane; // U[t-1]; empty: no beta grad
  poplar::Input<poplar::Vector<float>> prevSynaptic; // syn[t-1]; empty: no alpha grad
  poplar::InOut<poplar::Vector<float>> carry;        // into U[t-1]
  poplar::InOut<poplar::Vector<float>> carrySynaptic; // into syn[t-1]
  poplar::InOut<poplar::Vector<float>> notSpiked; // ones; 1 - S[t-1] during the call
  poplar::InOut<poplar::Vector<float>> currentGrad; // written, then read back
  poplar::InOut<poplar::Vector<float>> alphaGrad;
  poplar::InOut<poplar::Vector<float>> betaGrad;
  poplar::InOut<poplar::Vector<float>> thresholdGrad; // empty: not needed
  unsigned numNeurons;
  unsigned firstNeuron;
  unsigned reset;
  unsigned surrogateKind;
  float surrogateP0;
  float surrogateP1;

  bool compute() {
    snn::withPrevSpikesCleared(&notSpiked[0], &prevSpikeIds[0], *numPrevSpikes, firstNeuron,
                               [this] { update(); });
    return true;
  }

private:
  void update() {
    float *__restrict g = &currentGrad[0];
    float *__restrict c = &carry[0];
    float *__restrict cs = &carrySynaptic[0];
    float *__restrict gthr = thresholdGrad.size() != 0 ? &thresholdGrad[0] : nullptr;
    const float *__restrict a = &alpha[0];
    const float *__restrict b = &beta[0];
    // g holds dL/dU[t] until it is overwritten by dL/dI[t] below.
    snn::listedSurrogateGrad(g, c, gthr, &threshold[0], threshold.size() == 1, &listIds[0],
                             &listMembrane[0], &listGrad[0], *numListed, numNeurons,
                             firstNeuron, surrogateKind, surrogateP0, surrogateP1);
    const float *__restrict keep = &notSpiked[0];
    if (reset == snn::RESET_SUBTRACT && gthr)
      for (unsigned n = 0; n < numNeurons; ++n)
        gthr[n] -= (1.0f - keep[n]) * g[n];
    if (reset == snn::RESET_ZERO) // the zeroed new membrane gates both inputs
      for (unsigned n = 0; n < numNeurons; ++n)
        g[n] *= keep[n];
    if (prevMembrane.size() != 0) {
      const float *__restrict up = &prevMembrane[0];
      float *__restrict gb = &betaGrad[0];
      for (unsigned n = 0; n < numNeurons; ++n)
        gb[n] += g[n] * up[n];
    }
    for (unsigned n = 0; n < numNeurons; ++n) {
      const float gV = g[n];
      const float gSyn = gV + cs[n];
      c[n] = b[n] * gV;
      cs[n] = a[n] * gSyn;
      g[n] = gSyn;
    }
    if (prevSynaptic.size() != 0) {
      const float *__restrict sp = &prevSynaptic[0];
      float *__restrict ga = &alphaGrad[0];
      for (unsigned n = 0; n < numNeurons; ++n)
        ga[n] += g[n] * sp[n];
    }
  }
};

class ReadoutStateGrad : public poplar::Vertex {
public:
  poplar::Input<poplar::Vector<float>> outputGrad;   // dL/dU[t], dense
  poplar::Input<poplar::Vector<float>> beta;
  poplar::Input<poplar::Vector<float>> prevMembrane; // U[t-1]; empty: no beta grad
  poplar::InOut<poplar::Vector<float>> carry;
  poplar::InOut<poplar::Vector<float>> currentGrad; // written, then read back
  poplar::InOut<poplar::Vector<float>> betaGrad;
  unsigned numNeurons;

  bool compute() {
    float *__restrict g = &currentGrad[0];
    float *__restrict c = &carry[0];
    const float *__restrict gm = &outputGrad[0];
    const float *__restrict b = &beta[0];
    for (unsigned n = 0; n < numNeurons; ++n) {
      g[n] = gm[n] + c[n];
      c[n] = b[n] * g[n];
    }
    if (prevMembrane.size() != 0) {
      const float *__restrict up = &prevMembrane[0];
      float *__restrict gb = &betaGrad[0];
      for (unsigned n = 0; n < numNeurons; ++n)
        gb[n] += g[n] * up[n];
    }
    return true;
  }
};
