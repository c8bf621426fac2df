// Tests of the backend interface (backends/backend.h). The TEST_P tests run on every backend
// that is built and available on this machine, so cpu, vulkan and metal meet the same
// contract; a few cpu-only facts are checked where the test says so.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/simd_ops.h"
#include "backends/vulkan/vulkan_backend.h"
#include "mpsrt/error.h"

namespace {

// How long a test waits for a signal that ends a command buffer (set after on_complete).
constexpr int64_t kSignalPatienceNs = 10'000'000'000;

namespace mb = mpsrt::backend;
using mpsrt::cpu::CpuConfig;
using namespace std::chrono_literals;

constexpr auto kTimeout = 10s;
constexpr uint8_t kGuard = 0xCC;                      // never a byte of a test pattern
constexpr uint64_t kPattern = 0x8877665544332211ULL;  // sizes 1/2/4 use its low bytes
constexpr size_t kMiB = size_t(1) << 20;

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A hang must not block the whole run: report and abort (ctest records the failure).
[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "FATAL: %s\n", msg.c_str());
  std::fflush(stderr);
  std::abort();
}

// Commits cb and returns a future of its completion.
std::future<mb::Completion> commit_async(mb::Queue& q, std::unique_ptr<mb::CommandBuffer> cb) {
  auto done = std::make_shared<std::promise<mb::Completion>>();
  std::future<mb::Completion> f = done->get_future();
  q.commit(std::move(cb), [done](const mb::Completion& c) { done->set_value(c); });
  return f;
}

mb::Completion wait_done(std::future<mb::Completion>& f) {
  if (f.wait_for(kTimeout) != std::future_status::ready) {
    die("a command buffer did not complete within 10 s");
  }
  return f.get();
}

// Commits cb and blocks until its completion callback has run; returns what it reported.
mb::Completion run(mb::Queue& q, std::unique_ptr<mb::CommandBuffer> cb) {
  std::future<mb::Completion> f = commit_async(q, std::move(cb));
  return wait_done(f);
}

::testing::AssertionResult bytes_equal(const uint8_t* got, const uint8_t* want, size_t n) {
  size_t bad = 0;
  size_t first = 0;
  for (size_t i = 0; i < n; ++i) {
    if (got[i] != want[i] && bad++ == 0) first = i;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << n << " bytes differ; the first at index " << first << ": got "
         << static_cast<int>(got[first]) << ", want " << static_cast<int>(want[first]);
}

::testing::AssertionResult all_bytes(const uint8_t* got, uint8_t want, size_t n) {
  std::vector<uint8_t> ref(n, want);
  return bytes_equal(got, ref.data(), n);
}

// The reference fill: byte i is byte (i % size) of the little-endian pattern.
void ref_fill(uint8_t* p, size_t n, uint64_t pattern, unsigned size) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(pattern >> (8 * (i % size)));
}

void random_bytes(uint8_t* p, size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(gen() >> 24);
}

std::vector<mb::Backend*> usable_backends() {
  std::vector<mb::Backend*> out;
  for (mb::Backend* b : mb::all_backends()) {
    if (b->is_built() && b->is_available()) out.push_back(b);
  }
  return out;
}

class BackendTest : public ::testing::TestWithParam<mb::Backend*> {
 protected:
  void SetUp() override {
    backend_ = GetParam();
    if (backend_ == &mb::cpu_backend()) mpsrt::cpu::configure(CpuConfig{});
    ASSERT_GE(backend_->device_count(), 1);
    device_ = backend_->open_device(0);
    ASSERT_NE(device_, nullptr);
  }
  void TearDown() override { device_.reset(); }

  bool is_cpu() const { return std::strcmp(backend_->name(), "cpu") == 0; }

  // A heap the test can read and write from the host, filled with kGuard.
  std::unique_ptr<mb::Heap> host_heap(size_t n) {
    std::unique_ptr<mb::Heap> h = device_->create_heap(n);
    if (!h || h->size() < n || h->host_ptr() == nullptr) die("create_heap failed");
    std::memset(h->host_ptr(), kGuard, h->size());
    return h;
  }
  static uint8_t* bytes(const mb::Heap& h) { return static_cast<uint8_t*>(h.host_ptr()); }

  mb::Backend* backend_ = nullptr;
  std::unique_ptr<mb::Device> device_;
};

// ---------------------------------------------------------------- devices

TEST_P(BackendTest, DeviceInfoIsSane) {
  EXPECT_TRUE(backend_->is_built());
  EXPECT_TRUE(backend_->is_available());
  EXPECT_EQ(backend_->unavailable_reason(), "");
  ASSERT_GE(backend_->device_count(), 1);
  for (int i = 0; i < backend_->device_count(); ++i) {
    std::unique_ptr<mb::Device> dev = i == 0 ? nullptr : backend_->open_device(i);
    const mb::DeviceInfo& info = (i == 0 ? *device_ : *dev).info();
    SCOPED_TRACE("device " + std::to_string(i) + ": " + info.name);
    EXPECT_FALSE(info.name.empty());
    EXPECT_GT(info.total_memory, 0u);
    EXPECT_GT(info.recommended_max_memory, 0u);
    EXPECT_LE(info.recommended_max_memory, info.total_memory);
    EXPECT_GT(info.max_buffer_size, 0u);
    EXPECT_GT(info.timestamp_period_ns, 0.0);
    if (is_cpu()) {
      EXPECT_TRUE(info.unified_memory);
      EXPECT_EQ(info.details,
                std::string("kernels=") + mpsrt::cpu::isa_name(mpsrt::cpu::best_isa()));
    }
  }
}

// ---------------------------------------------------------------- heaps

TEST_P(BackendTest, HeapIsHostVisibleAndAccountedExactly) {
  EXPECT_EQ(device_->driver_allocated_bytes(), 0u) << "a fresh device holds no heap";
  const uint64_t base = device_->driver_allocated_bytes();
  const size_t page = 4096;
  for (size_t n : {size_t(1), size_t(100), page - 1, page, page + 1, size_t(65537), 2 * kMiB - 1,
                   2 * kMiB, 2 * kMiB + 1, 5 * kMiB + 3}) {
    SCOPED_TRACE("requested " + std::to_string(n));
    std::unique_ptr<mb::Heap> h = device_->create_heap(n);
    ASSERT_NE(h, nullptr);
    EXPECT_GE(h->size(), n);
    ASSERT_NE(h->host_ptr(), nullptr);
    EXPECT_EQ(device_->driver_allocated_bytes(), base + h->size());
    uint8_t* p = bytes(*h);
    p[0] = 0x5A;
    p[h->size() - 1] = 0xA5;
    EXPECT_EQ(p[0], 0x5A);
    EXPECT_EQ(p[h->size() - 1], 0xA5);
    if (is_cpu()) {
      EXPECT_EQ(h->size() % page, 0u);
      if (n >= 2 * kMiB) {
        EXPECT_EQ(reinterpret_cast<uintptr_t>(h->host_ptr()) % (2 * kMiB), 0u);
        EXPECT_EQ(h->size() % (2 * kMiB), 0u);
      }
    }
    h.reset();
    EXPECT_EQ(device_->driver_allocated_bytes(), base);
  }
}

