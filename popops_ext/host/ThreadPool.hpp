// A persistent pool of worker threads for the host executor. A job runs on a
// fixed number of threads (the calling thread is thread 0) and may use
// barrier() to separate the timesteps of a recurrent layer. Work partitions
// are decided by the callers and never depend on timing, so results are the
// same for any thread count.
#pragma once
#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace snn {

class ThreadPool {
public:
  static ThreadPool &instance();
  ~ThreadPool();

  // Runs job(threadIndex) on numThreads threads and returns when all are done;
  // rethrows the first exception a thread raised.
  void run(unsigned numThreads, const std::function<void(unsigned)> &job);

  // Waits for all threads of the running job (returns early once one has thrown).
  void barrier();

private:
  ThreadPool() = default;
  void workerLoop(unsigned index);
  void ensureWorkers(unsigned count);
  void runJob(unsigned index);

  std::mutex runMutex_; // one job at a time
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  const std::function<void(unsigned)> *job_ = nullptr;
  unsigned activeThreads_ = 0;
  unsigned long generation_ = 0;
  unsigned pending_ = 0;
  bool stopping_ = false;
  std::exception_ptr error_;

  // Set when a thread of the job threw, so that no thread waits for it at a barrier.
  std::atomic<bool> aborted_{false};
  std::atomic<unsigned> barrierArrived_{0};
  std::atomic<unsigned> barrierGeneration_{0};
};

unsigned hardwareThreads();

} // namespace snn
