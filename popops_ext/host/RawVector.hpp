// Host buffers of the executor: cache-line aligned, so the kernels' 8-float
// vector loads of weight rows never straddle two lines (a 32-byte load at a
// 16-byte offset splits every other time: measured 15-30% slower row adds).
#pragma once
#include <cstddef>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace snn {

constexpr std::size_t kCacheLine = 64;

template <typename T> struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() = default;
  template <typename U> AlignedAllocator(const AlignedAllocator<U> &) {}
  T *allocate(std::size_t n) {
    return static_cast<T *>(::operator new(n * sizeof(T), std::align_val_t(kCacheLine)));
  }
  void deallocate(T *p, std::size_t) noexcept {
    ::operator delete(p, std::align_val_t(kCacheLine));
  }
  template <typename U> bool operator==(const AlignedAllocator<U> &) const { return true; }
  template <typename U> bool operator!=(const AlignedAllocator<U> &) const { return false; }
};

// Also leaves new elements uninitialised: for buffers written before read.
template <typename T> struct NoInitAllocator : AlignedAllocator<T> {
  template <typename U> struct rebind { using other = NoInitAllocator<U>; };
  NoInitAllocator() = default;
  template <typename U> NoInitAllocator(const NoInitAllocator<U> &) {}
  template <typename U> void construct(U *p) noexcept { ::new (static_cast<void *>(p)) U; }
  template <typename U, typename... Args> void construct(U *p, Args &&...args) {
    ::new (static_cast<void *>(p)) U(std::forward<Args>(args)...);
  }
};

template <typename T> using AlignedVector = std::vector<T, AlignedAllocator<T>>;
template <typename T> using RawVector = std::vector<T, NoInitAllocator<T>>;

} // namespace snn
