#include "core/allocator/stats.h"

namespace mpsrt::detail {

namespace {
void add(StatArray& a, Pool pool, int64_t n) {
  a[0].add(n);
  a[pool == Pool::Small ? 1 : 2].add(n);
}
void sub(StatArray& a, Pool pool, int64_t n) {
  a[0].sub(n);
  a[pool == Pool::Small ? 1 : 2].sub(n);
}
}  // namespace

void MemoryStats::on_event(const AllocEvent& e) {
  const auto size = static_cast<int64_t>(e.size);
  switch (e.action) {
    case AllocAction::Alloc:
      add(allocated_bytes, e.pool, size);
      add(requested_bytes, e.pool, static_cast<int64_t>(e.requested));
      add(allocation, e.pool, 1);
      break;
    case AllocAction::FreeRequested:
      sub(allocated_bytes, e.pool, size);
      sub(requested_bytes, e.pool, static_cast<int64_t>(e.requested));
      sub(allocation, e.pool, 1);
      break;
    case AllocAction::SegmentAlloc:
      add(reserved_bytes, e.pool, size);
      add(segment, e.pool, 1);
      ++num_device_alloc;
      break;
    case AllocAction::SegmentFree:
      sub(reserved_bytes, e.pool, size);
      sub(segment, e.pool, 1);
      ++num_device_free;
      break;
    case AllocAction::Retry:
      ++num_alloc_retries;
      break;
    case AllocAction::Oom:
      ++num_ooms;
      break;
    case AllocAction::EmptyCache:
      ++num_empty_cache;
      break;
    case AllocAction::SyncAllStreams:
      ++num_sync_all_streams;
      break;
    case AllocAction::FreeCompleted:
      break;
  }
}

void MemoryStats::reset_peak() {
  for (StatArray* a :
       {&allocated_bytes, &reserved_bytes, &requested_bytes, &allocation, &segment}) {
    for (Stat& s : *a) s.peak = s.current;
  }
}

void MemoryStats::reset_accumulated() {
  for (StatArray* a :
       {&allocated_bytes, &reserved_bytes, &requested_bytes, &allocation, &segment}) {
    for (Stat& s : *a) s.reset_accumulated();
  }
  num_alloc_retries = 0;
  num_ooms = 0;
  num_device_alloc = 0;
  num_device_free = 0;
  num_empty_cache = 0;
  num_sync_all_streams = 0;
}

std::map<std::string, int64_t> MemoryStats::to_map(const StatArray& inactive_split_bytes,
                                                   const StatArray& inactive_split) const {
  std::map<std::string, int64_t> m;
  static const char* kPools[] = {"all", "small_pool", "large_pool"};
  auto put = [&](const char* name, const StatArray& a, bool with_peak) {
    for (int p = 0; p < 3; ++p) {
      const std::string prefix = std::string(name) + "." + kPools[p] + ".";
      m[prefix + "current"] = a[static_cast<size_t>(p)].current;
      if (with_peak) m[prefix + "peak"] = a[static_cast<size_t>(p)].peak;
      m[prefix + "allocated"] = a[static_cast<size_t>(p)].allocated;
      m[prefix + "freed"] = a[static_cast<size_t>(p)].freed;
    }
  };
  put("allocated_bytes", allocated_bytes, true);
  put("active_bytes", allocated_bytes, true);
  put("requested_bytes", requested_bytes, true);
  put("reserved_bytes", reserved_bytes, true);
  put("allocation", allocation, true);
  put("active", allocation, true);
  put("segment", segment, true);
  put("inactive_split_bytes", inactive_split_bytes, false);
  put("inactive_split", inactive_split, false);
  m["num_alloc_retries"] = num_alloc_retries;
  m["num_ooms"] = num_ooms;
  m["num_device_alloc"] = num_device_alloc;
  m["num_device_free"] = num_device_free;
  m["num_empty_cache"] = num_empty_cache;
  m["num_sync_all_streams"] = num_sync_all_streams;
  m["max_split_size"] = -1;
  return m;
}

}  // namespace mpsrt::detail
