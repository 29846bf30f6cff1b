#include "ThreadPool.hpp"

#include <thread>

#include <omp.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace snn {

unsigned hardwareThreads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : n;
}

ThreadPool &ThreadPool::instance() {
  static ThreadPool pool;
  return pool;
}

void ThreadPool::run(unsigned numThreads, const std::function<void(unsigned, unsigned)> &job) {
  std::lock_guard<std::mutex> runLock(runMutex_);
  error_ = nullptr;
  aborted_.store(false);
  barrierArrived_.store(0);
  if (numThreads <= 1 || omp_in_parallel()) {
    teamSize_ = 1;
    job(0, 1);
    return;
  }
#pragma omp parallel num_threads(numThreads)
  {
#pragma omp single
    teamSize_ = unsigned(omp_get_num_threads());
    // (the end of `single` is a barrier, so every thread sees teamSize_)
    try {
      job(unsigned(omp_get_thread_num()), teamSize_);
    } catch (...) {
      aborted_.store(true);
      std::lock_guard<std::mutex> lock(errorMutex_);
      if (!error_)
        error_ = std::current_exception();
    }
  }
  teamSize_ = 1;
  if (error_)
    std::rethrow_exception(error_);
}

void ThreadPool::barrier() {
  const unsigned n = teamSize_;
  if (n <= 1)
    return;
  const unsigned gen = barrierGeneration_.load(std::memory_order_acquire);
  if (barrierArrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == n) {
    barrierArrived_.store(0, std::memory_order_relaxed);
    barrierGeneration_.store(gen + 1, std::memory_order_release);
    return;
  }
  // Steps are short, so spin briefly before yielding the core.
  for (unsigned spins = 0;
       barrierGeneration_.load(std::memory_order_acquire) == gen && !aborted_.load();
       ++spins) {
#if defined(__x86_64__)
    if (spins < 4096) {
      _mm_pause();
      continue;
    }
#endif
    std::this_thread::yield();
  }
}

} // namespace snn
