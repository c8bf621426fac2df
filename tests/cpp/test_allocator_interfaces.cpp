// The caching allocator on its own: driven through a fake AllocDevice and fake AllocStreams
// (core/allocator/interfaces.h), with no runtime, DeviceContext or backend device. The fakes
// say exactly what the allocator asks of a device and a stream, and let the tests set a
// stream's fence and its completion by hand.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/allocator/caching_allocator.h"
#include "core/allocator/interfaces.h"
#include "mpsrt/error.h"

namespace {

using mpsrt::detail::AllocDevice;
using mpsrt::detail::AllocStream;
using mpsrt::detail::Block;
using mpsrt::detail::CachingAllocator;

constexpr size_t kMiB = size_t(1) << 20;

class FakeEvent final : public mpsrt::backend::TimelineEvent {
 public:
  void signal(uint64_t v) override {
    if (v > value_) value_ = v;
  }
  bool wait(uint64_t target, int64_t) override { return value_ >= target; }
  uint64_t value() const override { return value_; }

 private:
  uint64_t value_ = 0;
};

// A stream whose work is moved by hand: encode() leaves work open, commit() gives it the next
// fence value, complete() finishes everything committed.
class FakeStream final : public AllocStream {
 public:
  explicit FakeStream(int64_t id) : AllocStream(id), event_(std::make_unique<FakeEvent>()) {
    completed_ = event_.get();
  }
  void encode() { open_pending_.store(true); }
  void commit() {
    if (!open_pending_.load()) return;
    committed_.store(committed_.load() + 1);
    open_pending_.store(false);
  }
  void complete() { completed_->signal(committed_.load()); }
  int flushes = 0;

 private:
  std::unique_ptr<FakeEvent> event_;
};

class FakeHeap final : public mpsrt::backend::Heap {
 public:
  FakeHeap(size_t n, int* destroyed) : bytes_(n), destroyed_(destroyed) {}
  ~FakeHeap() override { ++*destroyed_; }
  size_t size() const noexcept override { return bytes_.size(); }
  void* host_ptr() const noexcept override { return const_cast<char*>(bytes_.data()); }

 private:
  std::vector<char> bytes_;
  int* destroyed_;
};

class FakeDevice final : public AllocDevice {
 public:
  int index() const noexcept override { return 3; }
  uint64_t recommended_max_memory() const noexcept override { return uint64_t(1) << 30; }
  uint64_t max_buffer_size() const noexcept override { return 256 * kMiB; }
  std::unique_ptr<mpsrt::backend::Heap> create_heap(size_t nbytes) override {
    if (refuse) return nullptr;
    ++heaps_created;
    return std::make_unique<FakeHeap>(nbytes, &heaps_destroyed);
  }
  void wait_idle() override {
    ++wait_idles;
    for (FakeStream* s : streams) {
      s->commit();
      s->complete();
    }
  }
  void flush_streams() override {
    for (FakeStream* s : streams) {
      s->commit();
      ++s->flushes;
    }
  }
  bool stale() const noexcept override { return false; }

