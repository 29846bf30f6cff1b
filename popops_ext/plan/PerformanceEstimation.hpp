// Cycle estimates of the codelets in codelets/, one function per vertex, in
// the manner of poplibs' PerformanceEstimation.hpp: a vertex's cost is its
// slowest worker's loop (overhead + per-item costs) times the number of
// worker contexts (a worker issues one instruction every numWorkers cycles),
// plus the supervisor's set-up. Counts that depend on the data (spikes,
// eligible entries) arrive as expected values; the result is rounded up.
//
// The constants are instruction counts of the loops as the codelets are
// written (64-bit loads, f32v2 / f16v4 arithmetic), not measurements: no IPU
// was available to calibrate them.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "Codes.hpp"

namespace snn {
namespace plan {

// The model codes of Codes.hpp, scoped for the planner.
enum class NeuronModel : unsigned {
  Leaky = MODEL_LEAKY,
  Synaptic = MODEL_SYNAPTIC,
  Readout = MODEL_READOUT,
};

namespace cost {

// The supervisor's start of a vertex: poplibs' estimators take 18 cycles
// (lib/popsparse/PerformanceEstimation.hpp, SDK 3.4). A worker's entry (loading
// its fields, setting up its loop) is our own count of the codelets' prologues;
// poplibs' worker overheads range from ~10 to 34 cycles (docs/ipu.md).
constexpr std::uint64_t kSupervisorCycles = 18;
constexpr std::uint64_t kWorkerEntryCycles = 15;

inline std::uint64_t ceilDiv(std::uint64_t a, std::uint64_t b) { return (a + b - 1) / b; }
inline std::uint64_t ceilU(double x) {
  return x <= 0 ? 0 : static_cast<std::uint64_t>(std::ceil(x));
}

inline std::uint64_t vertexCycles(std::uint64_t slowestWorker, unsigned numWorkers) {
  return kSupervisorCycles + slowestWorker * numWorkers;
}

// Cycles of one vector step of a row update (load weights, add/accumulate,
// store). Halves are widened to float before the add, hence the extra cycles:
// 3 and 5, as poplibs' sparse gather-and-add (popsparse PerformanceEstimation.hpp,
// sparseGatherElementWiseCycles: cyclesPerVector = floatData ? 3 : 5).
inline std::uint64_t rowStepCycles(bool floatWeights) { return floatWeights ? 3 : 5; }

// What the graph does (popops_ext/poplar/LayerGraph.cpp): the per-sample
// vertices (SpikeMatmul, the state update and its gradient, InputSpikeGrad,
// SpikeListCombine) are one worker Vertex per (tile, sample),
// which Poplar shares out over the tile's worker contexts: a compute set of n
// of them takes ceil(n / numWorkers) rounds of one vertex per worker, and
// with fewer samples than workers, workers idle. Each vertex's own estimate
// (its *WorkerCycles) is one worker's loop.
inline std::uint64_t computeSetCycles(std::uint64_t numVertices, std::uint64_t workerCycles,
                                      unsigned numWorkers) {
  if (numVertices == 0)
    return 0;
  return vertexCycles(ceilDiv(numVertices, numWorkers) * workerCycles, numWorkers);
}

// SpikeMatmul: for every input spike, add that input's weight column (stored
// contiguously per tile as [in][tileNeurons]) into the tile's currents.
inline std::uint64_t spikeMatmulWorkerCycles(double spikesPerSample, unsigned numNeurons,
                                             bool floatWeights, unsigned vectorWidth) {
  // 6: load the id, bounds check, scale to a row address, set up the rpt.
  const double perSpike = 6 + ceilDiv(numNeurons, vectorWidth) * rowStepCycles(floatWeights);
  return kWorkerEntryCycles + ceilU(8 + spikesPerSample * perSpike);
}
inline std::uint64_t spikeMatmulCycles(unsigned numSamples, double spikesPerSample,
                                       unsigned numNeurons, bool floatWeights, unsigned vectorWidth,
                                       unsigned numWorkers) {
  if (numNeurons == 0)
    return 0;
  return computeSetCycles(
      numSamples, spikeMatmulWorkerCycles(spikesPerSample, numNeurons, floatWeights, vectorWidth),
      numWorkers);
}

// Where a tile has fewer samples than workers, the IPU graph's per-sample work
// is cut into parts so that every worker has some: a sample's row into column
// ranges (SpikeMatmulParts), its list into entry ranges (InputSpikeGradRange),
// at most `pieces` of them (8-float chunks, list entries).
inline unsigned workerParts(unsigned samples, unsigned pieces, unsigned numWorkers) {
  return std::max(1u, std::min(pieces, samples ? numWorkers / samples : numWorkers));
}

// SpikeMatmulParts (the IPU graph): one MultiVertex for a tile's samples, each
// sample's row in workerParts column ranges; the workers take the (sample,
// range) items in turn, each item a pass over the sample's spikes.
inline std::uint64_t spikeMatmulPartsCycles(unsigned numSamples, double spikesPerSample,
                                            unsigned rowLength, bool floatWeights,
                                            unsigned vectorWidth, unsigned numWorkers) {
  if (numSamples == 0 || rowLength == 0)
    return 0;
  const unsigned chunks = unsigned(ceilDiv(rowLength, 8));
  const unsigned parts = workerParts(numSamples, chunks, numWorkers);
  const std::uint64_t columns = ceilDiv(chunks, parts) * 8;
  const std::uint64_t items = ceilDiv(std::uint64_t(numSamples) * parts, numWorkers);
  const double perSpike = 6 + ceilDiv(columns, vectorWidth) * rowStepCycles(floatWeights);
  return vertexCycles(kWorkerEntryCycles + items * ceilU(8 + spikesPerSample * perSpike),
                      numWorkers);
}

// LifUpdate / SynapticUpdate / ReadoutUpdate: dense over the tile's neurons,
// plus appending every listed (spike or eligible) neuron to the tile's list.
inline std::uint64_t stateUpdateWorkerCycles(NeuronModel model, unsigned numNeurons,
                                             double listedPerSample) {
  // leaky: mul, add, sub reset, compare, eligible compare, store (+ loads)
  const unsigned perNeuron = model == NeuronModel::Synaptic ? 10
                             : model == NeuronModel::Leaky  ? 7
                                                            : 4;
  return kWorkerEntryCycles + std::uint64_t(numNeurons) * perNeuron +
         ceilU(std::ceil(listedPerSample) * 6);
}
inline std::uint64_t stateUpdateCycles(NeuronModel model, unsigned numSamples, unsigned numNeurons,
                                       double listedPerSample, unsigned numWorkers) {
  if (numNeurons == 0)
    return 0;
  return computeSetCycles(numSamples, stateUpdateWorkerCycles(model, numNeurons, listedPerSample),
                          numWorkers);
}

// SpikeListCombine: for each sample this tile combines, walk the partial
// lists of all the layer's tiles, spikes first then eligible-only entries.
inline std::uint64_t listCombineWorkerCycles(unsigned numPartials, double entriesPerSample) {
  // Two passes over the partials (spikes, then eligible): 2 x 4 cycles per
  // partial to read its counts, 2 cycles per copied (id, membrane) pair.
  return kWorkerEntryCycles + ceilU(10 + 8.0 * numPartials + 2 * entriesPerSample);
}
inline std::uint64_t listCombineCycles(unsigned samplesOnTile, unsigned numPartials,
                                       double entriesPerSample, unsigned numWorkers) {
  return computeSetCycles(samplesOnTile, listCombineWorkerCycles(numPartials, entriesPerSample),
                          numWorkers);
}

// SpikeListCombineParts (the IPU graph, where a tile combines fewer samples
// than it has workers): a MultiVertex per sample whose workers each copy the
// lists of ceil(partials / W) tiles, after a pass over all the tiles' counts
// (two loads and adds, a compare) that says where their entries go.
inline std::uint64_t listCombinePartsWorkerCycles(unsigned numPartials, double entriesPerSample,
                                                  unsigned numWorkers) {
  return kWorkerEntryCycles +
         ceilU(20 + 4.0 * numPartials + 8.0 * ceilDiv(numPartials, numWorkers) +
               2 * entriesPerSample / numWorkers);
}
// Whether the graph combines a tile's samples with SpikeListCombineParts: where
// that is the cheaper of the two.
inline bool listCombineUsesParts(unsigned samplesOnTile, unsigned numPartials,
                                 double entriesPerSample, unsigned numWorkers) {
  return samplesOnTile *
             vertexCycles(listCombinePartsWorkerCycles(numPartials, entriesPerSample, numWorkers),
                          numWorkers) <
         listCombineCycles(samplesOnTile, numPartials, entriesPerSample, numWorkers);
}
// TileListSlice: the tile's entries of a sample's combined list (ids, membranes,
// gradients), a pass over the tile's share of the list.
inline std::uint64_t listSliceWorkerCycles(unsigned localCapacity) {
  return 60 + 8ull * localCapacity;
}
// SpikeBitsPack / SpikeBitsToList: a load, test and shift per neuron.
inline std::uint64_t spikeBitsWorkerCycles(unsigned neurons) {
  return kWorkerEntryCycles + 3ull * neurons;
}

// The combine compute set of the IPU graph: the combining (one vertex per
// sample, of either kind) and every sample's SpikeBitsPack (spikeBitsWorkerCycles,
// one worker each), on the tile that combines the most.
inline std::uint64_t combineSetCycles(unsigned samplesOnTile, unsigned samples,
                                      unsigned numPartials, double entriesPerSample,
                                      unsigned neurons, unsigned numWorkers) {
  const std::uint64_t bits = spikeBitsWorkerCycles(neurons);
  if (listCombineUsesParts(samplesOnTile, numPartials, entriesPerSample, numWorkers))
    return samplesOnTile * vertexCycles(listCombinePartsWorkerCycles(numPartials, entriesPerSample,
                                                                     numWorkers),
                                        numWorkers) +
           computeSetCycles(samples, bits, numWorkers);
  // worker vertices: the combines and the bit packs shared out over the workers
  std::vector<std::uint64_t> load(numWorkers, 0);
  for (unsigned b = 0; b < samplesOnTile; ++b)
    *std::min_element(load.begin(), load.end()) +=
        listCombineWorkerCycles(numPartials, entriesPerSample);
  for (unsigned b = 0; b < samples; ++b)
    *std::min_element(load.begin(), load.end()) += bits;
  return vertexCycles(*std::max_element(load.begin(), load.end()), numWorkers);
}

// LifStateGrad / SynapticStateGrad / ReadoutStateGrad: dense carries over the
// tile's neurons, surrogate derivative only at the tile's listed entries.
inline std::uint64_t stateGradWorkerCycles(NeuronModel model, unsigned numNeurons,
                                           double listedPerSample) {
  const unsigned perNeuron = model == NeuronModel::Synaptic ? 9
                             : model == NeuronModel::Leaky  ? 6
                                                            : 4;
  // ATan surrogate: a float divide dominates (~20 cycles with the scatter).
  const unsigned perListed = model == NeuronModel::Readout ? 0 : 20;
  return kWorkerEntryCycles + std::uint64_t(numNeurons) * perNeuron +
         ceilU(std::ceil(listedPerSample) * perListed);
}
inline std::uint64_t stateGradCycles(NeuronModel model, unsigned numSamples, unsigned numNeurons,
                                     double listedPerSample, unsigned numWorkers) {
  if (numNeurons == 0)
    return 0;
  return computeSetCycles(numSamples, stateGradWorkerCycles(model, numNeurons, listedPerSample),
                          numWorkers);
}

// WeightGradScatter: for every input spike, add the tile's current gradients
// into that input's gradient row: the transpose of SpikeMatmul. The samples
// share the tile's gradient block, so they take turns, one compute set (and
// one sync) each; within a sample the vertex is a MultiVertex whose workers
// share out the row's 8-float chunks. (Half gradients would be widened and
// narrowed again, one extra cycle per vector; the codelet accumulates float.)
inline std::uint64_t weightGradVertexCycles(double spikesPerSample, unsigned numNeurons,
                                            bool floatWeights, unsigned vectorWidth,
                                            unsigned numWorkers) {
  const std::uint64_t columns = ceilDiv(ceilDiv(numNeurons, 8), numWorkers) * 8;
  const double perSpike = 6 + ceilDiv(std::min<std::uint64_t>(columns, numNeurons), vectorWidth) *
                                  (rowStepCycles(floatWeights) + (floatWeights ? 0 : 1));
  return vertexCycles(kWorkerEntryCycles + ceilU(8 + spikesPerSample * perSpike), numWorkers);
}
inline std::uint64_t weightGradCycles(unsigned numSamples, double spikesPerSample,
                                      unsigned numNeurons, bool floatWeights, unsigned vectorWidth,
                                      unsigned numWorkers, unsigned syncCycles) {
  if (numSamples == 0 || numNeurons == 0)
    return 0;
  return numSamples * (weightGradVertexCycles(spikesPerSample, numNeurons, floatWeights,
                                              vectorWidth, numWorkers) +
                       syncCycles);
}

// WeightGradRows (the IPU graph): one MultiVertex per tile for all of its
// samples in one compute set. Worker w owns the block's rows (inputs)
// [w * ceil(in / W), (w + 1) * ceil(in / W)) and the bias columns of the same
// share: it walks every sample's list in sample order (an id load and a range
// test, kScanCycles) and adds the whole row of the spikes it owns. Every
// element is still added in the order of the samples, and within a sample the
// ids are distinct, so the sums equal one worker's. Expected spikes per worker:
// spikes / W (ids spread evenly over the inputs).
constexpr std::uint64_t kScanCycles = 3;
inline std::uint64_t weightGradRowsWorkerCycles(unsigned numSamples, double spikesPerSample,
                                                unsigned rowLength, bool hasBias,
                                                unsigned vectorWidth, unsigned numWorkers) {
  const double perSpike = 6 + double(ceilDiv(rowLength, vectorWidth)) * rowStepCycles(true);
  const double bias =
      hasBias ? double(ceilDiv(ceilDiv(rowLength, numWorkers), vectorWidth)) * rowStepCycles(true)
              : 0.0;
  const double perSample =
      4 + spikesPerSample * kScanCycles + spikesPerSample / numWorkers * perSpike + bias;
  return kWorkerEntryCycles + ceilU(8 + numSamples * perSample);
}
inline std::uint64_t weightGradRowsCycles(unsigned numSamples, double spikesPerSample,
                                          unsigned rowLength, bool hasBias, unsigned vectorWidth,
                                          unsigned numWorkers) {
  if (numSamples == 0 || rowLength == 0)
    return 0;
  return vertexCycles(weightGradRowsWorkerCycles(numSamples, spikesPerSample, rowLength, hasBias,
                                                 vectorWidth, numWorkers),
                      numWorkers);
}

// InputSpikeGrad: for every listed input entry (spikes and eligible), the dot
// product of its weight column with the tile's current gradients: one
// multiply-accumulate vector step per cycle, then a horizontal sum and store.
inline std::uint64_t inputGradWorkerCycles(double listedPerSample, unsigned numNeurons,
                                           bool floatWeights, unsigned vectorWidth) {
  const double perEntry = 12 + ceilDiv(numNeurons, vectorWidth) * (floatWeights ? 1 : 2);
  return kWorkerEntryCycles + ceilU(std::ceil(listedPerSample) * perEntry);
}
inline std::uint64_t inputGradCycles(unsigned numSamples, double listedPerSample,
                                     unsigned numNeurons, bool floatWeights, unsigned vectorWidth,
                                     unsigned numWorkers) {
  if (numNeurons == 0)
    return 0;
  return computeSetCycles(
      numSamples, inputGradWorkerCycles(listedPerSample, numNeurons, floatWeights, vectorWidth),
      numWorkers);
}

// InputSpikeGradRange (the IPU graph): each sample's list cut into workerParts
// ranges of ceil(K / parts) entries, a worker vertex each; a range's vertex
// costs the expected listed entries that fall in it.
inline std::uint64_t inputGradRangeWorkerCycles(double listedPerSample, unsigned first,
                                                unsigned length, unsigned numNeurons,
                                                bool floatWeights, unsigned vectorWidth) {
  const double inRange =
      std::min<double>(length, std::max(0.0, std::ceil(listedPerSample) - first));
  const double perEntry = 12 + ceilDiv(numNeurons, vectorWidth) * (floatWeights ? 1 : 2);
  return kWorkerEntryCycles + 4 + ceilU(inRange * perEntry);
}
// A tile's compute set: samples x ranges vertices, handed out least-loaded first
// (the graph report's rule), sample by sample.
inline std::uint64_t inputGradRangesCycles(unsigned numSamples, double listedPerSample,
                                           unsigned capacity, unsigned numNeurons,
                                           bool floatWeights, unsigned vectorWidth,
                                           unsigned numWorkers) {
  if (numSamples == 0 || numNeurons == 0 || capacity == 0)
    return 0;
  const unsigned parts = workerParts(numSamples, capacity, numWorkers);
  const unsigned length = unsigned(ceilDiv(capacity, parts));
  std::vector<std::uint64_t> load(numWorkers, 0);
  for (unsigned b = 0; b < numSamples; ++b)
    for (unsigned first = 0; first < capacity; first += length)
      *std::min_element(load.begin(), load.end()) += inputGradRangeWorkerCycles(
          listedPerSample, first, std::min(length, capacity - first), numNeurons, floatWeights,
          vectorWidth);
  return vertexCycles(*std::max_element(load.begin(), load.end()), numWorkers);
}

// PartialReduce (the host executor): one vertex per sample, summing the
// per-tile partial input gradients of that sample's listed entries.
inline std::uint64_t partialReduceWorkerCycles(double outputsPerSample, unsigned numPartials) {
  return kWorkerEntryCycles + ceilU(std::ceil(outputsPerSample) * (4 + numPartials));
}

// The IPU graph splits a sample's K outputs into ranges of ceil(K / numWorkers)
// entries, a PartialReduceRange each, all on the sample's reducing tile: its
// workers share the sample instead of one of them doing it all.
inline unsigned reduceRangeLength(unsigned capacity, unsigned numWorkers) {
  return unsigned(ceilDiv(std::max(1u, capacity), numWorkers));
}
inline unsigned reduceRanges(unsigned capacity, unsigned numWorkers) {
  return unsigned(ceilDiv(std::max(1u, capacity), reduceRangeLength(capacity, numWorkers)));
}
// One range [first, first + length): the expected listed entries that fall in it.
inline std::uint64_t partialReduceRangeWorkerCycles(double outputsPerSample, unsigned first,
                                                    unsigned length, unsigned numPartials) {
  const double inRange = std::min<double>(length, std::max(0.0, std::ceil(outputsPerSample) - first));
  return kWorkerEntryCycles + 4 + ceilU(inRange * (4 + numPartials));
}
// A reducing tile's compute set: samplesOnTile x ranges vertices, handed out to
// the workers least-loaded first (the graph report's rule) in sample order.
inline std::uint64_t partialReduceCycles(unsigned samplesOnTile, double outputsPerSample,
                                         unsigned capacity, unsigned numPartials,
                                         unsigned numWorkers) {
  // (a layer on one tile per group still builds them: its "reduction" copies)
  if (numPartials == 0 || samplesOnTile == 0 || capacity == 0)
    return 0;
  const unsigned length = reduceRangeLength(capacity, numWorkers);
  const unsigned ranges = reduceRanges(capacity, numWorkers);
  std::vector<std::uint64_t> load(numWorkers, 0);
  for (unsigned b = 0; b < samplesOnTile; ++b)
    for (unsigned r = 0; r < ranges; ++r)
      *std::min_element(load.begin(), load.end()) +=
          partialReduceRangeWorkerCycles(outputsPerSample, r * length,
                                         std::min(length, capacity - r * length), numPartials);
  return vertexCycles(*std::max_element(load.begin(), load.end()), numWorkers);
}

// Plain SGD on the tile's weights once per training step (w -= lr * g).
inline std::uint64_t optimizerCycles(std::uint64_t numWeights, unsigned vectorWidth,
                                     unsigned numWorkers) {
  if (numWeights == 0)
    return 0;
  const std::uint64_t perWorker = ceilDiv(numWeights, numWorkers);
  return vertexCycles(kWorkerEntryCycles + ceilDiv(perWorker, vectorWidth) * 2, numWorkers);
}

// One exchange phase: the sync, then the largest amount any tile receives at
// the tile's receive bandwidth (broadcasts cost the receiver, not the sender).
inline std::uint64_t exchangeCycles(std::uint64_t bytesReceivedMax, double bytesPerCycle,
                                    unsigned syncCycles, unsigned overheadCycles = 0) {
  if (bytesReceivedMax == 0)
    return 0;
  return syncCycles + overheadCycles + ceilU(bytesReceivedMax / bytesPerCycle);
}

} // namespace cost
} // namespace plan
} // namespace snn
