// Host implementation of poplar/Device.hpp. The host runs graphs without a
// device (an Engine runs on the CPU); poputil/Util.hpp includes this header,
// and a declaration of the class is all any of the SDK headers we compile need.
#pragma once

#include <poplar/Target.hpp>

namespace poplar {

class Device;

} // namespace poplar