  std::vector<FakeStream*> streams;
  bool refuse = false;
  int heaps_created = 0;
  int heaps_destroyed = 0;
  int wait_idles = 0;
};

struct Pool {
  FakeDevice device;
  FakeStream a{1};
  FakeStream b{2};
  CachingAllocator alloc{device, /*high_ratio=*/0.0, /*low_ratio=*/0.0};
  Pool() { device.streams = {&a, &b}; }
};

TEST(AllocatorInterfaces, AMissMakesAHeapFromTheDeviceAndTheBlockRecordsItsStream) {
  Pool p;
  Block* x = p.alloc.allocate(1000, p.a);
  EXPECT_EQ(p.device.heaps_created, 1);
  EXPECT_EQ(x->size, 1024u);
  EXPECT_EQ(x->heap->size, 8 * kMiB);  // a small heap
  EXPECT_EQ(x->stream, &p.a);
  EXPECT_EQ(p.alloc.reserved_bytes(), 8 * kMiB);
  Block* y = p.alloc.allocate(1000, p.a);  // fits the same heap
  EXPECT_EQ(p.device.heaps_created, 1);
  EXPECT_EQ(y->heap, x->heap);
  p.alloc.free(x);
  p.alloc.free(y);
}

TEST(AllocatorInterfaces, ABlockFreedOnAStreamIsReusedThereAtOnce) {
  Pool p;
  Block* x = p.alloc.allocate(4096, p.a);
  const uint64_t at = x->address();
  p.a.encode();  // work on the block, not complete
  p.alloc.free(x);
  Block* y = p.alloc.allocate(4096, p.a);
  EXPECT_EQ(y->address(), at);
  p.alloc.free(y);
}

TEST(AllocatorInterfaces, ABlockFreedOnStreamAWaitsForAsFenceBeforeStreamBReusesIt) {
  Pool p;
  Block* x = p.alloc.allocate(4096, p.a);
  const uint64_t at = x->address();
  p.a.encode();
  p.alloc.free(x);  // fence: a's open work, value 1
  ASSERT_EQ(x->fences.size(), 1u);
  EXPECT_EQ(x->fences[0].stream, &p.a);
  EXPECT_EQ(x->fences[0].value, 1u);

  Block* y = p.alloc.allocate(4096, p.b);
  EXPECT_NE(y->address(), at);  // a's work may still use it
  p.a.commit();
  Block* z = p.alloc.allocate(4096, p.b);
  EXPECT_NE(z->address(), at);  // committed, not complete
  p.a.complete();
  Block* w = p.alloc.allocate(4096, p.b);
  EXPECT_EQ(w->address(), at);  // a's fence reached
  EXPECT_EQ(p.device.heaps_created, 1);
  p.alloc.free(y);
  p.alloc.free(z);
  p.alloc.free(w);
}

TEST(AllocatorInterfaces, RecordStreamAddsTheOtherStreamsFence) {
  Pool p;
  Block* x = p.alloc.allocate(4096, p.a);
  Block* keep = p.alloc.allocate(4096, p.a);  // x does not merge with the heap's free rest
  const uint64_t at = x->address();
  p.alloc.record_stream(x, p.b);
  p.b.encode();
  p.alloc.free(x);
  ASSERT_EQ(x->fences.size(), 2u);
  Block* y = p.alloc.allocate(4096, p.a);  // b's work is not complete: not even on a
  EXPECT_NE(y->address(), at);
  p.b.commit();
  p.b.complete();
  Block* z = p.alloc.allocate(4096, p.a);
  EXPECT_EQ(z->address(), at);
  EXPECT_EQ(p.device.heaps_created, 1);
  p.alloc.free(y);
  p.alloc.free(z);
  p.alloc.free(keep);
}

TEST(AllocatorInterfaces, EmptyCacheFlushesTheStreamsAndReturnsHeapsWhoseFencesAreReached) {
  Pool p;
  Block* x = p.alloc.allocate(2 * kMiB, p.a);  // large pool: a 32 MiB heap
  EXPECT_EQ(x->heap->size, 32 * kMiB);
  p.a.encode();
  p.alloc.free(x);
  p.alloc.empty_cache();
  EXPECT_EQ(p.a.flushes, 1);
  EXPECT_EQ(p.b.flushes, 1);
  EXPECT_EQ(p.device.heaps_destroyed, 0);  // a's work is committed, not complete
  EXPECT_EQ(p.alloc.reserved_bytes(), 32 * kMiB);
  p.a.complete();
  p.alloc.empty_cache();
  EXPECT_EQ(p.device.heaps_destroyed, 1);
  EXPECT_EQ(p.alloc.reserved_bytes(), 0u);
}

TEST(AllocatorInterfaces, TheLadderWaitsForTheDeviceThenRaisesWithItsIndex) {
  Pool p;
  Block* x = p.alloc.allocate(4096, p.a);
  p.a.encode();
  p.alloc.free(x);
  p.device.refuse = true;
  // Stream b cannot reuse a's block until the device is idle: the ladder waits for it.
  Block* y = p.alloc.allocate(4096, p.b);
  EXPECT_EQ(p.device.wait_idles, 0);  // the rest of the first heap serves it
  p.alloc.free(y);
  try {
    p.alloc.allocate(64 * kMiB, p.b);
    FAIL() << "expected OutOfMemory";
  } catch (const mpsrt::OutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find("out of memory on device 3"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(p.device.wait_idles, 1);
  try {
    p.alloc.allocate(512 * kMiB, p.b);
    FAIL() << "expected OutOfMemory";
  } catch (const mpsrt::OutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find("on device 3: larger than the device's max_buffer_size"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