TEST_P(BackendTest, HeapAccountingWithSeveralLiveHeaps) {
  const uint64_t base = device_->driver_allocated_bytes();
  std::unique_ptr<mb::Heap> a = device_->create_heap(3 * kMiB);
  std::unique_ptr<mb::Heap> b = device_->create_heap(12345);
  std::unique_ptr<mb::Heap> c = device_->create_heap(kMiB);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(device_->driver_allocated_bytes(), base + a->size() + b->size() + c->size());
  // Distinct heaps do not overlap.
  auto lo = [](const mb::Heap& h) { return reinterpret_cast<uintptr_t>(h.host_ptr()); };
  auto disjoint = [&](const mb::Heap& x, const mb::Heap& y) {
    return lo(x) + x.size() <= lo(y) || lo(y) + y.size() <= lo(x);
  };
  EXPECT_TRUE(disjoint(*a, *b));
  EXPECT_TRUE(disjoint(*a, *c));
  EXPECT_TRUE(disjoint(*b, *c));
  const size_t bsize = b->size();
  a.reset();  // not in LIFO order
  EXPECT_EQ(device_->driver_allocated_bytes(), base + bsize + c->size());
  c.reset();
  EXPECT_EQ(device_->driver_allocated_bytes(), base + bsize);
  b.reset();
  EXPECT_EQ(device_->driver_allocated_bytes(), base);
}

TEST_P(BackendTest, ImpossibleHeapReturnsNullptr) {
  const uint64_t base = device_->driver_allocated_bytes();
  for (size_t n : {SIZE_MAX, SIZE_MAX - 4095, size_t(1) << 62}) {
    SCOPED_TRACE("requested " + std::to_string(n));
    std::unique_ptr<mb::Heap> h;
    EXPECT_NO_THROW(h = device_->create_heap(n));
    EXPECT_EQ(h, nullptr);
    EXPECT_EQ(device_->driver_allocated_bytes(), base);
  }
}

// ---------------------------------------------------------------- fill and copy

TEST_P(BackendTest, EmptyCommandBufferCompletes) {
  std::unique_ptr<mb::Queue> q = device_->create_queue(0);
  std::unique_ptr<mb::CommandBuffer> cb = q->create_command_buffer();
  EXPECT_EQ(cb->size(), 0u);
  const mb::Completion c = run(*q, std::move(cb));
  EXPECT_EQ(c.error, "");
  EXPECT_LE(c.device_start_ns, c.device_end_ns);
}

TEST_P(BackendTest, CommandBufferCountsCommands) {
  std::unique_ptr<mb::Queue> q = device_->create_queue(0);
  std::unique_ptr<mb::Heap> h = host_heap(4096);
  std::unique_ptr<mb::TimelineEvent> ev = device_->create_event();
  uint64_t ts = 0;
  std::unique_ptr<mb::CommandBuffer> cb = q->create_command_buffer();
  cb->fill({h.get(), 0}, 16, 1, 1);
  EXPECT_EQ(cb->size(), 1u);
  cb->copy({h.get(), 0}, {h.get(), 64}, 16);
  cb->host_callback([] {});
  cb->signal(*ev, 1);
  cb->wait(*ev, 1);
  cb->timestamp(&ts);
  EXPECT_EQ(cb->size(), 6u);
  EXPECT_EQ(run(*q, std::move(cb)).error, "");
  EXPECT_EQ(ev->value(), 1u);
}

struct Region {
  size_t offset;
  size_t n;
};

TEST_P(BackendTest, FillAllPatternSizesAtOddOffsetsAndLengths) {
  // Each region starts at a 64-byte boundary plus an odd (or zero) offset; 64 guard bytes
  // separate regions so that a write past either end is caught.
  const std::vector<Region> shapes = {
      {1, 1},     {3, 2},    {5, 3},    {7, 7},     {9, 9},   {13, 15},  {17, 31},
      {33, 63},   {0, 64},   {63, 65},  {1, 127},   {3, 255}, {31, 256}, {129, 257},
      {11, 1000}, {7, 4097}, {0, 4096}, {3, 65537}, {5, 0},   {61, 300}, {1, 100003}};
  std::unique_ptr<mb::Queue> q = device_->create_queue(0);
  for (unsigned psize : {1u, 2u, 4u, 8u}) {
    SCOPED_TRACE("pattern size " + std::to_string(psize));
    std::vector<Region> regions;
    size_t cursor = 64;
    for (const Region& s : shapes) {
      regions.push_back({cursor + s.offset, s.n});
      cursor = (cursor + s.offset + s.n + 64 + 63) / 64 * 64;
    }
    std::unique_ptr<mb::Heap> h = host_heap(cursor + 64);
    std::vector<uint8_t> ref(h->size(), kGuard);
    std::unique_ptr<mb::CommandBuffer> cb = q->create_command_buffer();
    for (const Region& r : regions) {
      cb->fill({h.get(), r.offset}, r.n, kPattern, psize);
      ref_fill(ref.data() + r.offset, r.n, kPattern, psize);
    }
    EXPECT_EQ(run(*q, std::move(cb)).error, "");
    EXPECT_TRUE(bytes_equal(bytes(*h), ref.data(), ref.size()));
  }
}

TEST_P(BackendTest, LargeFills) {
  // Larger than any cache: the cpu backend switches to streaming stores here.
  std::unique_ptr<mb::Queue> q = device_->create_queue(0);
  std::unique_ptr<mb::Heap> h = host_heap(20 * kMiB);
  std::vector<uint8_t> ref(h->size(), kGuard);
  std::unique_ptr<mb::CommandBuffer> cb = q->create_command_buffer();
  const Region a{3, 8 * kMiB + 5};
  const Region b{9 * kMiB + 1, 8 * kMiB + 7};
  const Region c{18 * kMiB + 5, kMiB + 13};
  cb->fill({h.get(), a.offset}, a.n, kPattern, 8);
  ref_fill(ref.data() + a.offset, a.n, kPattern, 8);
  cb->fill({h.get(), b.offset}, b.n, kPattern, 2);
  ref_fill(ref.data() + b.offset, b.n, kPattern, 2);
  cb->fill({h.get(), c.offset}, c.n, 0x5A, 1);
  ref_fill(ref.data() + c.offset, c.n, 0x5A, 1);
  EXPECT_EQ(run(*q, std::move(cb)).error, "");
  EXPECT_TRUE(bytes_equal(bytes(*h), ref.data(), ref.size()));
}

struct CopyOp {
  size_t src;
  size_t dst;
  size_t n;
};

// Encodes ops as copies inside one heap, applies them to a host reference with memmove in
// the same order, and compares the whole heap.
void check_copies_in_one_heap(mb::Device& dev, const std::vector<CopyOp>& ops, size_t heap_size,
                              uint32_t seed) {
  std::unique_ptr<mb::Queue> q = dev.create_queue(0);
  std::unique_ptr<mb::Heap> h = dev.create_heap(heap_size);
  ASSERT_NE(h, nullptr);
  ASSERT_NE(h->host_ptr(), nullptr);
  uint8_t* p = static_cast<uint8_t*>(h->host_ptr());
  random_bytes(p, h->size(), seed);
  std::vector<uint8_t> ref(p, p + h->size());
  std::unique_ptr<mb::CommandBuffer> cb = q->create_command_buffer();
  for (const CopyOp& op : ops) {
    ASSERT_LE(std::max(op.src, op.dst) + op.n, h->size());
    cb->copy({h.get(), op.src}, {h.get(), op.dst}, op.n);
    std::memmove(ref.data() + op.dst, ref.data() + op.src, op.n);
  }
  EXPECT_EQ(run(*q, std::move(cb)).error, "");
  EXPECT_TRUE(bytes_equal(p, ref.data(), ref.size()));
}

