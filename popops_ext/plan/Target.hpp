// Machine descriptions the planner sizes work for: an IPU (Mk2 GC200) or the
// host CPU running the emulator. Everything the planner and the cost model
// need to know about a machine lives here, so that neither hard-codes one.
#pragma once

#include <cstdint>
#include <string>

namespace snn {
namespace plan {

enum class TargetKind { Ipu2, Host };

struct Target {
  TargetKind kind = TargetKind::Ipu2;
  std::string name;
  // IPU: hardware tiles. Host: 0, the planner picks the number of work items.
  unsigned numTiles = 0;
  // IPU: SRAM of one tile. Host: cache budget for one work item's weight block.
  std::uint64_t bytesPerTile = 0;
  // Taken off every tile before data: code, vertex state, control program.
  std::uint64_t reservedBytesPerTile = 0;
  // Host only: memory the whole layer may use (the IPU's limit is per tile).
  std::uint64_t totalMemoryBytes = 0;
  // Hardware worker contexts per tile (IPU), 1 on the host: a thread runs a tile.
  unsigned workersPerTile = 1;
  // Tiles that compute at the same time: all of them on an IPU, the threads on a host.
  unsigned parallelTiles = 1;
  double clockHz = 1.0;
  // Bytes a tile can receive per cycle; the cost of one sync (every compute
  // set and every exchange phase is a BSP superstep that ends in one) and the
  // fixed set-up of an exchange phase on top of its sync. Sources: docs/ipu.md.
  double exchangeBytesPerCycle = 1.0;
  unsigned syncCycles = 0;
  unsigned exchangeOverheadCycles = 0;
  // Elements per vector op and cycles per vector step of the inner loops.
  unsigned floatVectorWidth = 1;
  unsigned halfVectorWidth = 1;
  // Neurons per tile are a multiple of this (alignment of vector loads).
  unsigned neuronGrain = 1;

  bool isIpu() const { return kind == TargetKind::Ipu2; }
  unsigned vectorWidth(unsigned weightBytes) const {
    return weightBytes == 2 ? halfVectorWidth : floatVectorWidth;
  }
};

// The host's L2 per core (2 MiB where the system does not say).
std::uint64_t hostL2Bytes();

// Mk2 GC200: 1472 tiles x 624 KiB, 6 workers, 1.33 GHz.
Target ipu2Target();
// The host CPU with `threads` worker threads (0: all hardware threads).
Target hostTarget(unsigned threads);
// "ipu2" or "host"; throws std::invalid_argument for anything else.
Target targetByName(const std::string &name, unsigned threads);

} // namespace plan
} // namespace snn
