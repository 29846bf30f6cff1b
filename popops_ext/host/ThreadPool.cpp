#include "ThreadPool.hpp"

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

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto &w : workers_)
    w.join();
}

void ThreadPool::ensureWorkers(unsigned count) {
  while (workers_.size() < count) {
    const unsigned index = unsigned(workers_.size()) + 1;
    workers_.emplace_back([this, index] { workerLoop(index); });
  }
}

void ThreadPool::runJob(unsigned index) {
  try {
    (*job_)(index);
  } catch (...) {
    aborted_.store(true);
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_)
      error_ = std::current_exception();
  }
}

void ThreadPool::workerLoop(unsigned index) {
  unsigned long seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_)
        return;
      seen = generation_;
      if (index >= activeThreads_)
        continue;
    }
    runJob(index);
    std::lock_guard<std::mutex> lock(mutex_);
    if (--pending_ == 0)
      done_.notify_one();
  }
}

void ThreadPool::run(unsigned numThreads, const std::function<void(unsigned)> &job) {
  if (numThreads == 0)
    numThreads = 1;
  std::lock_guard<std::mutex> runLock(runMutex_);
  if (numThreads == 1) {
    activeThreads_ = 1;
    job(0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ensureWorkers(numThreads - 1);
    job_ = &job;
    activeThreads_ = numThreads;
    pending_ = numThreads - 1;
    error_ = nullptr;
    barrierArrived_.store(0);
    aborted_.store(false);
    ++generation_;
  }
  wake_.notify_all();
  runJob(0);
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });
    job_ = nullptr;
    error = error_;
  }
  if (error)
    std::rethrow_exception(error);
}

void ThreadPool::barrier() {
  const unsigned n = activeThreads_;
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
