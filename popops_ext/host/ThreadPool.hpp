// Runs the host executor's parallel work on the OpenMP thread team that
// PyTorch itself uses. A second pool of our own would compete for the same
// cores with the OpenMP workers that keep spinning after each torch op; on a
// 2-core machine that cost more than a third of a training step. A job runs
// on a fixed number of threads (the calling thread is thread 0) and may use
// barrier() to separate the timesteps of a recurrent layer. Work partitions
// are decided by the callers from the team size and never depend on timing,
// so results are the same for any thread count.
#pragma once
#include <atomic>
#include <exception>
#include <functional>
#include <mutex>

namespace snn {

class ThreadPool {
public:
  static ThreadPool &instance();

  // Runs job(thread, teamSize) on up to numThreads threads and returns when all
  // are done; rethrows the first exception a thread raised. The team can be
  // smaller than asked for (OpenMP limits, or a call from inside a parallel
  // region runs on one thread), so jobs partition their work by teamSize.
  void run(unsigned numThreads, const std::function<void(unsigned, unsigned)> &job);

  // Waits for all threads of the running job (returns early once one has thrown).
  void barrier();

private:
  ThreadPool() = default;

  std::mutex runMutex_; // one job at a time: the barrier state is shared
  std::mutex errorMutex_;
  std::exception_ptr error_;
  unsigned teamSize_ = 1;
  // Set when a thread of the job threw, so that no thread waits for it at a barrier.
  std::atomic<bool> aborted_{false};
  std::atomic<unsigned> barrierArrived_{0};
  std::atomic<unsigned> barrierGeneration_{0};
};

unsigned hardwareThreads();

} // namespace snn
