// The graph report: a network's training step built on the host graph (each
// layer's forward op and grad op grown as PopART would grow them, one graph
// for the whole network) and measured without running it: bytes and
// vertices per tile, and per op the cycles of one timestep from the
// vertices' setPerfEstimate, the exchange of its Copy programs and a rough
// estimate of its popops operations.
#pragma once

#include "OpRunner.hpp"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace snn {
namespace hostgraph {

struct LayerSpecification {
  std::string name;
  Attributes attributes; // the op's, as snn_ipu/backends/ipu.py packs them
  unsigned inFeatures = 0, outFeatures = 0;
  std::string weightType = "float";
};

struct OpReport {
  unsigned layer = 0;
  std::string op;
  unsigned steps = 0; // iterations of its time loop
  // One iteration of the time loop (cycles on the busiest tile of each phase):
  // compute sets, the sync before each, exchange phases (a sync each, then the
  // busiest receiver's bytes), popops operations (a sync each, then a rough
  // cycle per 4 bytes on their busiest tile).
  std::uint64_t stepComputeCycles = 0, stepSyncCycles = 0, stepExchangeCycles = 0,
                stepPopopsCycles = 0;
  std::uint64_t stepExchangeBytes = 0;        // received, summed over tiles and phases
  std::uint64_t stepExchangeBytesMaxTile = 0; // summed over phases
  // Outside the time loop (weight blocks, parameter copies, final reductions).
  std::uint64_t onceCycles = 0;
  std::vector<std::pair<std::string, std::uint64_t>> stepComputeSets; // per iteration
  std::uint64_t totalCycles() const {
    return std::uint64_t(steps) *
               (stepComputeCycles + stepSyncCycles + stepExchangeCycles + stepPopopsCycles) +
           onceCycles;
  }
};

struct GraphReport {
  std::vector<OpReport> ops;
  // With `fused`: the pipelined network as one program (NetworkOps.hpp), its
  // forward and backward time loops ("SnnNetwork", "SnnNetworkGrad"), built on a
  // graph of their own; the bytes above are the layers' ops'.
  std::vector<OpReport> fusedOps;
  std::uint64_t bytesPerTile = 0, reservedBytesPerTile = 0;
  std::vector<std::uint64_t> variableBytes, vertexStateBytes; // per tile
  std::vector<unsigned> vertices;                             // per tile
  std::vector<std::vector<std::uint64_t>> layerBytes;         // per layer, per tile
  unsigned maxTile = 0;
  std::vector<std::pair<std::string, std::uint64_t>> maxTileVariables; // largest first
  std::size_t numVariables = 0, numVertices = 0, numComputeSets = 0, numRegions = 0;
};

GraphReport graphReport(const std::vector<LayerSpecification> &layers, unsigned batch,
                        unsigned steps, unsigned inputCapacity, bool fused = false);

} // namespace hostgraph
} // namespace snn
