#include "MallocTuning.hpp"

#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace snn {

// Every layer call allocates a few MB of short-lived buffers and outputs
// (tile lists, weight blocks, [T, B, K] arrays). With glibc's defaults those
// are fresh mmaps, and first-touch page faults cost as much as the kernels at
// low activity; keep them on the heap for reuse. Skipped when the user tuned
// malloc through the environment or set SNN_IPU_KEEP_MALLOC.
void tuneMalloc() {
#if defined(__GLIBC__)
  if (std::getenv("SNN_IPU_KEEP_MALLOC") || std::getenv("MALLOC_MMAP_THRESHOLD_") ||
      std::getenv("MALLOC_TRIM_THRESHOLD_"))
    return;
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
}

} // namespace snn
