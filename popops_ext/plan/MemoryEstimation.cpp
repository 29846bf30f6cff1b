#include "plan/MemoryEstimation.hpp"

#include <algorithm>

namespace snn {
namespace plan {

namespace {
constexpr std::uint64_t kIdBytes = 4;     // int32 neuron id
constexpr std::uint64_t kValueBytes = 4;  // float membrane / gradient value
constexpr std::uint64_t kCountsBytes = 8; // two unsigned counts per list

std::uint64_t ceilDiv(std::uint64_t a, std::uint64_t b) { return b ? (a + b - 1) / b : 0; }
} // namespace

unsigned paramsPerNeuron(NeuronModel model) {
  switch (model) {
  case NeuronModel::Synaptic:
    return 4;
  case NeuronModel::Readout:
    return 2;
  default:
    return 3;
  }
}

unsigned stateVarsPerNeuron(NeuronModel model) { return model == NeuronModel::Synaptic ? 2 : 1; }

unsigned denseBuffersPerNeuron(NeuronModel model) {
  if (model == NeuronModel::Readout)
    return 4;
  return 2 * (stateVarsPerNeuron(model) + 2);
}

unsigned localCapacity(const LayerSpec &spec, unsigned neurons) {
  if (spec.model == NeuronModel::Readout)
    return 0;
  return std::min(spec.capacityOut, neurons);
}

std::uint64_t localListBytes(const LayerSpec &spec, unsigned neurons) {
  if (spec.model == NeuronModel::Readout)
    return 0;
  return 2 * std::uint64_t(localCapacity(spec, neurons)) * (kIdBytes + kValueBytes) + kCountsBytes;
}

std::uint64_t ioBytes(const LayerSpec &s) {
  const std::uint64_t B = s.batch, T = s.timesteps, kin = s.capacityIn, kout = s.capacityOut;
  const std::uint64_t inputLists = kin * kIdBytes + kCountsBytes;
  const std::uint64_t gradIn = s.inputNeedsGrad ? kin * kValueBytes : 0;
  if (s.model == NeuronModel::Readout) // dense membrane out and its gradient
    return T * B * (inputLists + gradIn + 2 * std::uint64_t(s.outFeatures) * kValueBytes);
  // output lists: ids, membranes, counts; and the gradients at their entries
  return T * B * (inputLists + gradIn + kout * (kIdBytes + 2 * kValueBytes) + kCountsBytes);
}

TileMemory tileMemory(const LayerSpec &s, const TileRole &r, std::uint64_t reservedBytes) {
  const std::uint64_t n = r.neurons, row = paddedRow(r.neurons), B = s.batch, T = s.timesteps;
  const std::uint64_t kin = s.capacityIn, kout = s.capacityOut;
  const bool readout = s.model == NeuronModel::Readout;
  const std::uint64_t rec = s.recurrent ? 1 : 0;
  const std::uint64_t fanIn = s.inFeatures + rec * s.outFeatures;
  const std::uint64_t local = localCapacity(s, r.neurons);
  const std::uint64_t inList = kin * kIdBytes + kCountsBytes;
  const std::uint64_t ownList = kout * kIdBytes + kCountsBytes;

  TileMemory m;
  m.reserved = reservedBytes;
  // Without an input gradient the backward needs no W blocks (V's it does): W is
  // live in the forward only, its gradient blocks (as large or larger) in the
  // backward only, so the tile's peak holds one of them (the graph report agrees).
  m.weights = row * (s.inputNeedsGrad ? fanIn : fanIn - s.inFeatures) * s.weightBytes;
  m.gradWeights = row * fanIn * kValueBytes;
  m.neuronParams = row * paramsPerNeuron(s.model) * kValueBytes * 2;
  m.state = B * row * kValueBytes * denseBuffersPerNeuron(s.model);
  // LifUpdate may list every neuron of the tile in either list.
  const std::uint64_t emitted = readout ? 0 : 2 * n * (kIdBytes + kValueBytes) + kCountsBytes;
  m.spikeBuffers = B * (inList + rec * ownList + emitted);
  if (readout) {
    m.gradBuffers = B * n * kValueBytes; // dL/dU[t] of the tile's neurons
  } else {
    // The step's combined list with membranes and grads, and the tile's
    // slice of it (ids, membranes, grads of up to 2 x localCapacity entries).
    m.gradBuffers = B * (kout * (kIdBytes + 2 * kValueBytes) + kCountsBytes) +
                    B * 2 * local * (kIdBytes + 2 * kValueBytes);
  }
  if (r.numTiles > 1)
    m.gradBuffers += B * ((s.inputNeedsGrad ? kin : 0) + rec * kout) *
                     kValueBytes; // this tile's partial input grads
  if (readout)
    m.history = T * B * n * kValueBytes; // U[t] for gbeta; the output itself is in ioShare
  else if (s.denseHistory)
    m.history = T * B * n * kValueBytes * stateVarsPerNeuron(s.model);
  m.combine = readout ? 0 : std::uint64_t(r.combineSamples) * r.gatheredListBytes;
  m.reduce = r.numTiles > 1 ? r.reduceOutputs * r.numTiles * kValueBytes : 0;
  m.ioShare = ceilDiv(ioBytes(s), std::max(r.numTiles, r.ioTiles));
  return m;
}

} // namespace plan
} // namespace snn