TEST_P(BackendTest, CopyNonOverlappingInOneHeap) {
  std::vector<CopyOp> ops;
  // Sources in [0, 128 KiB), destinations in [128 KiB, 256 KiB): odd offsets and lengths.
  size_t src = 1;
  size_t dst = 128 * 1024 + 3;
  for (size_t n : {size_t(0), size_t(1), size_t(2), size_t(3), size_t(7), size_t(15), size_t(33),
                   size_t(63), size_t(64), size_t(65), size_t(255), size_t(257), size_t(511),
                   size_t(1023), size_t(4097), size_t(30001)}) {
    ops.push_back({src, dst, n});
    src += n + 5;
    dst += n + 7;
  }
  check_copies_in_one_heap(*device_, ops, 256 * 1024, 1);
}

TEST_P(BackendTest, CopyOverlappingBothDirections) {
  std::vector<CopyOp> ops = {
      {1001, 1001 + 7, 3001},     // dst after src: must copy back to front
      {20003, 20003 - 5, 2999},   // dst before src: front to back
      {40001, 40002, 4095},       // overlap by all but one byte, forward
      {50002, 50001, 4095},       // and backward
      {60001, 60001 + 64, 129},   // shift by a vector width
      {70001 + 64, 70001, 129},   //
      {80003, 80003, 1000},       // src == dst
      {90001, 90001 + 100, 101},  // overlap by one byte
      {100101, 100001, 101},      //
      {110001, 110001 + 3, 0},    // nothing
  };
  check_copies_in_one_heap(*device_, ops, 128 * 1024, 2);
}

TEST_P(BackendTest, CopyBetweenHeaps) {
  std::unique_ptr<mb::Queue> q = device_->create_queue(0);
  std::unique_ptr<mb::Heap> a = host_heap(64 * 1024);
  std::unique_ptr<mb::Heap> b = host_heap(64 * 1024);
  random_bytes(bytes(*a), a->size(), 3);
  std::vector<uint8_t> ref(b->size(), kGuard);
  std::unique_ptr<mb::CommandBuffer> cb = q->create_command_buffer();
  size_t s = 3;
  size_t d = 1;
  for (size_t n : {size_t(1), size_t(5), size_t(31), size_t(64), size_t(127), size_t(300),
                   size_t(1025), size_t(8191)}) {
    cb->copy({a.get(), s}, {b.get(), d}, n);
    std::memcpy(ref.data() + d, bytes(*a) + s, n);
    s += n + 3;
    d += n + 70;  // leaves guard bytes between the copies
  }
  EXPECT_EQ(run(*q, std::move(cb)).error, "");
  EXPECT_TRUE(bytes_equal(bytes(*b), ref.data(), ref.size()));
}

TEST_P(BackendTest, LargeCopies) {
  std::unique_ptr<mb::Queue> q = device_->create_queue(0);
  std::unique_ptr<mb::Heap> a = host_heap(11 * kMiB);
  std::unique_ptr<mb::Heap> b = host_heap(9 * kMiB);
  random_bytes(bytes(*a), a->size(), 4);
  std::vector<uint8_t> ref_a(bytes(*a), bytes(*a) + a->size());
  std::vector<uint8_t> ref_b(b->size(), kGuard);
  std::unique_ptr<mb::CommandBuffer> cb = q->create_command_buffer();
  const size_t n = 8 * kMiB + 3;
  cb->copy({a.get(), 5}, {b.get(), 1}, n);  // non-overlapping, beyond the caches
  std::memcpy(ref_b.data() + 1, ref_a.data() + 5, n);
  cb->copy({a.get(), 1}, {a.get(), 1 + 4097}, n);  // overlapping, forward
  std::memmove(ref_a.data() + 1 + 4097, ref_a.data() + 1, n);
  cb->copy({a.get(), 2 * kMiB + 9}, {a.get(), 7}, n - 1);  // overlapping, backward
  std::memmove(ref_a.data() + 7, ref_a.data() + 2 * kMiB + 9, n - 1);
  EXPECT_EQ(run(*q, std::move(cb)).error, "");
  EXPECT_TRUE(bytes_equal(bytes(*a), ref_a.data(), ref_a.size()));
  EXPECT_TRUE(bytes_equal(bytes(*b), ref_b.data(), ref_b.size()));
}

TEST_P(BackendTest, ConcurrentLargeWorkOnTwoQueues) {
  // Two queues filling and copying large buffers at the same time (on cpu they contend for
  // the same helper threads) must each get exactly their own result.
  std::unique_ptr<mb::Queue> q1 = device_->create_queue(0);
  std::unique_ptr<mb::Queue> q2 = device_->create_queue(0);
  const size_t n = 6 * kMiB + 11;
  std::unique_ptr<mb::Heap> h1 = host_heap(2 * n + 4096);
  std::unique_ptr<mb::Heap> h2 = host_heap(2 * n + 4096);
  std::vector<std::future<mb::Completion>> done;
  for (int round = 0; round < 3; ++round) {
    for (int k = 0; k < 2; ++k) {
      mb::Heap* h = k == 0 ? h1.get() : h2.get();
      mb::Queue& q = k == 0 ? *q1 : *q2;
      std::unique_ptr<mb::CommandBuffer> cb = q.create_command_buffer();
      const uint64_t pattern = kPattern + static_cast<uint64_t>(16 * round + k);
      cb->fill({h, 1}, n, pattern, 8);
      cb->copy({h, 1}, {h, n + 7}, n);
      done.push_back(commit_async(q, std::move(cb)));
    }
  }
  for (auto& f : done) EXPECT_EQ(wait_done(f).error, "");
  for (int k = 0; k < 2; ++k) {
    SCOPED_TRACE("queue " + std::to_string(k));
    const mb::Heap& h = k == 0 ? *h1 : *h2;
    std::vector<uint8_t> ref(h.size(), kGuard);
    const uint64_t pattern = kPattern + static_cast<uint64_t>(16 * 2 + k);
    ref_fill(ref.data() + 1, n, pattern, 8);
    std::memcpy(ref.data() + n + 7, ref.data() + 1, n);
    EXPECT_TRUE(bytes_equal(bytes(h), ref.data(), ref.size()));
  }
}

// ---------------------------------------------------------------- ordering and callbacks

TEST_P(BackendTest, CommandsExecuteInEncodeOrder) {
  std::unique_ptr<mb::Queue> q = device_->create_queue(0);
  std::unique_ptr<mb::Heap> h = host_heap(3 * 4096);
  const size_t n = 1000;
  const mb::BufferRef x{h.get(), 1};
  const mb::BufferRef y{h.get(), 4096 + 3};
  const mb::BufferRef z{h.get(), 2 * 4096 + 5};
  uint8_t* px = bytes(*h) + x.offset;
  int seen_x = -1;
  int seen_y = -1;
  std::unique_ptr<mb::CommandBuffer> cb = q->create_command_buffer();
  cb->fill(x, n, 0x11, 1);
  cb->copy(x, y, n);
  cb->host_callback([&] {
    seen_x = px[n - 1];
    seen_y = bytes(*h)[y.offset];
  });
  cb->fill(x, n, 0x22, 1);
  cb->copy(x, z, n);
  cb->fill(x, n / 2, 0x33, 1);
  EXPECT_EQ(run(*q, std::move(cb)).error, "");
  EXPECT_EQ(seen_x, 0x11) << "the callback ran before an earlier fill or after a later one";
  EXPECT_EQ(seen_y, 0x11);
  EXPECT_TRUE(all_bytes(bytes(*h) + y.offset, 0x11, n));
  EXPECT_TRUE(all_bytes(bytes(*h) + z.offset, 0x22, n));
  EXPECT_TRUE(all_bytes(px, 0x33, n / 2));
  EXPECT_TRUE(all_bytes(px + n / 2, 0x22, n - n / 2));
  EXPECT_EQ(px[-1], kGuard);
  EXPECT_EQ(px[n], kGuard);
}

