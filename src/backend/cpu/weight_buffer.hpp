#pragma once
// Storage for a CPU runner's weights: std::vector with an allocator that
// (1) does not zero-fill (every element is written by the checkpoint copy
// right after), and (2) puts large buffers in their own anonymous mapping,
// 2 MiB aligned and advised for transparent huge pages. Loading then takes
// one page fault per 2 MiB instead of per 4 KiB, decode streams the weights
// with 512 times fewer TLB entries, and unloading gives the memory straight
// back to the system (munmap) whatever the allocator's thresholds.
#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <vector>

#include "util/sanitizers.hpp"

namespace neuron::backend::cpu {

namespace weight_memory {

inline constexpr std::size_t kHugePage = std::size_t{2} << 20;

// Buffers this large get their own mapping; smaller ones come from malloc.
inline constexpr std::size_t kMapThreshold = kHugePage;

inline std::size_t mapped_size(std::size_t bytes) { return (bytes + kHugePage - 1) / kHugePage * kHugePage; }

// Maps mapped_size(bytes) at a 2 MiB boundary; throws std::bad_alloc.
inline void* map(std::size_t bytes) {
  const std::size_t size = mapped_size(bytes);
  void* raw = ::mmap(nullptr, size + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  // Trim the slack so exactly [aligned, aligned + size) stays mapped.
  const auto begin = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = (begin + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > begin) ::munmap(raw, aligned - begin);
  const std::uintptr_t tail = begin + size + kHugePage - (aligned + size);
  if (tail > 0) ::munmap(reinterpret_cast<void*>(aligned + size), tail);
  ::madvise(reinterpret_cast<void*>(aligned), size, MADV_HUGEPAGE);  // a hint; fine to fail
  return reinterpret_cast<void*>(aligned);
}

inline void unmap(void* p, std::size_t bytes) noexcept { ::munmap(p, mapped_size(bytes)); }

}  // namespace weight_memory

template <class T>
struct WeightAllocator {
  using value_type = T;

  WeightAllocator() noexcept = default;
  template <class U>
  WeightAllocator(const WeightAllocator<U>&) noexcept {}

  T* allocate(std::size_t n) {
#if !NEURON_ASAN  // under ASan, malloc'd buffers keep their bounds checked
    if (const std::size_t bytes = n * sizeof(T); bytes >= weight_memory::kMapThreshold) return static_cast<T*>(weight_memory::map(bytes));
#endif
    return std::allocator<T>{}.allocate(n);
  }
  void deallocate(T* p, std::size_t n) noexcept {
#if !NEURON_ASAN
    if (const std::size_t bytes = n * sizeof(T); bytes >= weight_memory::kMapThreshold) return weight_memory::unmap(p, bytes);
#endif
    std::allocator<T>{}.deallocate(p, n);
  }
  // Default-initialisation: trivial elements are left as they are (no zero pass).
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }

  template <class U>
  bool operator==(const WeightAllocator<U>&) const noexcept {
    return true;
  }
};

// [n] elements whose values are written after allocation (weights).
template <class T>
using WeightVector = std::vector<T, WeightAllocator<T>>;

}  // namespace neuron::backend::cpu
