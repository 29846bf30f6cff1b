// Host implementation of the part of poplar/Quarter.hpp that poplibs' headers
// name: the 8-bit float formats. The host has no QUARTER tensors.
#pragma once

namespace poplar {

class QuarterMetadata {
public:
  enum class Format { F143, F152 };
};

} // namespace poplar
