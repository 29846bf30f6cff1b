// std::vector whose growth leaves new elements uninitialised, for buffers
// that are written before they are read (no zero-fill pass).
#pragma once
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace snn {

// Leaves new elements uninitialised: list buffers are written before read.
template <typename T> struct NoInitAllocator : std::allocator<T> {
  template <typename U> struct rebind { using other = NoInitAllocator<U>; };
  NoInitAllocator() = default;
  template <typename U> NoInitAllocator(const NoInitAllocator<U> &) {}
  template <typename U> void construct(U *p) noexcept { ::new (static_cast<void *>(p)) U; }
  template <typename U, typename... Args> void construct(U *p, Args &&...args) {
    ::new (static_cast<void *>(p)) U(std::forward<Args>(args)...);
  }
};
template <typename T> using RawVector = std::vector<T, NoInitAllocator<T>>;

} // namespace snn
