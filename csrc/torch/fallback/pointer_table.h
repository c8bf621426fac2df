// A map from pointers to values that takes no lock where it can: what the glue's capturing CPU
// allocator (fallback.cpp) keeps of each allocation it makes in mpsrt memory, put in by the
// allocation and taken out once, when the memory is handed over as an output or freed, on any
// thread. Only torch-free standard C++ here: the C++ tests include it.
//
// An open-addressed table of kSlots keys and values (linear probing, at most kProbe slots from
// a key's hash): a key goes into the first empty or freed slot of its probe window (compare-
// and-swap), and is taken out by marking its slot freed. A slot never becomes empty again, so
// a look-up that stops at an empty slot has passed every slot its key could be in. Where the
// window has no room, the key goes to a map under a mutex, which a look-up that misses the
// window asks too. A key is put in once and taken out once (no two live entries share one);
// whoever takes it out does so after its put() returned (the pointer was handed on), so the
// value it reads is the one put in.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace mpsrt::torch_glue {

template <class V, size_t kSlots, size_t kProbe>
class PointerTable {
  static_assert(kSlots > 0 && (kSlots & (kSlots - 1)) == 0, "kSlots is a power of two");
  static_assert(kProbe > 0 && kProbe <= kSlots, "a probe window fits the table");

 public:
  // Puts p (neither null nor 1, which mark slots) with its value.
  void put(void* p, V* value) {
    const auto key = reinterpret_cast<uintptr_t>(p);
    const size_t h = hash(key);
    for (size_t i = 0; i < kProbe; ++i) {
      Slot& s = slots_[(h + i) & (kSlots - 1)];
      uintptr_t k = s.key.load(std::memory_order_relaxed);
      if ((k == kEmpty || k == kFreed) &&
          s.key.compare_exchange_strong(k, key, std::memory_order_acq_rel)) {
        s.value.store(value, std::memory_order_release);
        return;
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    spill_.emplace(p, value);
  }

  // p's value, taken out; nullptr where p is not in the table.
  V* take(void* p) {
    const auto key = reinterpret_cast<uintptr_t>(p);
    const size_t h = hash(key);
    for (size_t i = 0; i < kProbe; ++i) {
      Slot& s = slots_[(h + i) & (kSlots - 1)];
      const uintptr_t k = s.key.load(std::memory_order_acquire);
      if (k == kEmpty) break;
      if (k == key) {
        V* value = s.value.load(std::memory_order_acquire);
        s.key.store(kFreed, std::memory_order_release);
        return value;
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = spill_.find(p);
    if (it == spill_.end()) return nullptr;
    V* value = it->second;
    spill_.erase(it);
    return value;
  }

  // The entries in the overflow map (for tests).
  size_t spilled() {
    std::lock_guard<std::mutex> lock(mu_);
    return spill_.size();
  }

 private:
  static constexpr uintptr_t kEmpty = 0;
  static constexpr uintptr_t kFreed = 1;  // no allocation's address
  struct Slot {
    std::atomic<uintptr_t> key{kEmpty};
    std::atomic<V*> value{nullptr};
  };
  // Allocations are at least 16-byte aligned: the low bits carry nothing.
  static size_t hash(uintptr_t key) {
    return static_cast<size_t>((static_cast<uint64_t>(key) >> 4) * 0x9E3779B97F4A7C15ull >> 32);
  }

  Slot slots_[kSlots];
  std::mutex mu_;
  std::unordered_map<void*, V*> spill_;
};

}  // namespace mpsrt::torch_glue