TEST_P(BackendTest, CompletionsRunInCommitOrder) {
  constexpr int kCount = 64;
  std::unique_ptr<mb::Queue> q = device_->create_queue(0);
  std::mutex mu;
  std::vector<int> executed;
  std::vector<int> completed;
  std::vector<mb::Completion> reports(kCount);
  std::vector<std::future<mb::Completion>> futures;
  for (int i = 0; i < kCount; ++i) {
    std::unique_ptr<mb::CommandBuffer> cb = q->create_command_buffer();
    cb->host_callback([&, i] {
      std::lock_guard<std::mutex> lock(mu);
      executed.push_back(i);
    });
    auto done = std::make_shared<std::promise<mb::Completion>>();
    futures.push_back(done->get_future());
    q->commit(std::move(cb), [&, i, done](const mb::Completion& c) {
      {
        std::lock_guard<std::mutex> lock(mu);
        completed.push_back(i);
      }
      done->set_value(c);
    });
  }
  for (int i = 0; i < kCount; ++i)
    reports[static_cast<size_t>(i)] = wait_done(futures[static_cast<size_t>(i)]);
  std::vector<int> expected(kCount);
  for (int i = 0; i < kCount; ++i) expected[static_cast<size_t>(i)] = i;
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(executed, expected);
  EXPECT_EQ(completed, expected);
  for (int i = 0; i < kCount; ++i) {
    const mb::Completion& c = reports[static_cast<size_t>(i)];
    EXPECT_EQ(c.error, "");
    EXPECT_LE(c.device_start_ns, c.device_end_ns) << "command buffer " << i;
    if (is_cpu()) {
      EXPECT_GT(c.device_start_ns, 0u);
      if (i > 0) {
        EXPECT_LE(reports[static_cast<size_t>(i - 1)].device_end_ns, c.device_start_ns)
            << "an in-order cpu queue runs one command buffer at a time";
      }
    }
  }
}

TEST_P(BackendTest, HostCallbackRunsOnARuntimeThread) {
  std::unique_ptr<mb::Queue> q = device_->create_queue(0);
  std::atomic<int> calls{0};
  std::thread::id where;
  std::unique_ptr<mb::CommandBuffer> cb = q->create_command_buffer();
  cb->host_callback([&] {
    where = std::this_thread::get_id();
    calls.fetch_add(1);
  });
  cb->host_callback([&] { calls.fetch_add(10); });
  EXPECT_EQ(run(*q, std::move(cb)).error, "");
  EXPECT_EQ(calls.load(), 11);
  EXPECT_NE(where, std::this_thread::get_id());
}

TEST_P(BackendTest, ThrowingHostCallbackFailsTheCommandBufferWithoutHanging) {
  std::unique_ptr<mb::Queue> q = device_->create_queue(0);
  std::unique_ptr<mb::Heap> h = host_heap(8192);
  std::unique_ptr<mb::TimelineEvent> ev = device_->create_event();
  const mb::BufferRef a{h.get(), 3};
  const mb::BufferRef b{h.get(), 4096 + 1};
  const size_t n = 100;
  std::unique_ptr<mb::CommandBuffer> cb = q->create_command_buffer();
  cb->fill(a, n, 0x11, 1);
  cb->host_callback([] { throw std::runtime_error("boom from the test"); });
  cb->fill(a, n, 0x22, 1);  // skipped
  cb->copy(a, b, n);        // skipped
  cb->signal(*ev, 5);       // still happens: whoever waits on it must not hang
  const mb::Completion c = run(*q, std::move(cb));
  EXPECT_NE(c.error, "");
  EXPECT_NE(c.error.find("boom from the test"), std::string::npos) << c.error;
  // A signal that ends the command buffer lands right after on_complete (CommandBuffer::signal).
  EXPECT_TRUE(ev->wait(5, kSignalPatienceNs));
  EXPECT_EQ(ev->value(), 5u);
  EXPECT_TRUE(all_bytes(bytes(*h) + a.offset, 0x11, n)) << "a fill after the failure ran";
  EXPECT_TRUE(all_bytes(bytes(*h) + b.offset, kGuard, n)) << "a copy after the failure ran";

  // Work on another queue that waits for the event completes too.
  std::unique_ptr<mb::Queue> other = device_->create_queue(0);
  std::unique_ptr<mb::CommandBuffer> waiter = other->create_command_buffer();
  waiter->wait(*ev, 5);
  EXPECT_EQ(run(*other, std::move(waiter)).error, "");

  // The queue stays usable: the next command buffer runs normally.
  std::unique_ptr<mb::CommandBuffer> next = q->create_command_buffer();
  next->fill(a, n, 0x33, 1);
  EXPECT_EQ(run(*q, std::move(next)).error, "");
  EXPECT_TRUE(all_bytes(bytes(*h) + a.offset, 0x33, n));

  // Exceptions that are not std::exception fail the command buffer as well.
  std::unique_ptr<mb::CommandBuffer> odd = q->create_command_buffer();
  odd->host_callback([] { throw 42; });
  odd->signal(*ev, 6);
  EXPECT_NE(run(*q, std::move(odd)).error, "");
  EXPECT_TRUE(ev->wait(6, kSignalPatienceNs));
  EXPECT_EQ(ev->value(), 6u);
}

// ---------------------------------------------------------------- timeline events

