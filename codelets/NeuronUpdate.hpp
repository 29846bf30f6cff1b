// Forward state update of one tile's neurons for one sample and one step
// (snnTorch semantics, see the numerics contract). Each vertex reads the
// tile's synaptic currents of the step (set by SpikeMatmul), adds the bias, and the
// spiking ones emit the tile's spike and eligible-only lists with the
// membrane at those entries, so no dense spike tensor is ever formed.
#pragma once
#include <poplar/Vertex.hpp>

#include "NeuronTerms.hpp"
#include "SpikeEmission.hpp"

// beta and threshold: each the tile's, or one value, every neuron's (a scalar
// parameter filled per neuron): the update then reads one array fewer per
// neuron for each.
class LifUpdate : public poplar::Vertex {
public:
  poplar::Input<poplar::Vector<float>> currents;
  poplar::Input<poplar::Vector<float>> bias; // empty: no bias
  poplar::Input<poplar::Vector<float>> beta;
  // Emission reads these 8 at a time (codelets/SpikeEmission.hpp).
  poplar::Input<poplar::Vector<float, poplar::VectorLayout::SPAN, snn::kVectorAlign>> threshold;
  poplar::InOut<poplar::Vector<float, poplar::VectorLayout::SPAN, snn::kVectorAlign>> membrane;
  poplar::InOut<poplar::Vector<float, poplar::VectorLayout::SPAN, snn::kVectorAlign>> spiked; // S[t-1] in, S[t] out (0/1)
  poplar::Output<poplar::Vector<int>> spikeIds;
  poplar::Output<poplar::Vector<float>> spikeMembrane;
  poplar::Output<poplar::Vector<int>> eligibleIds;
  poplar::Output<poplar::Vector<float>> eligibleMembrane;
  poplar::Output<poplar::Vector<unsigned>> counts; // {spikes, eligible-only}
  unsigned numNeurons;
  unsigned firstNeuron;
  unsigned reset;
  float gradWindow;

  bool compute() {
    const bool oneBeta = beta.size() == 1, oneThreshold = threshold.size() == 1;
    if (oneBeta && oneThreshold)
      update<true, true>();
    else if (oneBeta)
      update<true, false>();
    else if (oneThreshold)
      update<false, true>();
    else
      update<false, false>();
    const snn::EmittedCounts c = snn::emitSpikeLists(
        &membrane[0], &threshold[0], oneThreshold, &spiked[0], numNeurons, firstNeuron,
        gradWindow, &spikeIds[0], &spikeMembrane[0], &eligibleIds[0], &eligibleMembrane[0]);
    counts[0] = c.spikes;
    counts[1] = c.eligible;
    return true;
  }

private:
  // The restrict pointers live in this function only: emitSpikeLists writes
  // S[t] into `spiked`, which `s` reads as S[t-1], and restrict promises the
  // compiler that nothing else touches an object while its pointer is in scope.
  template <bool OneBeta, bool OneThreshold> void update() {
    const float *__restrict cur = &currents[0];
    float *__restrict u = &membrane[0];
    const float *__restrict s = &spiked[0];
    const float *__restrict b = &beta[0];
    const float *__restrict thr = &threshold[0];
    const float b0 = b[0], t0 = thr[0];
    // The next step's SpikeMatmul sets the currents anew (no clearing here).
    const float *__restrict bi = bias.size() != 0 ? &bias[0] : nullptr;
    if (reset == snn::RESET_SUBTRACT) {
      for (unsigned n = 0; n < numNeurons; ++n)
        u[n] = (OneBeta ? b0 : b[n]) * u[n] + snn::input(cur, bi, n) -
               s[n] * (OneThreshold ? t0 : thr[n]);
    } else if (reset == snn::RESET_ZERO) {
      for (unsigned n = 0; n < numNeurons; ++n)
        u[n] = (OneBeta ? b0 : b[n]) * (1.0f - s[n]) * u[n] + snn::input(cur, bi, n);
    } else {
      for (unsigned n = 0; n < numNeurons; ++n)
        u[n] = (OneBeta ? b0 : b[n]) * u[n] + snn::input(cur, bi, n);
    }
  }
};

