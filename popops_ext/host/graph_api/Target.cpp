// The host's IPU targets, described by the planner's numbers.
#include <poplar/Target.hpp>
#include <poplar/exceptions.hpp>

#include "Model.hpp"
#include "plan/Target.hpp"

namespace poplar {

Target Target::createIPUTarget(unsigned numIPUs, StringRef systemType, const OptionFlags &) {
  if (systemType.str() != "ipu2")
    throw poplar_error("the host implements the 'ipu2' target only, not '" + systemType.str() +
                       "'");
  if (numIPUs != 1)
    throw poplar_error("the host implements single-IPU targets only (asked for " +
                       std::to_string(numIPUs) + ")");
  const snn::plan::Target plan = snn::plan::ipu2Target();
  Target t;
  t.system_ = systemType;
  t.numIPUs_ = numIPUs;
  t.tilesPerIPU_ = plan.numTiles;
  t.bytesPerTile_ = plan.bytesPerTile;
  t.workers_ = plan.workersPerTile;
  t.clockHz_ = plan.clockHz;
  return t;
}

unsigned Target::getTypeSize(const Type &type) const { return snn::hostgraph::typeSize(type); }

} // namespace poplar
