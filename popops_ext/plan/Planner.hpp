// Places one layer on a target: which tile owns which (contiguous) neurons,
// what each tile then holds, what is exchanged per step and how long a
// training step should take. The Poplar graph builder (popops_ext/poplar)
// and the host executor (popops_ext/host) both run the plan's tileStarts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/LayerSpec.hpp"
#include "plan/MemoryEstimation.hpp"
#include "plan/Target.hpp"

namespace snn {
namespace plan {

// Cycles of each vertex on the busiest tile for one timestep, the exchange
// phases of one timestep, and the optimizer once per training step.
struct StepCycles {
  std::uint64_t spikeMatmul = 0;
  std::uint64_t stateUpdate = 0;
  std::uint64_t listCombine = 0;
  std::uint64_t exchangeForward = 0;
  std::uint64_t listSlice = 0; // a tile's entries of the step's list, the spikes of t - 1
  std::uint64_t stateGrad = 0;
  std::uint64_t weightGrad = 0;
  std::uint64_t inputGrad = 0;
  std::uint64_t partialReduce = 0;
  std::uint64_t exchangeBackward = 0;
  // A sync per compute set (poplar runs each as a BSP superstep), outside the
  // weight gradient's (in weightGrad), forward and backward.
  std::uint64_t syncForward = 0;
  std::uint64_t syncBackward = 0;
  // The popops operations of each step (dynamicSlice / dynamicUpdate of the
  // [T, B, ...] tensors, the step counter): a sync each plus their bytes.
  std::uint64_t stepOpsForward = 0;
  std::uint64_t stepOpsBackward = 0;
  std::uint64_t optimizer = 0;
  // Once per training step: the weight rows copied onto every sample group's
  // tiles, and (sampleGroups > 1) the groups' weight gradients reduced.
  std::uint64_t groupReduce = 0;
};

struct LayerPlan {
  LayerSpec spec; // with automatic capacities resolved
  std::string target;
  unsigned numTiles = 0;
  std::vector<unsigned> tileStarts; // numTiles + 1 entries, 0 .. outFeatures
  // The batch cut into this many groups. Host: a work item is a tile's
  // neurons for one group's samples. IPU: each group has numTiles tiles of its
  // own (numTiles x sampleGroups in all), with its own copy of the weight rows
  // and only its own samples' lists; the groups' weight gradients are reduced
  // once per training step.
  unsigned sampleGroups = 1;
  unsigned samplesPerGroupMax = 0; // ceil(batch / sampleGroups)
  unsigned neuronsPerTileMax = 0;
  unsigned neuronsPerTileMin = 0;
  unsigned localCapacity = 0; // entries of a tile's partial list

  TileMemory maxTile; // tile 0: most neurons, combines and reduces the most
  std::uint64_t bytesPerTileMax = 0;
  double bytesPerTileMean = 0;    // over the layer's own tiles
  std::uint64_t bytesTotal = 0;   // including the op's tensors on other tiles
  std::uint64_t bytesIoTotal = 0; // the op's [T, B, ...] tensors alone
  unsigned ioTiles = 0;           // tiles those are spread over
  std::uint64_t bytesBudget = 0;  // per tile (IPU) or per work item's weights (host)
  // Of bytesTotal, what lives through a whole training step: the parameters and their
  // gradients, the dense history and the op's tensors over T (kept from the forward pass
  // for the backward pass). The rest (state, a step's lists and buffers) lives while the
  // layer's op runs. The host's network total adds the layers' kept bytes up.
  std::uint64_t bytesKept = 0;

  std::uint64_t exchangeBytesForward = 0;  // per timestep, summed over receivers
  std::uint64_t exchangeBytesBackward = 0; // per timestep, summed over receivers

  StepCycles cycles;
  std::uint64_t cyclesForwardTimestep = 0;
  std::uint64_t cyclesBackwardTimestep = 0;
  std::uint64_t cyclesTrainingStep = 0; // T x (forward + backward) + optimizer
  double clockHz = 0;
  double secondsPerTrainingStep = 0;
  double samplesPerSecond = 0;

  bool fits = false;
  std::string reason; // empty when it fits
  // IPU: a lower bound on the IPUs the layer would take: its bytes over an IPU's, and the
  // IPUs whose tiles it would take with each tile of the most neurons that holds its own
  // share (tile 0's gather of the lists and its reductions not counted). snn_ipu places a
  // layer on one IPU and does not split it across IPUs: more than 1 says the layer is too
  // large for this toolkit on this target. Where not even a grain of neurons holds its
  // share (no number of IPUs helps; the reason says so), the bytes' bound alone.
  unsigned ipusNeeded = 1;
};

// Fills in automatic capacities and checks the spec; throws std::invalid_argument.
LayerSpec resolveSpec(const LayerSpec &spec);

// Plans with exactly `neuronsPerTile` neurons on every tile but the last, the
// batch split over `sampleGroups` groups of tiles (IPU).
LayerPlan planWithTileSize(const LayerSpec &spec, const Target &target, unsigned neuronsPerTile,
                           unsigned sampleGroups = 1);

// IPU: the fitting plans that are fastest for their number of tiles (the
// Pareto front of tiles used against cycles per training step, fewest tiles
// first), over every tile size and sample split using at most maxTiles tiles
// (0: all of them). Empty when nothing fits.
std::vector<LayerPlan> planCandidates(const LayerSpec &spec, const Target &target,
                                      unsigned maxTiles = 0);

// Picks the tile size: on an IPU the fastest plan that fits in tile memory
// (or, when none fits, the one with the least memory per tile); on the host
// work items sized for the L2 cache and at least one per thread: tiles in
// whole rounds of the threads, or, where fewer tiles than threads fit the
// cache, sample groups that give each thread a share of the batch.
// On an IPU the choice is over tile sizes and sample groups, using at most
// maxTiles tiles (0: all of the target's).
LayerPlan planLayer(const LayerSpec &spec, const Target &target, unsigned maxTiles = 0);

// Tiles a plan occupies: numTiles x sampleGroups on an IPU.
inline unsigned tilesUsed(const LayerPlan &p) {
  return p.target == "host" ? p.numTiles : p.numTiles * p.sampleGroups;
}

} // namespace plan
} // namespace snn
