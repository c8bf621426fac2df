// The names of the profiler's records and a snapshot's totals (see profiler_records.h).
#include "core/profiler_records.h"

namespace mpsrt::detail::prof {

namespace {
// The name of a record whose op or string is not one of ours.
constexpr const char* kUnknown = "unknown";
}  // namespace

const char* op_name(Op op) noexcept {
  static constexpr const char* kNames[] = {
      "fill",       "copy",           "copy_from_host", "random_bits",   "uniform",
      "normal",     "random_int",     "bernoulli",      "host_callback", "event_record",
      "event_wait", "command_buffer", "copy_to_host",   "kernel",        "copy_peer"};
  static_assert(sizeof kNames / sizeof kNames[0] == static_cast<size_t>(Op::kCount));
  const auto i = static_cast<size_t>(op);
  return MPSRT_LIKELY(i < static_cast<size_t>(Op::kCount)) ? kNames[i] : kUnknown;
}

std::string_view record_name(const ThreadRecords& t, const Record& r) {
  if (r.kind == Kind::Mark || r.kind == Kind::Range || r.kind == Kind::AsyncRange ||
      r.kind == Kind::HostOp) {
    return r.name < t.strings.size() ? std::string_view(t.strings[r.name]) : kUnknown;
  }
  switch (r.kind) {
    case Kind::Alloc:
      return "alloc";
    case Kind::Free:
      return "free";
    case Kind::SegmentAlloc:
      return "heap_alloc";
    case Kind::SegmentFree:
      return "heap_free";
    case Kind::Oom:
      return "out_of_memory";
    case Kind::EmptyCache:
      return "empty_cache";
    case Kind::Counter:
      return "memory";
    default:  // checked before the cast: an Op is 8 bits, a name 32
      return r.name < static_cast<uint32_t>(Op::kCount) ? op_name(static_cast<Op>(r.name))
                                                        : kUnknown;
  }
}

uint64_t Snapshot::records() const {
  uint64_t n = 0;
  for (const ThreadRecords& t : threads) n += t.records.size();
  return n;
}

uint64_t Snapshot::dropped() const {
  uint64_t n = 0;
  for (const ThreadRecords& t : threads) n += t.dropped;
  return n;
}

}  // namespace mpsrt::detail::prof
