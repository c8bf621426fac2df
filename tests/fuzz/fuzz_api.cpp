// libFuzzer target: random sequences of public C++ calls (mpsrt/*.h) with random arguments,
// decoded from the input: allocate, free, fill, copy, copy_from_host, random_fill, record_stream,
// events, streams, memory fraction and cache limit, generator state, synchronize.
//
// Properties checked on every input (cpu backend, two devices, a hard limit of 64 MiB):
// - a call either succeeds or throws what its header documents: std::invalid_argument for a
//   bad argument, mpsrt::OutOfMemory for an allocation over the limit; anything else aborts;
// - no crash and no sanitizer report (the build uses ASan + UBSan);
// - memory holds what the successful calls wrote and nothing else: the harness keeps a copy of
//   every byte that a fill, copy or host copy defined and compares after synchronizing, so a
//   refused call that wrote anyway, or a write past a Buffer's end into a neighbour, shows;
// - after the input's buffers are gone, no byte is left allocated on either device.
// The harness orders its own work as a correct user must (a stream waits for the other streams
// that used a buffer before touching it); the runtime is asked for nothing more.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "mpsrt/mpsrt.h"

namespace {

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_api: %s\n", what.c_str());
  std::abort();
}

constexpr int kDevices = 2;
constexpr size_t kMaxBuffers = 12;
constexpr size_t kMaxEvents = 4;
constexpr uint64_t kLimit = 64ull << 20;  // the hard limit while fuzzing

double g_fraction[kDevices];  // gives kLimit on each device
std::vector<mpsrt::Stream> g_streams[kDevices];

// A Buffer with the harness's knowledge of its bytes.
struct Tracked {
  mpsrt::Buffer buf;
  int device = 0;
  std::vector<uint8_t> bytes;  // expected content where known[i]
  std::vector<bool> known;
  std::vector<mpsrt::Stream> users;  // streams that used it since the last write
};

struct State {
  std::vector<std::unique_ptr<Tracked>> bufs;
  std::vector<mpsrt::Event> events;
  mpsrt::Generator gens[kDevices] = {mpsrt::Generator(0), mpsrt::Generator(1)};
  mpsrt::Generator moved{0};

  State() { mpsrt::Generator taken(std::move(moved)); }  // `moved` is empty from here on
};

// The documented exceptions; anything else is a failure of the runtime.
template <typename F>
bool attempt(const char* what, F&& f) {
  try {
    f();
    return true;
  } catch (const mpsrt::OutOfMemory&) {
    return false;
  } catch (const std::invalid_argument&) {
    return false;
  } catch (const std::exception& e) {
    fail(std::string(what) + " threw an undocumented exception: " + e.what());
  }
}

int pick_device(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 7)) {
    case 0:
      return -1;  // the current device
    case 1:
      return kDevices;
    case 2:
      return in.ConsumeIntegral<int>();
    default:
      return in.ConsumeIntegralInRange<int>(0, kDevices - 1);
  }
}

mpsrt::Stream pick_stream(FuzzedDataProvider& in, int device_hint) {
  const int choice = in.ConsumeIntegralInRange<int>(0, 15);
  if (choice == 0) return mpsrt::Stream::from_handle(0);
  const int d = choice == 1 ? 1 - device_hint : device_hint;
  const auto& v = g_streams[d < 0 || d >= kDevices ? 0 : d];
  return v[in.ConsumeIntegralInRange<size_t>(0, v.size() - 1)];
}

Tracked* pick_buf(State& st, FuzzedDataProvider& in) {
  if (st.bufs.empty()) return nullptr;
  return st.bufs[in.ConsumeIntegralInRange<size_t>(0, st.bufs.size() - 1)].get();
}

double pick_double(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 9)) {
    case 0:
      return std::numeric_limits<double>::quiet_NaN();
    case 1:
      return std::numeric_limits<double>::infinity();
    case 2:
      return -std::numeric_limits<double>::infinity();
    case 3:
      return in.ConsumeFloatingPoint<double>();
    case 4:
      return -in.ConsumeProbability<double>();
    default:
      return in.ConsumeProbability<double>() * 4.0 - 1.0;
  }
}

