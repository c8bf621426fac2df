// The profiler's statistics: per-operation counts and times, copy bytes and bandwidth, and the
// allocator's activity, from a session's records.
#include <algorithm>
#include <array>
#include <cstdarg>
#include <cstdio>
#include <map>
#include <string>

#include "core/profiler_records.h"

namespace mpsrt::detail::prof {

namespace {

struct Times {
  uint64_t count = 0;
  int64_t total = 0;
  int64_t max = 0;
  void add(int64_t ns) {
    ++count;
    total += ns;
    max = std::max(max, ns);
  }
  double total_ms() const { return static_cast<double>(total) / 1e6; }
  double mean_us() const { return count == 0 ? 0.0 : static_cast<double>(total) / 1e3 / count; }
  double max_us() const { return static_cast<double>(max) / 1e3; }
};

struct OpStats {
  Times cpu, device;
  uint64_t bytes = 0;
};
using OpTable = std::array<OpStats, static_cast<size_t>(Op::kCount)>;

/// The records' kinds that are about an operation (name = an Op).
bool is_op_kind(Kind k) {
  return k == Kind::Encode || k == Kind::HostCopy || k == Kind::Device || k == Kind::Completion;
}

/// What the statistics count, from a snapshot's records.
struct Tally {
  OpTable ops{};
  uint64_t allocs = 0, frees = 0, heap_allocs = 0, heap_frees = 0, ooms = 0, marks = 0;
  uint64_t ranges = 0, peak_allocated = 0, peak_reserved = 0;
  std::map<std::string, Times, std::less<>> host_ops;  // by name, sorted
  // With device intervals, bytes and device times come from them, else from the encodes and
  // the completion instants.
  bool have_device_intervals = false;

  explicit Tally(const Snapshot& s) {
    for (const ThreadRecords& t : s.threads) {
      for (const Record& r : t.records) {
        have_device_intervals |= r.kind == Kind::Device && r.name < ops.size();
      }
    }
    for (const ThreadRecords& t : s.threads) {
      for (const Record& r : t.records) {
        if (is_op_kind(r.kind)) {
          add_op(r);
        } else {
          add_other(t, r);
        }
      }
    }
  }

 private:
  void add_op(const Record& r) {
    if (r.name >= ops.size()) return;  // not an operation of ours: no row to count it in
    OpStats& op = ops[r.name];
    if (r.kind == Kind::Encode) {
      op.cpu.add(r.end - r.begin);
      if (!have_device_intervals) op.bytes += r.a;
    } else if (r.kind == Kind::HostCopy) {
      op.cpu.add(r.end - r.begin);
      op.bytes += r.a;
    } else if (r.kind == Kind::Device) {
      op.device.add(r.end - r.begin);
      op.bytes += r.a;
    } else if (r.kind == Kind::Completion && !have_device_intervals) {
      op.device.add(static_cast<int64_t>(r.c));
    }
  }