TEST_P(BackendTest, EventHostSignalAndWait) {
  std::unique_ptr<mb::TimelineEvent> ev = device_->create_event();
  EXPECT_EQ(ev->value(), 0u);
  EXPECT_TRUE(ev->wait(0, 0));
  ev->signal(3);
  EXPECT_EQ(ev->value(), 3u);
  ev->signal(2);  // values never decrease
  EXPECT_EQ(ev->value(), 3u);
  EXPECT_TRUE(ev->wait(3, 0));
  EXPECT_TRUE(ev->wait(2, -1));
  EXPECT_FALSE(ev->wait(4, 0));

  const int64_t t0 = steady_ns();
  EXPECT_FALSE(ev->wait(4, 20'000'000));
  const int64_t waited = steady_ns() - t0;
  EXPECT_GE(waited, 19'000'000) << "the wait returned before its timeout";
  EXPECT_LT(waited, 2'000'000'000) << "the wait overslept its timeout";
  EXPECT_EQ(ev->value(), 3u);
}

TEST_P(BackendTest, EventWaitWakesWhenAnotherThreadSignals) {
  std::unique_ptr<mb::TimelineEvent> ev = device_->create_event();
  std::thread signaller([&] {
    std::this_thread::sleep_for(20ms);
    ev->signal(4);
  });
  const int64_t t0 = steady_ns();
  EXPECT_TRUE(ev->wait(4, 5'000'000'000));
  EXPECT_GE(ev->value(), 4u);
  EXPECT_LT(steady_ns() - t0, 4'000'000'000);
  signaller.join();

  // Several host waiters, with and without a timeout, all wake on one signal.
  std::atomic<int> woken{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < 4; ++i) {
    waiters.emplace_back([&, i] {
      if (ev->wait(10, i % 2 == 0 ? -1 : 5'000'000'000)) woken.fetch_add(1);
    });
  }
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(woken.load(), 0);
  ev->signal(12);
  for (std::thread& t : waiters) t.join();
  EXPECT_EQ(woken.load(), 4);
  EXPECT_EQ(ev->value(), 12u);
}

TEST_P(BackendTest, EventWaitWithTheLargestTimeoutWaitsForTheSignal) {
  // INT64_MAX ns (292 years) means "no timeout" in practice; it must not overflow into an
  // immediate timeout.
  std::unique_ptr<mb::TimelineEvent> ev = device_->create_event();
  std::thread signaller([&] {
    std::this_thread::sleep_for(20ms);
    ev->signal(1);
  });
  EXPECT_TRUE(ev->wait(1, INT64_MAX));
  EXPECT_EQ(ev->value(), 1u);
  signaller.join();
}

TEST_P(BackendTest, DeviceSignalSetsTheEventAndNeverLowersIt) {
  std::unique_ptr<mb::Queue> q = device_->create_queue(0);
  std::unique_ptr<mb::TimelineEvent> ev = device_->create_event();
  std::unique_ptr<mb::CommandBuffer> cb = q->create_command_buffer();
  cb->signal(*ev, 7);
  EXPECT_EQ(run(*q, std::move(cb)).error, "");
  EXPECT_TRUE(ev->wait(7, kSignalPatienceNs));  // lands right after on_complete
  EXPECT_EQ(ev->value(), 7u);
  cb = q->create_command_buffer();
  cb->signal(*ev, 3);
  cb->host_callback([] {});  // not a trailing signal: set before on_complete
  EXPECT_EQ(run(*q, std::move(cb)).error, "");
  EXPECT_EQ(ev->value(), 7u);
}

TEST_P(BackendTest, ASignalThatEndsACommandBufferLandsAfterItsCompletion) {
  std::unique_ptr<mb::Queue> q = device_->create_queue(0);
  std::unique_ptr<mb::TimelineEvent> mid = device_->create_event();
  std::unique_ptr<mb::TimelineEvent> end = device_->create_event();
  for (uint64_t i = 1; i <= 200; ++i) {
    std::unique_ptr<mb::CommandBuffer> cb = q->create_command_buffer();
    cb->signal(*mid, i);
    cb->host_callback([] {});
    cb->signal(*end, i);
    std::atomic<bool> completed{false};
    std::atomic<uint64_t> end_at_completion{0}, mid_at_completion{0};
    std::promise<void> p;
    q->commit(std::move(cb), [&](const mb::Completion&) {
      end_at_completion = end->value();
      mid_at_completion = mid->value();
      completed = true;
      p.set_value();
    });
    ASSERT_TRUE(end->wait(i, kSignalPatienceNs));
    EXPECT_TRUE(completed.load()) << "the ending signal landed before on_complete ran";
    p.get_future().wait();
    EXPECT_LT(end_at_completion.load(), i) << "the ending signal was set before on_complete";
    EXPECT_EQ(mid_at_completion.load(), i) << "a signal before other commands waits for nothing";
  }
}

TEST_P(BackendTest, DeviceWaitOnAnotherQueuesSignal) {
  std::unique_ptr<mb::Queue> qa = device_->create_queue(0);
  std::unique_ptr<mb::Queue> qb = device_->create_queue(0);
  std::unique_ptr<mb::TimelineEvent> ev = device_->create_event();
  std::unique_ptr<mb::Heap> h = host_heap(8192);
  const size_t n = 777;
  const mb::BufferRef x{h.get(), 1};
  const mb::BufferRef y{h.get(), 4096 + 3};
  std::atomic<bool> a_ran{false};

  std::unique_ptr<mb::CommandBuffer> ca = qa->create_command_buffer();
  ca->wait(*ev, 1);
  ca->copy(y, x, n);  // must see what queue B wrote before it signalled
  ca->host_callback([&] { a_ran = true; });
  std::future<mb::Completion> fa = commit_async(*qa, std::move(ca));

  std::this_thread::sleep_for(30ms);
  EXPECT_FALSE(a_ran.load()) << "a command after the wait ran before the signal";
  EXPECT_NE(fa.wait_for(0s), std::future_status::ready);
  EXPECT_TRUE(all_bytes(bytes(*h) + x.offset, kGuard, n));

  std::unique_ptr<mb::CommandBuffer> cb = qb->create_command_buffer();
  cb->fill(y, n, 0x44, 1);
  cb->signal(*ev, 1);
  EXPECT_EQ(run(*qb, std::move(cb)).error, "");
  EXPECT_EQ(wait_done(fa).error, "");
  EXPECT_TRUE(a_ran.load());
  EXPECT_TRUE(all_bytes(bytes(*h) + x.offset, 0x44, n));
}

TEST_P(BackendTest, DeviceWaitOnHostSignal) {
  std::unique_ptr<mb::Queue> q = device_->create_queue(0);
  std::unique_ptr<mb::TimelineEvent> ev = device_->create_event();
  std::atomic<bool> ran{false};
  std::unique_ptr<mb::CommandBuffer> cb = q->create_command_buffer();
  cb->wait(*ev, 2);
  cb->host_callback([&] { ran = true; });
  std::future<mb::Completion> f = commit_async(*q, std::move(cb));
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(ran.load());
  std::thread([&] { ev->signal(1); }).join();  // not enough
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(ran.load()) << "the wait for 2 ended at value 1";
  std::thread([&] { ev->signal(2); }).join();
  EXPECT_EQ(wait_done(f).error, "");
  EXPECT_TRUE(ran.load());
}

TEST_P(BackendTest, AWaitingQueueDoesNotBlockOtherQueues) {
  std::unique_ptr<mb::Queue> blocked = device_->create_queue(0);
  std::unique_ptr<mb::Queue> free_q = device_->create_queue(0);
  std::unique_ptr<mb::TimelineEvent> ev = device_->create_event();
  std::unique_ptr<mb::CommandBuffer> cb = blocked->create_command_buffer();
  cb->wait(*ev, 1);
  std::future<mb::Completion> fb = commit_async(*blocked, std::move(cb));
  std::atomic<bool> ran{false};
  cb = free_q->create_command_buffer();
  cb->host_callback([&] { ran = true; });
  EXPECT_EQ(run(*free_q, std::move(cb)).error, "");
  EXPECT_TRUE(ran.load());
  EXPECT_NE(fb.wait_for(0s), std::future_status::ready);
  ev->signal(1);
  EXPECT_EQ(wait_done(fb).error, "");
}

// ---------------------------------------------------------------- timestamps

TEST_P(BackendTest, TimestampsLieBetweenCommitAndCompletion) {
  std::unique_ptr<mb::Queue> q = device_->create_queue(0);
  std::unique_ptr<mb::Heap> h = host_heap(4096);
  uint64_t before = 0;
  uint64_t after = 0;
  std::unique_ptr<mb::CommandBuffer> cb = q->create_command_buffer();
  cb->timestamp(&before);
  cb->host_callback([] { std::this_thread::sleep_for(2ms); });
  cb->fill({h.get(), 0}, 100, 1, 1);
  cb->timestamp(&after);
  const int64_t committed = steady_ns();
  const mb::Completion c = run(*q, std::move(cb));
  const int64_t completed = steady_ns();
  EXPECT_EQ(c.error, "");
  EXPECT_NE(before, 0u);
  EXPECT_LE(c.device_start_ns, before);
  EXPECT_GE(after, before + 2'000'000) << "the later timestamp did not follow the callback";
  EXPECT_LE(after, c.device_end_ns);
  if (is_cpu()) {
    // The cpu device clock is std::chrono::steady_clock.
    EXPECT_LE(static_cast<uint64_t>(committed), c.device_start_ns);
    EXPECT_LE(static_cast<uint64_t>(committed), before);
    EXPECT_LE(c.device_end_ns, static_cast<uint64_t>(completed));
    EXPECT_LE(after, static_cast<uint64_t>(completed));
  }
}

// ---------------------------------------------------------------- throughput and teardown

TEST_P(BackendTest, ThousandCommandBuffersAllComplete) {
  constexpr size_t kCount = 1000;
  std::unique_ptr<mb::Queue> q = device_->create_queue(0);
  std::unique_ptr<mb::Heap> h = host_heap(kCount * 8);
  std::atomic<size_t> completed{0};
  std::atomic<size_t> out_of_order{0};
  std::atomic<size_t> errors{0};
  auto last = std::make_shared<std::promise<void>>();
  std::future<void> all_done = last->get_future();
  for (size_t i = 0; i < kCount; ++i) {
    std::unique_ptr<mb::CommandBuffer> cb = q->create_command_buffer();
    cb->fill({h.get(), 8 * i}, 8, 0x0101010101010101ULL * (i & 0xff) + (i >> 8), 8);
    q->commit(std::move(cb), [&, i, last](const mb::Completion& c) {
      if (!c.error.empty()) errors.fetch_add(1);
      if (completed.fetch_add(1) != i) out_of_order.fetch_add(1);
      if (i == kCount - 1) last->set_value();
    });
  }
  if (all_done.wait_for(kTimeout) != std::future_status::ready)
    die("1000 command buffers did not complete within 10 s");
  EXPECT_EQ(completed.load(), kCount);
  EXPECT_EQ(out_of_order.load(), 0u);
  EXPECT_EQ(errors.load(), 0u);
  for (size_t i = 0; i < kCount; ++i) {
    uint64_t v;
    std::memcpy(&v, bytes(*h) + 8 * i, 8);
    ASSERT_EQ(v, 0x0101010101010101ULL * (i & 0xff) + (i >> 8)) << "slot " << i;
  }
}

TEST_P(BackendTest, DestroyingAQueueCompletesPendingWorkFirst) {
  constexpr size_t kCount = 20;
  std::unique_ptr<mb::Queue> q = device_->create_queue(0);
  std::unique_ptr<mb::Heap> h = host_heap(4096);
  std::unique_ptr<mb::TimelineEvent> gate = device_->create_event();
  std::atomic<size_t> ran{0};
  std::atomic<size_t> completed{0};
  // The first command buffer holds the queue until the gate opens, so that the others are
  // still queued (not yet started) when the queue is destroyed.
  std::unique_ptr<mb::CommandBuffer> first = q->create_command_buffer();
  first->wait(*gate, 1);
  q->commit(std::move(first), [&](const mb::Completion&) { completed.fetch_add(1); });
  std::this_thread::sleep_for(5ms);
  for (size_t i = 0; i < kCount; ++i) {
    std::unique_ptr<mb::CommandBuffer> cb = q->create_command_buffer();
    cb->host_callback([&] {
      std::this_thread::sleep_for(100us);
      ran.fetch_add(1);
    });
    cb->fill({h.get(), i}, 1, 0x40 + i, 1);
    q->commit(std::move(cb), [&](const mb::Completion&) { completed.fetch_add(1); });
  }
  std::thread opener([&] {
    std::this_thread::sleep_for(20ms);
    gate->signal(1);
  });
  q.reset();
  opener.join();
  EXPECT_EQ(ran.load(), kCount);
  EXPECT_EQ(completed.load(), kCount + 1);
  for (size_t i = 0; i < kCount; ++i) EXPECT_EQ(bytes(*h)[i], 0x40 + i);
}

TEST_P(BackendTest, DestroyingAQueueWaitsForAPendingEventWait) {
  std::unique_ptr<mb::Queue> q = device_->create_queue(0);
  std::unique_ptr<mb::TimelineEvent> ev = device_->create_event();
  std::atomic<bool> completed{false};
  std::unique_ptr<mb::CommandBuffer> cb = q->create_command_buffer();
  cb->wait(*ev, 1);
  q->commit(std::move(cb), [&](const mb::Completion&) { completed = true; });
  std::thread signaller([&] {
    std::this_thread::sleep_for(30ms);
    ev->signal(1);
  });
  const int64_t t0 = steady_ns();
  q.reset();
  EXPECT_TRUE(completed.load());
  EXPECT_GE(steady_ns() - t0, 20'000'000) << "the queue was destroyed before its work ran";
  signaller.join();
}

// ---------------------------------------------------------------- completion timelines

// A queue that keeps a completion timeline (Queue::timeline); the test is skipped, with the
// reason, on a backend whose queues keep none (the core then signals an event of its own).
struct TimelineQueue {
  std::unique_ptr<mb::Queue> q;
  mb::TimelineEvent* timeline = nullptr;
  std::mutex mu;
  std::vector<std::string> errors;
  // The timeline's value when each error arrived.
  std::vector<uint64_t> value_at_error;
};

#define OPEN_TIMELINE_QUEUE(tq)                              \
  TimelineQueue tq;                                          \
  tq.q = device_->create_queue(0);                           \
  tq.timeline = tq.q->timeline([&tq](const std::string& e) { \
    std::lock_guard<std::mutex> lock(tq.mu);                 \
    tq.errors.push_back(e);                                  \
    tq.value_at_error.push_back(tq.timeline->value());       \
  });                                                        \
  if (tq.timeline == nullptr)                                \
  GTEST_SKIP() << backend_->name() << "'s queues keep no completion timeline"

TEST_P(BackendTest, TheTimelineCountsCompletedCommandBuffers) {
  OPEN_TIMELINE_QUEUE(tq);
  std::unique_ptr<mb::Heap> h = host_heap(64 * 1024);
  EXPECT_EQ(tq.timeline->value(), 0u);
  // Without on_complete: the device sets the timeline itself.
  for (uint64_t i = 1; i <= 50; ++i) {
    std::unique_ptr<mb::CommandBuffer> cb = tq.q->create_command_buffer();
    cb->fill({h.get(), 1000 * (i - 1)}, 999, 0x10 + i, 1);
    tq.q->commit(std::move(cb), nullptr);
    if (i % 10 == 0) {
      ASSERT_TRUE(tq.timeline->wait(i, kSignalPatienceNs)) << "command buffer " << i;
      for (uint64_t k = 1; k <= i; ++k) {
        ASSERT_TRUE(all_bytes(bytes(*h) + 1000 * (k - 1), static_cast<uint8_t>(0x10 + k), 999))
            << "the timeline reached " << i << " before command buffer " << k << "'s fill";
      }
    }
  }
  // An empty command buffer and one with only a host callback count too.
  tq.q->commit(tq.q->create_command_buffer(), nullptr);
  std::atomic<bool> ran{false};
  std::unique_ptr<mb::CommandBuffer> cb = tq.q->create_command_buffer();
  cb->host_callback([&] { ran = true; });
  tq.q->commit(std::move(cb), nullptr);
  ASSERT_TRUE(tq.timeline->wait(52, kSignalPatienceNs));
  EXPECT_TRUE(ran.load());
  EXPECT_EQ(tq.timeline->value(), 52u);
  EXPECT_TRUE(tq.errors.empty());
}

TEST_P(BackendTest, OnCompleteRunsBeforeTheTimelineShowsItsCommandBuffer) {
  OPEN_TIMELINE_QUEUE(tq);
  std::unique_ptr<mb::Heap> h = host_heap(4096);
  // Command buffers with and without on_complete, interleaved: the timeline's values stay in
  // order, and a command buffer with on_complete shows complete only after it ran.
  constexpr uint64_t kCount = 200;
  std::vector<std::atomic<uint64_t>> seen(kCount + 1);  // the timeline when on_complete ran
  for (uint64_t i = 1; i <= kCount; ++i) {
    std::unique_ptr<mb::CommandBuffer> cb = tq.q->create_command_buffer();
    cb->fill({h.get(), i % 4000}, 1, static_cast<uint8_t>(i), 1);
    if (i % 3 == 0) {
      tq.q->commit(std::move(cb), [&, i](const mb::Completion& c) {
        EXPECT_EQ(c.error, "");
        seen[i] = tq.timeline->value() + 1;  // + 1: 0 means "did not run"
      });
    } else {
      tq.q->commit(std::move(cb), nullptr);
    }
  }
  ASSERT_TRUE(tq.timeline->wait(kCount, kSignalPatienceNs));
  EXPECT_EQ(tq.timeline->value(), kCount);
  for (uint64_t i = 3; i <= kCount; i += 3) {
    ASSERT_NE(seen[i].load(), 0u) << "on_complete of " << i << " never ran";
    EXPECT_LT(seen[i].load() - 1, i) << "the timeline showed " << i << " before on_complete ran";
    EXPECT_GE(seen[i].load() - 1, i - 1) << "on_complete of " << i << " ran before earlier work";
  }
}

TEST_P(BackendTest, ATimelineFailureIsReportedBeforeTheTimelineReachesIt) {
  OPEN_TIMELINE_QUEUE(tq);
  std::unique_ptr<mb::Heap> h = host_heap(4096);
  for (uint64_t i = 1; i <= 20; ++i) {
    std::unique_ptr<mb::CommandBuffer> cb = tq.q->create_command_buffer();
    if (i % 2 == 0) {
      cb->host_callback([i] { throw std::runtime_error("boom " + std::to_string(i)); });
      cb->fill({h.get(), 0}, 16, 0x77, 1);  // skipped: the callback before it threw
    } else {
      cb->fill({h.get(), 100}, 16, static_cast<uint8_t>(i), 1);
    }
    tq.q->commit(std::move(cb), nullptr);
    ASSERT_TRUE(tq.timeline->wait(i, kSignalPatienceNs));
    std::lock_guard<std::mutex> lock(tq.mu);
    ASSERT_EQ(tq.errors.size(), i / 2)
        << "a failure was not reported by the time " << i << " showed complete";
    if (i % 2 == 0) {
      EXPECT_NE(tq.errors.back().find("boom " + std::to_string(i)), std::string::npos)
          << tq.errors.back();
      EXPECT_LT(tq.value_at_error.back(), i);
    }
  }
  EXPECT_TRUE(all_bytes(bytes(*h), kGuard, 16)) << "a fill after a failed callback ran";
  EXPECT_TRUE(all_bytes(bytes(*h) + 100, 19, 16));
}

TEST_P(BackendTest, TrailingSignalsLandOnceTheTimelineShowsTheirCommandBuffer) {
  OPEN_TIMELINE_QUEUE(tq);
  std::unique_ptr<mb::Heap> h = host_heap(1 << 20);
  std::unique_ptr<mb::TimelineEvent> ev = device_->create_event();
  for (uint64_t i = 1; i <= 100; ++i) {
    std::unique_ptr<mb::CommandBuffer> cb = tq.q->create_command_buffer();
    cb->fill({h.get(), 0}, 1 << 20, i, 1);
    cb->signal(*ev, i);
    tq.q->commit(std::move(cb), nullptr);
    ASSERT_TRUE(ev->wait(i, kSignalPatienceNs));
    EXPECT_GE(tq.timeline->value(), i)
        << "the event ended command buffer " << i << " before the timeline showed it";
    ASSERT_TRUE(all_bytes(bytes(*h) + (1 << 20) - 64, static_cast<uint8_t>(i), 64));
  }
}

TEST_P(BackendTest, ACommandBufferWaitsItsTurnBehindABlockedOne) {
  OPEN_TIMELINE_QUEUE(tq);
  std::unique_ptr<mb::Heap> h = host_heap(4096);
  std::unique_ptr<mb::TimelineEvent> gate = device_->create_event();
  std::unique_ptr<mb::CommandBuffer> first = tq.q->create_command_buffer();
  first->wait(*gate, 1);
  first->fill({h.get(), 0}, 8, 0x11, 1);
  tq.q->commit(std::move(first), nullptr);
  // Nothing in these can block: they must still run after the first, never before it.
  for (uint64_t i = 0; i < 5; ++i) {
    std::unique_ptr<mb::CommandBuffer> cb = tq.q->create_command_buffer();
    cb->fill({h.get(), 0}, 8, 0x20 + i, 1);
    tq.q->commit(std::move(cb), nullptr);
  }
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(tq.timeline->value(), 0u);
  EXPECT_TRUE(all_bytes(bytes(*h), kGuard, 8)) << "a later command buffer ran first";
  gate->signal(1);
  ASSERT_TRUE(tq.timeline->wait(6, kSignalPatienceNs));
  EXPECT_TRUE(all_bytes(bytes(*h), 0x24, 8));
}

TEST_P(BackendTest, WaitEitherEndsWithTheFirstOfTwoEvents) {
  std::unique_ptr<mb::TimelineEvent> a = device_->create_event();
  std::unique_ptr<mb::TimelineEvent> b = device_->create_event();
  EXPECT_FALSE(a->wait_either(1, *b, 1, 1'000'000)) << "neither was reached";
  a->signal(1);
  EXPECT_TRUE(a->wait_either(1, *b, 1, 0));
  std::unique_ptr<mb::TimelineEvent> c = device_->create_event();
  std::thread t([&] {
    std::this_thread::sleep_for(10ms);
    c->signal(5);
  });
  // Whether a backend waits for `other` as well or for this event alone (the fallback, which
  // callers rely on only where `other` cannot come first), the wait ends once both are set.
  EXPECT_TRUE(c->wait_either(5, *b, 9, kSignalPatienceNs));
  t.join();
}

std::string backend_param_name(const ::testing::TestParamInfo<mb::Backend*>& p) {
  return p.param->name();
}

INSTANTIATE_TEST_SUITE_P(Available, BackendTest, ::testing::ValuesIn(usable_backends()),
                         backend_param_name);

// ---------------------------------------------------------------- registry and cpu specifics

TEST(BackendRegistry, ListsEveryBackendBestFirst) {
  const std::vector<mb::Backend*>& all = mb::all_backends();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_STREQ(all[0]->name(), "metal");
  EXPECT_STREQ(all[1]->name(), "vulkan");
  EXPECT_STREQ(all[2]->name(), "cpu");
  EXPECT_EQ(all[0], &mb::metal_backend());
  EXPECT_EQ(all[1], &mb::vulkan_backend());
  EXPECT_EQ(all[2], &mb::cpu_backend());
  EXPECT_TRUE(mb::cpu_backend().is_built());
  EXPECT_TRUE(mb::cpu_backend().is_available());
  EXPECT_FALSE(usable_backends().empty());
}

TEST(BackendRegistry, UnbuiltBackendsExplainThemselves) {
  for (mb::Backend* b : mb::all_backends()) {
    if (b->is_built()) continue;
    SCOPED_TRACE(b->name());
    EXPECT_FALSE(b->is_available());
    const std::string why = b->unavailable_reason();
    EXPECT_NE(why.find("built without"), std::string::npos) << why;
    EXPECT_EQ(why.rfind(std::string("[") + b->name() + "]", 0), 0u) << why;
    EXPECT_THROW(b->device_count(), mpsrt::Error);
    EXPECT_THROW(b->open_device(0), mpsrt::Error);
  }
}

class CpuBackendTest : public ::testing::Test {
 protected:
  void TearDown() override { mpsrt::cpu::configure(CpuConfig{}); }
};

TEST_F(CpuBackendTest, ConfigureAppliesDeviceCountAndIsa) {
  mb::Backend& cpu = mb::cpu_backend();
  CpuConfig cfg;
  cfg.devices = 3;
  cfg.isa = "scalar";
  mpsrt::cpu::configure(cfg);
  EXPECT_EQ(cpu.device_count(), 3);
  EXPECT_EQ(cpu.open_device(2)->info().details, "kernels=scalar");
  mpsrt::cpu::configure(CpuConfig{});
  EXPECT_EQ(cpu.device_count(), 1);
}

TEST_F(CpuBackendTest, ConfigureRejectsBadSettings) {
  CpuConfig bad_isa;
  bad_isa.isa = "bogus";
  try {
    mpsrt::cpu::configure(bad_isa);
    ADD_FAILURE() << "isa=bogus was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("bogus"), std::string::npos) << e.what();
  }
  CpuConfig no_devices;
  no_devices.devices = 0;
  EXPECT_THROW(mpsrt::cpu::configure(no_devices), std::invalid_argument);
  for (mpsrt::cpu::Isa isa :
       {mpsrt::cpu::Isa::Scalar, mpsrt::cpu::Isa::Avx2, mpsrt::cpu::Isa::Avx512}) {
    CpuConfig cfg;
    cfg.isa = mpsrt::cpu::isa_name(isa);
    if (mpsrt::cpu::isa_supported(isa)) {
      EXPECT_NO_THROW(mpsrt::cpu::configure(cfg)) << cfg.isa;
    } else {
      EXPECT_THROW(mpsrt::cpu::configure(cfg), std::invalid_argument) << cfg.isa;
    }
  }
}

// A configure() that throws must leave the backend as it was (strong exception guarantee).
TEST_F(CpuBackendTest, FailedConfigureChangesNothing) {
  mb::Backend& cpu = mb::cpu_backend();
  CpuConfig good;
  good.devices = 2;
  mpsrt::cpu::configure(good);
  const std::string before = cpu.open_device(0)->info().details;
  CpuConfig bad;
  bad.devices = 0;     // invalid ...
  bad.isa = "scalar";  // ... next to a valid, different ISA
  EXPECT_THROW(mpsrt::cpu::configure(bad), std::invalid_argument);
  EXPECT_EQ(cpu.device_count(), 2);
  EXPECT_EQ(cpu.open_device(0)->info().details, before)
      << "a configure() that threw still switched the kernels";
}

// With no spinning every hand-off parks on the futex: catches lost wake-ups.
TEST_F(CpuBackendTest, ParkedHandOffsNeverLoseAWakeUp) {
  mb::Backend& cpu = mb::cpu_backend();
  CpuConfig cfg;
  cfg.spin_ns = 0;
  mpsrt::cpu::configure(cfg);
  std::unique_ptr<mb::Device> dev = cpu.open_device(0);
  // Declared before the queue, so that they outlive it even when an ASSERT returns early.
  std::unique_ptr<mb::TimelineEvent> to_device = dev->create_event();
  std::unique_ptr<mb::TimelineEvent> to_host = dev->create_event();
  std::unique_ptr<mb::Queue> q = dev->create_queue(0);
  constexpr uint64_t kRounds = 300;
  for (uint64_t i = 1; i <= kRounds; ++i) {
    std::unique_ptr<mb::CommandBuffer> cb = q->create_command_buffer();
    cb->wait(*to_device, i);
    cb->signal(*to_host, i);
    q->commit(std::move(cb), [](const mb::Completion&) {});
  }
  for (uint64_t i = 1; i <= kRounds; ++i) {
    to_device->signal(i);
    if (!to_host->wait(i, 5'000'000'000)) {
      to_device->signal(kRounds);  // let the queue drain before it is destroyed
      FAIL() << "round " << i << " lost a wake-up";
    }
  }
  q.reset();
  EXPECT_EQ(to_host->value(), kRounds);
}

// ---------------------------------------------------------------- vulkan settings

// Opens the vulkan device with a configuration, restoring the default afterwards.
class VulkanConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mb::Backend& vk = mb::vulkan_backend();
    if (!vk.is_built() || !vk.is_available()) GTEST_SKIP() << "vulkan: " << vk.unavailable_reason();
  }
  void TearDown() override { mpsrt::vk::configure(mpsrt::vk::VulkanConfig{}); }
};

// MPSRT_VULKAN_QUEUES=shared: every stream on one VkQueue, each ordering its own segments by
// its semaphore. Two streams' interleaved command buffers (segments split by host callbacks)
// must still run in each stream's order, with no spin (every wait blocks in the driver).
TEST_F(VulkanConfigTest, ASharedQueueKeepsEachStreamsOrder) {
  mpsrt::vk::VulkanConfig cfg;
  cfg.shared_queue = true;
  cfg.spin_ns = 0;
  mpsrt::vk::configure(cfg);
  std::unique_ptr<mb::Device> dev = mb::vulkan_backend().open_device(0);
  EXPECT_NE(dev->info().details.find("one shared"), std::string::npos) << dev->info().details;
  std::unique_ptr<mb::Heap> h = dev->create_heap(2 * kMiB);
  ASSERT_TRUE(h && h->host_ptr());
  auto* p = static_cast<uint8_t*>(h->host_ptr());
  std::memset(p, 0, 2 * kMiB);
  std::unique_ptr<mb::Queue> qa = dev->create_queue(0);
  std::unique_ptr<mb::Queue> qb = dev->create_queue(0);
  mb::TimelineEvent* ta = qa->timeline([](const std::string& e) { ADD_FAILURE() << e; });
  mb::TimelineEvent* tb = qb->timeline([](const std::string& e) { ADD_FAILURE() << e; });
  ASSERT_TRUE(ta && tb);
  constexpr uint64_t kRounds = 40;
  for (uint64_t i = 1; i <= kRounds; ++i) {
    for (int k = 0; k < 2; ++k) {
      mb::Queue& q = k == 0 ? *qa : *qb;
      const size_t base = k == 0 ? 0 : kMiB;
      std::unique_ptr<mb::CommandBuffer> cb = q.create_command_buffer();
      // Each round overwrites the whole range, then copies its first byte onward: a segment
      // that ran before the previous one would leave an older value behind.
      cb->fill({h.get(), base}, kMiB / 2, i, 1);
      cb->host_callback([] {});
      cb->copy({h.get(), base}, {h.get(), base + kMiB / 2}, kMiB / 2);
      q.commit(std::move(cb), nullptr);
    }
  }
  ASSERT_TRUE(ta->wait(kRounds, kSignalPatienceNs));
  ASSERT_TRUE(tb->wait(kRounds, kSignalPatienceNs));
  EXPECT_TRUE(all_bytes(p, kRounds, kMiB));
  EXPECT_TRUE(all_bytes(p + kMiB, kRounds, kMiB));
}

}  // namespace
