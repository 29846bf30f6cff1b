// Host implementation of poplar/Target.hpp: the device a graph is built for.
// createIPUTarget(1, "ipu2") describes a Mk2 GC200 with the numbers the
// planner uses (popops_ext/plan/Target.cpp), so that graph and plan agree.
#pragma once

#include <cstdint>
#include <string>

#include <poplar/OptionFlags.hpp>
#include <poplar/StringRef.hpp>
#include <poplar/Type.hpp>

namespace poplar {

enum class TargetType { IPU, IPU_MODEL, CPU };

class Target {
public:
  Target() = default;
  static Target createIPUTarget(unsigned numIPUs, StringRef systemType,
                                const OptionFlags &opts = {});

  TargetType getTargetType() const { return TargetType::IPU; }
  const std::string &getTargetSystemString() const { return system_; }
  unsigned getNumIPUs() const { return numIPUs_; }
  unsigned getTilesPerIPU() const { return tilesPerIPU_; }
  unsigned getNumTiles() const { return numIPUs_ * tilesPerIPU_; }
  std::uint64_t getBytesPerTile() const { return bytesPerTile_; }
  unsigned getNumWorkerContexts() const { return workers_; }
  double getTileClockFrequency() const { return clockHz_; }
  unsigned getDataPathWidth() const { return 64; } // bits per vector load
  unsigned getTypeSize(const Type &type) const;
  unsigned getVectorWidth(const Type &type) const { return getDataPathWidth() / 8 / getTypeSize(type); }
  unsigned getAtomicStoreGranularity() const { return 4; }

private:
  std::string system_;
  unsigned numIPUs_ = 0, tilesPerIPU_ = 0, workers_ = 0;
  std::uint64_t bytesPerTile_ = 0;
  double clockHz_ = 0;
};

} // namespace poplar