  void add_other(const ThreadRecords& t, const Record& r) {
    switch (r.kind) {
      case Kind::Alloc:
        ++allocs;
        break;
      case Kind::Free:
        ++frees;
        break;
      case Kind::SegmentAlloc:
        ++heap_allocs;
        break;
      case Kind::SegmentFree:
        ++heap_frees;
        break;
      case Kind::Oom:
        ++ooms;
        break;
      case Kind::Counter:
        peak_allocated = std::max(peak_allocated, r.a);
        peak_reserved = std::max(peak_reserved, r.b);
        break;
      case Kind::Mark:
        ++marks;
        break;
      case Kind::Range:
      case Kind::AsyncRange:
        ++ranges;
        break;
      case Kind::HostOp: {
        const std::string_view name = record_name(t, r);
        auto it = host_ops.find(name);
        if (it == host_ops.end()) it = host_ops.emplace(std::string(name), Times{}).first;
        it->second.add(r.end - r.begin);
        break;
      }
      default:  // the operations' kinds (add_op), command buffers, empty_cache
        break;
    }
  }
};

void appendf(std::string& out, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void appendf(std::string& out, const char* fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  const int n = std::vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (n > 0) out.append(line, std::min(static_cast<size_t>(n), sizeof line - 1));
}

void section(std::string& out, const char* title, bool copies, const OpTable& ops) {
  bool any = false;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (is_copy(static_cast<Op>(i)) == copies && ops[i].cpu.count + ops[i].device.count != 0) {
      any = true;
    }
  }
  if (!any) return;
  appendf(out, "%-16s %8s %13s %12s %11s %13s %12s %11s %14s%s\n", title, "count", "cpu total ms",
          "cpu mean us", "cpu max us", "dev total ms", "dev mean us", "dev max us", "bytes",
          copies ? "      GB/s" : "");
  for (size_t i = 0; i < ops.size(); ++i) {
    const OpStats& s = ops[i];
    if (is_copy(static_cast<Op>(i)) != copies || s.cpu.count + s.device.count == 0) continue;
    appendf(out, "%-16s %8llu %13.3f %12.3f %11.3f %13.3f %12.3f %11.3f %14llu",
            op_name(static_cast<Op>(i)),
            static_cast<unsigned long long>(std::max(s.cpu.count, s.device.count)),
            s.cpu.total_ms(), s.cpu.mean_us(), s.cpu.max_us(), s.device.total_ms(),
            s.device.mean_us(), s.device.max_us(), static_cast<unsigned long long>(s.bytes));
    if (copies) {
      // Device time for device copies; the CPU's time for copies the host does itself.
      const int64_t t = s.device.total != 0 ? s.device.total : s.cpu.total;
      appendf(out, " %9.2f", t > 0 ? static_cast<double>(s.bytes) / static_cast<double>(t) : 0.0);
    }
    out.push_back('\n');
  }
}

void host_op_section(std::string& out, const Tally& n) {
  if (n.host_ops.empty()) return;
  appendf(out, "%-40s %8s %13s %12s %11s\n", "host op", "count", "cpu total ms", "cpu mean us",
          "cpu max us");
  for (const auto& [name, t] : n.host_ops) {
    appendf(out, "%-40.40s %8llu %13.3f %12.3f %11.3f\n", name.c_str(),
            static_cast<unsigned long long>(t.count), t.total_ms(), t.mean_us(), t.max_us());
  }
}

void allocator_section(std::string& out, const Tally& n) {
  appendf(out,
          "allocator: %llu allocations, %llu frees, %llu heaps created, %llu heaps released, "
          "%llu out-of-memory; peak allocated %llu bytes, peak reserved %llu bytes\n",
          static_cast<unsigned long long>(n.allocs), static_cast<unsigned long long>(n.frees),
          static_cast<unsigned long long>(n.heap_allocs),
          static_cast<unsigned long long>(n.heap_frees), static_cast<unsigned long long>(n.ooms),
          static_cast<unsigned long long>(n.peak_allocated),
          static_cast<unsigned long long>(n.peak_reserved));
  appendf(out, "ranges: %llu, marks: %llu\n", static_cast<unsigned long long>(n.ranges),
          static_cast<unsigned long long>(n.marks));
}

}  // namespace

std::string format_statistics(const Snapshot& s, uint32_t log_bits) {
  const Tally n(s);
  std::string out;
  appendf(out, "mpsrt profiler statistics: %llu records from %zu threads, %llu dropped\n",
          static_cast<unsigned long long>(s.records()), s.threads.size(),
          static_cast<unsigned long long>(s.dropped()));
  const bool all = log_bits == 0 || (log_bits & kLogAllStats) != 0;
  if (all || (log_bits & kLogOperationStats) != 0) section(out, "operation", false, n.ops);
  if (all || (log_bits & kLogCopyStats) != 0) section(out, "copy", true, n.ops);
  if (all || (log_bits & kLogCpuFallbackStats) != 0) host_op_section(out, n);
  if (all) allocator_section(out, n);
  return out;
}

}  // namespace mpsrt::detail::prof