// Makes `s` wait for every other stream that used the buffers, as a correct user does.
void order_after(const mpsrt::Stream& s, std::initializer_list<const Tracked*> bufs) {
  if (s.handle() == 0) return;  // the empty Stream
  for (const Tracked* t : bufs) {
    for (const mpsrt::Stream& u : t->users) {
      mpsrt::Stream x = s;
      if (u != s && u.device() == s.device()) attempt("wait_stream", [&] { x.wait_stream(u); });
    }
  }
}

void check_contents(State& st) {
  for (int d = 0; d < kDevices; ++d) mpsrt::synchronize(d);
  for (const auto& t : st.bufs) {
    if (!t->buf.defined()) continue;
    const auto* p = static_cast<const uint8_t*>(t->buf.host_ptr());
    if (p == nullptr) fail("a cpu Buffer has no host pointer");
    for (size_t i = 0; i < t->bytes.size(); ++i) {
      if (t->known[i] && p[i] != t->bytes[i]) {
        fail("byte " + std::to_string(i) + " of a " + std::to_string(t->bytes.size()) +
             "-byte Buffer is " + std::to_string(p[i]) + ", expected " +
             std::to_string(t->bytes[i]));
      }
    }
  }
}

size_t element_size(mpsrt::RandomSpec::DType d) {
  using D = mpsrt::RandomSpec::DType;
  switch (d) {
    case D::U8:
    case D::I8:
    case D::Bool:
      return 1;
    case D::F16:
    case D::BF16:
    case D::I16:
    case D::U16:
      return 2;
    case D::I64:
    case D::U64:
    case D::F64:
      return 8;
    default:
      return 4;
  }
}

