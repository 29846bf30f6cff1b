#include "plan/Target.hpp"

#include <algorithm>
#include <stdexcept>
#include <thread>
#include <unistd.h>

namespace snn {
namespace plan {

namespace {

constexpr std::uint64_t KiB = 1024;
constexpr std::uint64_t MiB = 1024 * KiB;
// A host tile's footprint (hostTarget): the L2, and no less than kMinTileBytes;
// kSmallL2TileBytes where the L2 is below kSmallL2Bytes.
constexpr std::uint64_t kMinTileBytes = 2 * MiB;
constexpr std::uint64_t kSmallL2Bytes = 1 * MiB;
constexpr std::uint64_t kSmallL2TileBytes = 4 * MiB;

std::uint64_t detectL2Bytes() {
#ifdef _SC_LEVEL2_CACHE_SIZE
  long bytes = sysconf(_SC_LEVEL2_CACHE_SIZE);
  if (bytes > 0)
    return static_cast<std::uint64_t>(bytes);
#endif
  return 2 * MiB; // common per-core L2 of current server parts
}

std::uint64_t detectPhysicalBytes() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long pageSize = sysconf(_SC_PAGESIZE);
  if (pages > 0 && pageSize > 0)
    return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(pageSize);
  return 8192 * MiB;
}

} // namespace

std::uint64_t hostL2Bytes() {
  static const std::uint64_t bytes = detectL2Bytes();
  return bytes;
}

Target ipu2Target() {
  Target t;
  t.kind = TargetKind::Ipu2;
  t.name = "ipu2";
  t.numTiles = 1472;
  t.bytesPerTile = 624 * KiB;
  // A layer's ~11 codelets, their vertex descriptors and the control and
  // exchange code of the time loop. No public source gives a figure for such a
  // graph: an estimate (docs/ipu.md shows what the fit depends on it).
  t.reservedBytesPerTile = 32 * KiB;
  t.totalMemoryBytes = t.bytesPerTile * t.numTiles;
  t.workersPerTile = 6;
  t.parallelTiles = t.numTiles;
  t.clockHz = 1.33e9;
  // GC200 quotes 7.8 TB/s of exchange across 1472 tiles at 1.33 GHz, i.e.
  // 7.8e12 / (1472 * 1.33e9) = 3.98: one 32-bit word per tile per cycle
  // (Jia et al. 2019 measured the Mk1's aggregate exchange close to its own
  // peak of the same 4 bytes per tile per cycle; docs/ipu.md).
  t.exchangeBytesPerCycle = 4.0;
  // poplibs' own time-loop planner (lib/popnn/CTCLossPlan.cpp, SDK 3.4) costs
  // a sync at 90 cycles and an exchange phase's fixed overhead at 100.
  t.syncCycles = 90;
  t.exchangeOverheadCycles = 100;
  // 64-bit loads: 2 floats or 4 halves per vector op.
  t.floatVectorWidth = 2;
  t.halfVectorWidth = 4;
  // The codelets process neurons in 8-float chunks (codelets/RowKernels.hpp);
  // other counts would pay for padding.
  t.neuronGrain = 8;
  return t;
}

Target hostTarget(unsigned threads) {
  if (threads == 0)
    threads = std::max(1u, std::thread::hardware_concurrency());
  Target t;
  t.kind = TargetKind::Host;
  t.name = "host";
  t.numTiles = 0;
  // A work item's weight block (Planner.cpp's host plan). Measured on the
  // 2312-1466-1466 layers: with a 2 MB L2 (Intel, AVX-512) blocks of the L2 ran
  // 1.2-1.5x faster than half of it and level with 1 MB, and 4 MB ran 1.06-1.15x
  // slower: there the blocks live in L2. With a 512 KB L2 beside a large L3 (AMD
  // EPYC) no block worth its per-row work fits the L2, the rows stream from L3
  // whatever the width, and wider tiles pay each spike's row add, and each row's
  // fixed work, for more neurons: 2 MB took 0.87-0.93 of the step that tiles of
  // the L2 took at 1-2% activity, and 4 MB another 0.96-0.99 at 1-10% (1.03x at
  // 29%, where the lists and gradient blocks that grow with activity take the
  // cache).
  const std::uint64_t l2 = hostL2Bytes();
  t.bytesPerTile = l2 < kSmallL2Bytes ? kSmallL2TileBytes : std::max(l2, kMinTileBytes);
  t.reservedBytesPerTile = 0;
  // Leave half of RAM to Python, PyTorch and the data pipeline.
  t.totalMemoryBytes = detectPhysicalBytes() / 2;
  t.workersPerTile = 1;
  t.parallelTiles = threads;
  t.clockHz = 3.0e9; // nominal; only used to turn cycles into seconds
  // A tile "receives" by reading shared buffers from L3: ~16 B/cycle per core.
  t.exchangeBytesPerCycle = 16.0;
  // A thread-pool barrier costs about a microsecond.
  t.syncCycles = 3000;
  // 256-bit AVX2: 8 floats, and halves are widened to 8 floats.
  t.floatVectorWidth = 8;
  t.halfVectorWidth = 8;
  t.neuronGrain = 8;
  return t;
}

Target targetByName(const std::string &name, unsigned threads) {
  if (name == "ipu2" || name == "ipu")
    return ipu2Target();
  if (name == "host" || name == "cpu")
    return hostTarget(threads);
  throw std::invalid_argument("unknown target '" + name + "': expected 'ipu2' or 'host'");
}

} // namespace plan
} // namespace snn
