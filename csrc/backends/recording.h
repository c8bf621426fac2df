// A command buffer that records commands for a queue that runs or encodes them when it is
// committed: the vulkan and metal backends turn the recording into their own command buffers
// on their submit threads, the cpu backend runs it. `Where` says how a recorded command keeps
// a buffer: InHeap<HeapT> (the backend's heap and an offset: the GPU queues) or a host address
// (the cpu backend: Where::ptr resolves the offset, and off() is 0).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "backends/backend.h"

namespace mpsrt::backend {

/// The fill pattern of `size` bytes (1, 2, 4 or 8) repeated over 64 bits.
inline uint64_t replicate_pattern(uint64_t pattern, unsigned size) noexcept {
  switch (size) {
    case 1:
      return (pattern & 0xff) * 0x0101010101010101ULL;
    case 2:
      return (pattern & 0xffff) * 0x0001000100010001ULL;
    case 4:
      return (pattern & 0xffffffffULL) * 0x0000000100000001ULL;
    default:
      return pattern;
  }
}

/// Where<HeapT> for the GPU queues: a recorded buffer is its heap and an offset into it.
template <class HeapT>
struct InHeap {
  using Ptr = HeapT*;
  static Ptr ptr(BufferRef r) noexcept { return static_cast<HeapT*>(r.heap); }
  static size_t off(BufferRef r) noexcept { return r.offset; }
};

template <class Where>
struct RecordedCmd {
  enum Kind : uint8_t { kFill, kCopy, kCallback, kSignal, kWait, kTimestamp, kRandom, kDispatch };
  explicit RecordedCmd(Kind k) : kind(k) {}
  Kind kind;
  typename Where::Ptr dst = nullptr;
  typename Where::Ptr src = nullptr;
  size_t dst_off = 0;  // Where::off: 0 where Ptr is an address
  size_t src_off = 0;
  size_t n = 0;
  uint64_t value = 0;  // fill pattern (replicated) / event value
  TimelineEvent* event = nullptr;
  uint64_t* out = nullptr;
  std::function<void()> fn;
  std::unique_ptr<RandomParams> random;  // kRandom only
  const KernelLaunch* launch = nullptr;  // kDispatch only: in the recorder's launch arena
};

/// Records every command of the CommandBuffer interface into `cmds`, in order.
template <class Where>
class Recorder : public CommandBuffer {
 public:
  using Cmd = RecordedCmd<Where>;

  void fill(BufferRef dst, size_t nbytes, uint64_t pattern, unsigned pattern_size) override {
    Cmd c(Cmd::kFill);
    c.dst = Where::ptr(dst);
    c.dst_off = Where::off(dst);
    c.n = nbytes;
    c.value = replicate_pattern(pattern, pattern_size);
    cmds.push_back(std::move(c));
  }
  void copy(BufferRef src, BufferRef dst, size_t nbytes) override {
    Cmd c(Cmd::kCopy);
    c.src = Where::ptr(src);
    c.src_off = Where::off(src);
    c.dst = Where::ptr(dst);
    c.dst_off = Where::off(dst);
    c.n = nbytes;
    cmds.push_back(std::move(c));
  }
  void host_callback(std::function<void()> fn) override {
    Cmd c(Cmd::kCallback);
    c.fn = std::move(fn);
    cmds.push_back(std::move(c));
  }
  void signal(TimelineEvent& e, uint64_t v) override { push_event(Cmd::kSignal, e, v); }
  void wait(TimelineEvent& e, uint64_t v) override { push_event(Cmd::kWait, e, v); }
  void random(BufferRef dst, const RandomParams& p) override {
    Cmd c(Cmd::kRandom);
    c.dst = Where::ptr(dst);
    c.dst_off = Where::off(dst);
    c.random = std::make_unique<RandomParams>(p);
    cmds.push_back(std::move(c));
  }
  // Cost: a copy of the launch into the arena (no allocation once the arena has grown to the
  // recording's size: a recycled recorder keeps it).
  void dispatch(const KernelLaunch& k) override {
    Cmd c(Cmd::kDispatch);
    c.launch = launches_.add(k);
    cmds.push_back(std::move(c));
  }
  void timestamp(uint64_t* out) override {
    Cmd c(Cmd::kTimestamp);
    c.out = out;
    cmds.push_back(std::move(c));
  }
  size_t size() const noexcept override { return cmds.size(); }

  /// Drops the commands (and what they hold), keeping the storage for the next recording.
  void reset() noexcept {
    cmds.clear();
    launches_.clear();
  }

  std::vector<Cmd> cmds;

 private:
  // Kernel launches, in chunks whose addresses stay put while more are added (a command points
  // at its launch); clear() keeps the chunks.
  class LaunchArena {
   public:
    const KernelLaunch* add(const KernelLaunch& k) {
      const size_t chunk = used_ / kChunk;
      if (chunk == chunks_.size()) chunks_.push_back(std::make_unique<KernelLaunch[]>(kChunk));
      KernelLaunch* slot = &chunks_[chunk][used_ % kChunk];
      *slot = k;
      ++used_;
      return slot;
    }
    void clear() noexcept { used_ = 0; }

   private:
    static constexpr size_t kChunk = 32;
    std::vector<std::unique_ptr<KernelLaunch[]>> chunks_;
    size_t used_ = 0;
  };
  LaunchArena launches_;

  void push_event(typename Cmd::Kind k, TimelineEvent& e, uint64_t v) {
    Cmd c(k);
    c.event = &e;
    c.value = v;
    cmds.push_back(std::move(c));
  }
};

/// The GPU queues' command buffer.
template <class HeapT>
using RecordingCommandBuffer = Recorder<InHeap<HeapT>>;

}  // namespace mpsrt::backend