void step(State& st, FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 17)) {
    case 0: {  // allocate
      if (st.bufs.size() >= kMaxBuffers) return;
      size_t n;
      switch (in.ConsumeIntegralInRange<int>(0, 15)) {
        case 0:
          n = in.ConsumeIntegral<size_t>();  // mostly over the limit: OutOfMemory
          break;
        case 1:
          n = in.ConsumeIntegralInRange<size_t>(0, 2u << 20);  // a large-pool block
          break;
        case 2:
        case 3:
          n = in.ConsumeIntegralInRange<size_t>(0, 64u << 10);
          break;
        default:
          n = in.ConsumeIntegralInRange<size_t>(0, 2048);
      }
      const int d = in.ConsumeIntegralInRange<int>(0, kDevices - 1);
      const mpsrt::Stream s = pick_stream(in, d);
      auto t = std::make_unique<Tracked>();
      if (!attempt("Buffer()", [&] { t->buf = mpsrt::Buffer(n, s); })) return;
      t->device = s.device();
      t->bytes.assign(t->buf.nbytes(), 0);
      t->known.assign(t->buf.nbytes(), false);
      if (t->buf.defined()) t->users.push_back(s);
      st.bufs.push_back(std::move(t));
      return;
    }
    case 1: {  // free
      if (st.bufs.empty()) return;
      const size_t i = in.ConsumeIntegralInRange<size_t>(0, st.bufs.size() - 1);
      if (in.ConsumeBool()) {
        st.bufs[i]->buf.reset();  // a released Buffer stays in the table
        st.bufs[i]->bytes.clear();
        st.bufs[i]->known.clear();
      } else {
        st.bufs.erase(st.bufs.begin() + static_cast<long>(i));
      }
      return;
    }
    case 2: {  // fill
      Tracked* t = pick_buf(st, in);
      if (t == nullptr) return;
      const uint64_t pattern = in.ConsumeIntegral<uint64_t>();
      static constexpr unsigned kSizes[] = {1, 2, 4, 8, 0, 3, 16};
      const unsigned size = in.ConsumeBool() ? in.ConsumeIntegral<unsigned>()
                                             : kSizes[in.ConsumeIntegralInRange<int>(0, 6)];
      const mpsrt::Stream s = pick_stream(in, t->device);
      order_after(s, {t});
      if (!attempt("fill", [&] { t->buf.fill(pattern, size, s); })) return;
      if (!t->buf.defined()) return;
      const size_t n = t->bytes.size() / size * size;
      for (size_t i = 0; i < n; ++i) {
        t->bytes[i] = static_cast<uint8_t>(pattern >> (8 * (i % size)));
        t->known[i] = true;
      }
      t->users = {s};
      return;
    }
    case 3: {  // copy
      Tracked* dst = pick_buf(st, in);
      Tracked* src = pick_buf(st, in);
      if (dst == nullptr) return;
      const mpsrt::Stream s = pick_stream(in, dst->device);
      order_after(s, {dst, src});
      if (!attempt("copy_from", [&] { dst->buf.copy_from(src->buf, s); })) return;
      if (!dst->buf.defined()) return;
      if (dst != src) {
        dst->bytes = src->bytes;
        dst->known = src->known;
        src->users.push_back(s);
      }
      dst->users = {s};
      return;
    }
    case 4: {  // copy_from_host
      Tracked* t = pick_buf(st, in);
      if (t == nullptr) return;
      size_t n = t->bytes.size();
      const int how = in.ConsumeIntegralInRange<int>(0, 5);
      if (how == 0) n = in.ConsumeIntegralInRange<size_t>(0, 8192);
      if (how == 1) n += 1;
      std::vector<uint8_t> host = in.ConsumeBytes<uint8_t>(n);
      host.resize(n);
      const void* src = host.data();
      if (how == 2) src = nullptr;
      if (how == 3 && t->buf.defined()) src = t->buf.host_ptr();  // the Buffer's own memory
      if (!attempt("copy_from_host", [&] { t->buf.copy_from_host(src, n); })) return;
      if (!t->buf.defined()) return;
      if (how == 3) {
        // Unchanged; the harness forgets them rather than model the device's pending work.
        t->known.assign(n, false);
      } else {
        t->bytes = host;
        t->known.assign(n, true);
      }
      t->users.clear();
      return;
    }
    case 5: {  // random_fill
      Tracked* t = pick_buf(st, in);
      if (t == nullptr) return;
      mpsrt::RandomSpec spec;
      // Half the time a well-formed spec (a supported pair, default parameters), so that counts
      // and targets are what decides; else every field at random.
      const bool well_formed = in.ConsumeBool();
      if (well_formed) {
        spec.op = static_cast<mpsrt::RandomSpec::Op>(in.ConsumeIntegralInRange<uint8_t>(0, 4));
        std::vector<mpsrt::RandomSpec::DType> ok;
        for (uint8_t d = 0; d <= 12; ++d) {
          const auto dt = static_cast<mpsrt::RandomSpec::DType>(d);
          if (mpsrt::random_supported(spec.op, dt)) ok.push_back(dt);
        }
        spec.dtype = ok[in.ConsumeIntegralInRange<size_t>(0, ok.size() - 1)];
        spec.range = in.ConsumeIntegralInRange<uint64_t>(1, 200);
        spec.p = in.ConsumeProbability<double>();
      } else {
        spec.op = static_cast<mpsrt::RandomSpec::Op>(
            in.ConsumeBool() ? in.ConsumeIntegral<uint8_t>()
                             : in.ConsumeIntegralInRange<uint8_t>(0, 4));
        spec.dtype = static_cast<mpsrt::RandomSpec::DType>(
            in.ConsumeBool() ? in.ConsumeIntegral<uint8_t>()
                             : in.ConsumeIntegralInRange<uint8_t>(0, 12));
        spec.a = pick_double(in);
        spec.b = pick_double(in);
        spec.low = in.ConsumeBool() ? in.ConsumeIntegral<int64_t>()
                                    : in.ConsumeIntegralInRange<int64_t>(-300, 300);
        spec.range = in.ConsumeBool() ? in.ConsumeIntegral<uint64_t>()
                                      : in.ConsumeIntegralInRange<uint64_t>(0, 300);
        spec.p = pick_double(in);
      }
      const size_t cap = t->bytes.size() / element_size(spec.dtype);
      uint64_t count;
      switch (in.ConsumeIntegralInRange<int>(0, 3)) {
        case 0:
          count = in.ConsumeIntegral<uint64_t>();
          break;
        case 1:
          count = cap + in.ConsumeIntegralInRange<uint64_t>(1, 64);
          break;
        default:
          count = in.ConsumeIntegralInRange<uint64_t>(0, cap);
      }
      const int g = well_formed ? t->device : in.ConsumeIntegralInRange<int>(0, 4);
      mpsrt::Generator& gen = g == 4 ? st.moved : st.gens[g % kDevices];
      const mpsrt::Stream s = pick_stream(in, t->device);
      order_after(s, {t});
      if (!attempt("random_fill", [&] { mpsrt::random_fill(t->buf, count, spec, gen, s); })) {
        return;
      }
      if (count == 0) return;
      if (count > cap) fail("random_fill accepted a count past the end of the Buffer");
      const size_t n = count * element_size(spec.dtype);
      for (size_t i = 0; i < n; ++i) t->known[i] = false;
      t->users = {s};
      return;
    }
    case 6: {  // record_stream
      Tracked* t = pick_buf(st, in);
      if (t == nullptr) return;
      const mpsrt::Stream s = pick_stream(in, t->device);
      if (attempt("record_stream", [&] { t->buf.record_stream(s); }) && t->buf.defined()) {
        t->users.push_back(s);
      }
      return;
    }
    case 7: {  // event record
      if (st.events.size() < kMaxEvents && in.ConsumeBool())
        st.events.emplace_back(in.ConsumeBool());
      if (st.events.empty()) return;
      mpsrt::Event& e = st.events[in.ConsumeIntegralInRange<size_t>(0, st.events.size() - 1)];
      const mpsrt::Stream s = pick_stream(in, in.ConsumeIntegralInRange<int>(0, kDevices - 1));
      attempt("Event::record", [&] { e.record(s); });
      return;
    }
    case 8: {  // event wait
      if (st.events.empty()) return;
      mpsrt::Event& e = st.events[in.ConsumeIntegralInRange<size_t>(0, st.events.size() - 1)];
      mpsrt::Stream s = pick_stream(in, e.device() < 0 ? 0 : e.device());
      const bool on_event = in.ConsumeBool();
      attempt("Event::wait", [&] {
        if (on_event) {
          e.wait(s);
        } else {
          s.wait_event(e);
        }
      });
      return;
    }
    case 9: {  // event query / synchronize / elapsed_time
      if (st.events.empty()) return;
      mpsrt::Event& e = st.events[in.ConsumeIntegralInRange<size_t>(0, st.events.size() - 1)];
      mpsrt::Event& f = st.events[in.ConsumeIntegralInRange<size_t>(0, st.events.size() - 1)];
      switch (in.ConsumeIntegralInRange<int>(0, 2)) {
        case 0:
          attempt("Event::query", [&] { (void)e.query(); });
          break;
        case 1:
          attempt("Event::synchronize", [&] { e.synchronize(); });
          break;
        default:
          attempt("Event::elapsed_time", [&] { (void)e.elapsed_time(f); });
      }
      return;
    }
    case 10: {  // streams
      mpsrt::Stream s = pick_stream(in, in.ConsumeIntegralInRange<int>(0, kDevices - 1));
      const mpsrt::Stream o = pick_stream(in, in.ConsumeIntegralInRange<int>(0, kDevices - 1));
      switch (in.ConsumeIntegralInRange<int>(0, 4)) {
        case 0:
          attempt("Stream::wait_stream", [&] { s.wait_stream(o); });
          break;
        case 1: {
          const auto type = static_cast<mpsrt::SyncType>(
              in.ConsumeBool() ? in.ConsumeIntegral<int>() : in.ConsumeIntegralInRange<int>(0, 4));
          attempt("Stream::commit", [&] { s.commit(type); });
          break;
        }
        case 2:
          attempt("Stream::query", [&] { (void)s.query(); });
          break;
        case 3:
          attempt("Stream::synchronize", [&] { s.synchronize(); });
          break;
        default:
          attempt("stream_from_pool", [&] {
            (void)mpsrt::stream_from_pool(in.ConsumeIntegral<int>(), pick_device(in));
          });
      }
      return;
    }
    case 11: {  // memory fraction: validated, then the harness's limit again
      const double f = pick_double(in);
      const int d = pick_device(in);
      if (attempt("set_per_process_memory_fraction",
                  [&] { mpsrt::set_per_process_memory_fraction(f, d); })) {
        const int dd = d < 0 ? mpsrt::current_device() : d;
        mpsrt::set_per_process_memory_fraction(g_fraction[dd], dd);
      }
      return;
    }
    case 12: {  // cache limit
      const size_t bytes = in.ConsumeBool() ? in.ConsumeIntegral<size_t>()
                                            : in.ConsumeIntegralInRange<size_t>(0, 1u << 24);
      attempt("set_cache_limit", [&] { mpsrt::set_cache_limit(bytes, pick_device(in)); });
      return;
    }
    case 13: {  // synchronize / empty_cache / statistics of a device
      const int d = pick_device(in);
      switch (in.ConsumeIntegralInRange<int>(0, 2)) {
        case 0:
          attempt("synchronize", [&] { mpsrt::synchronize(d); });
          break;
        case 1:
          attempt("empty_cache", [&] { mpsrt::empty_cache(d); });
          break;
        default:
          attempt("memory_stats", [&] { (void)mpsrt::memory_stats(d); });
      }
      return;
    }
    case 14: {  // generator state
      mpsrt::Generator& g =
          in.ConsumeBool() ? st.moved : st.gens[in.ConsumeIntegralInRange<int>(0, 1)];
      switch (in.ConsumeIntegralInRange<int>(0, 3)) {
        case 0: {
          const size_t n =
              in.ConsumeBool() ? mpsrt::kRngStateSize : in.ConsumeIntegralInRange<size_t>(0, 64);
          std::vector<uint8_t> blob = in.ConsumeBytes<uint8_t>(n);
          blob.resize(n);
          const bool null = in.ConsumeIntegralInRange<int>(0, 7) == 0;
          attempt("Generator::set_state", [&] { g.set_state(null ? nullptr : blob.data(), n); });
          break;
        }
        case 1:
          attempt("Generator::set_offset", [&] { g.set_offset(in.ConsumeIntegral<uint64_t>()); });
          break;
        case 2:
          attempt("Generator::manual_seed", [&] { g.manual_seed(in.ConsumeIntegral<uint64_t>()); });
          break;
        default:
          attempt("Generator::get_state", [&] { (void)g.get_state(); });
      }
      return;
    }
    case 15: {  // devices
      const int d = pick_device(in);
      if (attempt("set_device", [&] { mpsrt::set_device(d); })) mpsrt::set_device(0);
      attempt("get_device_properties", [&] { (void)mpsrt::get_device_properties(d); });
      return;
    }
    case 16: {  // reclaim callbacks
      const int d = pick_device(in);
      int id = -1;
      attempt("add_reclaim_callback",
              [&] { id = mpsrt::add_reclaim_callback([](size_t) { return false; }, d); });
      attempt("remove_reclaim_callback", [&] {
        mpsrt::remove_reclaim_callback(in.ConsumeBool() ? id : in.ConsumeIntegral<int>(), d);
      });
      if (id >= 0)
        attempt("remove_reclaim_callback", [&] { mpsrt::remove_reclaim_callback(id, d); });
      return;
    }
    default:
      check_contents(st);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("MPSRT_BACKEND", "cpu", 1);
  setenv("MPSRT_CPU_DEVICES", "2", 1);
  // Two cores at most: no spinning worker threads, one kernel thread (results are the same).
  setenv("MPSRT_CPU_SPIN_US", "0", 1);
  setenv("MPSRT_CPU_THREADS", "1", 1);
  for (int d = 0; d < kDevices; ++d) {
    const double rec = static_cast<double>(mpsrt::recommended_max_memory(d));
    g_fraction[d] = std::min(2.0, static_cast<double>(kLimit) / rec);
    mpsrt::set_per_process_memory_fraction(g_fraction[d], d);
    g_streams[d] = {mpsrt::default_stream(d), mpsrt::stream_from_pool(0, d),
                    mpsrt::stream_from_pool(-1, d)};
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  {
    State st;
    for (int i = 0; i < 64 && in.remaining_bytes() > 0; ++i) step(st, in);
    check_contents(st);
  }
  for (int d = 0; d < kDevices; ++d) {
    mpsrt::synchronize(d);
    mpsrt::set_cache_limit(std::numeric_limits<size_t>::max(), d);
    const uint64_t left = mpsrt::current_allocated_memory(d);
    if (left != 0)
      fail(std::to_string(left) + " bytes left allocated on device " + std::to_string(d));
  }
  if (mpsrt::current_device() != 0) fail("the current device changed");
  return 0;
}