class SynapticUpdate : public poplar::Vertex {
public:
  poplar::Input<poplar::Vector<float>> currents;
  poplar::Input<poplar::Vector<float>> bias; // empty: no bias
  poplar::Input<poplar::Vector<float>> alpha;
  poplar::Input<poplar::Vector<float>> beta;
  // Emission reads these 8 at a time (codelets/SpikeEmission.hpp).
  poplar::Input<poplar::Vector<float, poplar::VectorLayout::SPAN, snn::kVectorAlign>> threshold;
  poplar::InOut<poplar::Vector<float>> synaptic;
  poplar::InOut<poplar::Vector<float, poplar::VectorLayout::SPAN, snn::kVectorAlign>> membrane;
  poplar::InOut<poplar::Vector<float, poplar::VectorLayout::SPAN, snn::kVectorAlign>> spiked; // S[t-1] in, S[t] out (0/1)
  poplar::Output<poplar::Vector<int>> spikeIds;
  poplar::Output<poplar::Vector<float>> spikeMembrane;
  poplar::Output<poplar::Vector<int>> eligibleIds;
  poplar::Output<poplar::Vector<float>> eligibleMembrane;
  poplar::Output<poplar::Vector<unsigned>> counts; // {spikes, eligible-only}
  unsigned numNeurons;
  unsigned firstNeuron;
  unsigned reset;
  float gradWindow;

  bool compute() {
    { // restrict pointers scoped as in LifUpdate: `spiked` is written below
      const float *__restrict cur = &currents[0];
      float *__restrict syn = &synaptic[0];
      float *__restrict u = &membrane[0];
      const float *__restrict s = &spiked[0];
      const float *__restrict a = &alpha[0];
      const float *__restrict b = &beta[0];
      const float *__restrict thr = &threshold[0];
      const float *__restrict bi = bias.size() != 0 ? &bias[0] : nullptr;
      for (unsigned n = 0; n < numNeurons; ++n)
        syn[n] = a[n] * syn[n] + snn::input(cur, bi, n);
      if (reset == snn::RESET_SUBTRACT) {
        for (unsigned n = 0; n < numNeurons; ++n)
          u[n] = b[n] * u[n] + syn[n] - s[n] * thr[n];
      } else if (reset == snn::RESET_ZERO) {
        for (unsigned n = 0; n < numNeurons; ++n)
          u[n] = (1.0f - s[n]) * (b[n] * u[n] + syn[n]);
      } else {
        for (unsigned n = 0; n < numNeurons; ++n)
          u[n] = b[n] * u[n] + syn[n];
      }
    }
    const snn::EmittedCounts c = snn::emitSpikeLists(
        &membrane[0], &threshold[0], threshold.size() == 1, &spiked[0], numNeurons,
        firstNeuron, gradWindow, &spikeIds[0], &spikeMembrane[0], &eligibleIds[0],
        &eligibleMembrane[0]);
    counts[0] = c.spikes;
    counts[1] = c.eligible;
    return true;
  }
};

// Non-spiking leaky integrator; its membrane is the layer output.
class ReadoutUpdate : public poplar::Vertex {
public:
  poplar::Input<poplar::Vector<float>> currents;
  poplar::Input<poplar::Vector<float>> bias; // empty: no bias
  poplar::Input<poplar::Vector<float>> beta;
  poplar::InOut<poplar::Vector<float>> membrane;
  poplar::Output<poplar::Vector<float>> membraneOut;
  unsigned numNeurons;

  bool compute() {
    const float *__restrict cur = &currents[0];
    float *__restrict u = &membrane[0];
    float *__restrict out = &membraneOut[0];
    const float *__restrict b = &beta[0];
    const float *__restrict bi = bias.size() != 0 ? &bias[0] : nullptr;
    for (unsigned n = 0; n < numNeurons; ++n) {
      u[n] = b[n] * u[n] + snn::input(cur, bi, n);
      out[n] = u[n];
    }
    return true;
  }
};
