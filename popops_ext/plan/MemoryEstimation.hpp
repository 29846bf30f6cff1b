// Bytes one tile holds for its share of a layer, by what they are for.
// The IPU has no memory but the tiles' SRAM, so everything a training step
// touches is counted: parameters, their gradients, state, the buffers of the
// current step, the BPTT history over T and exchange receive buffers. The
// buffers follow the vertices in codelets/ (field by field).
#pragma once

#include <cstdint>

#include "plan/LayerSpec.hpp"

namespace snn {
namespace plan {

struct TileMemory {
  std::uint64_t weights = 0;      // W (and V) blocks [fanIn x tileNeurons], weight dtype
  std::uint64_t gradWeights = 0;  // their gradients; WeightGradScatter accumulates float
  std::uint64_t neuronParams = 0; // bias, beta, threshold (, alpha) and their gradients
  std::uint64_t state = 0;        // [B, n] forward state and backward carries
  std::uint64_t spikeBuffers = 0; // this step's input list(s) and the tile's emitted lists
  std::uint64_t gradBuffers = 0;  // this step's output list + grads, tile slice, partials
  std::uint64_t history = 0;      // dense [T, B, n] history on the tile (readout / learn beta)
  std::uint64_t combine = 0;      // partial lists gathered by a combining tile
  std::uint64_t reduce = 0;       // partial input gradients gathered by a reducing tile
  std::uint64_t ioShare = 0;      // share of the op's tensors over T (see ioBytes)
  std::uint64_t reserved = 0;     // code, vertex state, control program

  std::uint64_t total() const {
    return weights + gradWeights + neuronParams + state + spikeBuffers + gradBuffers + history +
           combine + reduce + ioShare + reserved;
  }
};

// Where a tile sits in the layer's plan, as far as its memory is concerned.
struct TileRole {
  unsigned neurons = 0;                // neurons this tile owns
  unsigned numTiles = 1;               // tiles of the layer
  unsigned combineSamples = 0;         // samples whose lists this tile combines
  std::uint64_t gatheredListBytes = 0; // one sample's partial lists of all tiles
  std::uint64_t reduceOutputs = 0;     // partial-gradient outputs this tile reduces
  // Tiles the op's [T, B, ...] tensors are spread over (at least numTiles):
  // touched once per step, they need not sit on the tiles that compute.
  unsigned ioTiles = 0;
};

// The codelets work on whole 8-float chunks of a tile's neurons
// (codelets/RowKernels.hpp): weight rows and per-neuron arrays are padded.
constexpr unsigned kRowChunk = 8;
inline unsigned paddedRow(unsigned neurons) {
  return (neurons + kRowChunk - 1) / kRowChunk * kRowChunk;
}

// Float parameters per neuron: bias, beta, threshold (+ alpha for synaptic).
unsigned paramsPerNeuron(NeuronModel model);
// Dense state variables per neuron: U (+ syn for synaptic).
unsigned stateVarsPerNeuron(NeuronModel model);
// [B, n] float buffers of a tile: forward U (, syn), S[t-1], currents and
// backward carry (, carrySyn), notSpiked, currentGrad; readout: U, currents,
// carry, currentGrad.
unsigned denseBuffersPerNeuron(NeuronModel model);
// Entries of each of a tile's two lists (spikes, eligible-only) that can
// reach the combined list: min(K_out, its neurons).
unsigned localCapacity(const LayerSpec &spec, unsigned neurons);
// Bytes a tile sends per sample to the combining tile: both lists cut to
// localCapacity (ids + membranes) and its counts.
std::uint64_t localListBytes(const LayerSpec &spec, unsigned neurons);
// The op's inputs, outputs and gradients over all T: the history BPTT
// reads back (input lists; output lists with membranes, or the dense
// readout membrane) and the gradients at them.
std::uint64_t ioBytes(const LayerSpec &spec);

TileMemory tileMemory(const LayerSpec &spec, const TileRole &role, std::uint64_t reservedBytes);

} // namespace plan
} // namespace snn
