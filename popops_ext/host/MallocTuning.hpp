// glibc's malloc thresholds for the executor's large per-call buffers.
#pragma once

namespace snn {
void tuneMalloc();
} // namespace snn
