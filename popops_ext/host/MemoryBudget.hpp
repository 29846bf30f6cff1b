// The memory a layer call may take for the buffers that grow with its
// activity (the tiles' list histories) and for its [T x B x K] outputs,
// whose size is only known once the lists exist. Past the budget a call
// throws MemoryBudgetExceeded (a Python MemoryError) instead of letting the
// kernel's OOM killer end the process. The budget is what the machine has
// free when the call starts (snn_ipu/_memory.py); 0 means no limit.
#pragma once
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace snn {

class MemoryBudgetExceeded : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

class MemoryBudget {
public:
  explicit MemoryBudget(std::uint64_t limit = 0) : limit_(limit) {}

  // A budget with no limit, for callers that set none.
  static MemoryBudget &unlimited() {
    static MemoryBudget none;
    return none;
  }

  // Counts `bytes` more against the budget; throws when they do not fit.
  void take(std::uint64_t bytes, const char *what) {
    const std::uint64_t used = used_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    if (limit_ != 0 && used > limit_)
      throw MemoryBudgetExceeded(std::string(what) + " need " + gib(used) +
                                 " of memory, more than the " + gib(limit_) + " available");
  }

private:
  static std::string gib(std::uint64_t bytes) {
    const double g = double(bytes) / double(1ull << 30);
    char text[32];
    std::snprintf(text, sizeof text, "%.2f GiB", g);
    return text;
  }

  std::uint64_t limit_;
  std::atomic<std::uint64_t> used_{0};
};

} // namespace snn
