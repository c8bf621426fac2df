// The Chrome/Perfetto trace writer (the JSON "Trace Event Format").
//
// Tracks: the host process (pid = getpid()) has one thread track per recording thread (encode
// intervals, host copies, ranges, marks, allocator instants); every device is a process of its
// own (pid = kDevicePidBase + index) with one thread track per stream (tid = stream id + 1:
// command buffers with their commands' device intervals nested inside, completion instants)
// and two counters, "allocated" and "reserved" (bytes). Flow arrows ("s" at the encode,
// "f" bound to the enclosing device interval) join each command's encode to its execution.
// Timestamps are microseconds of the steady clock with nanosecond decimals.
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <utility>

#include "core/profiler_records.h"
#include "mpsrt/error.h"

namespace mpsrt::detail::prof {

namespace {

constexpr int kDevicePidBase = 1 << 24;

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

/// A buffered JSON writer: appends to a string, flushed to the file every few MiB.
class Writer {
 public:
  explicit Writer(std::FILE* f) : f_(f) { buf_.reserve(kFlushAt + 4096); }
  void raw(std::string_view s) { buf_.append(s); }
  void ch(char c) { buf_.push_back(c); }
  void num(uint64_t v) {
    char tmp[24];
    const auto r = std::to_chars(tmp, tmp + sizeof tmp, v);
    buf_.append(tmp, static_cast<size_t>(r.ptr - tmp));
  }
  void num(int64_t v) {
    if (v < 0) {
      ch('-');
      v = -v;
    }
    num(static_cast<uint64_t>(v));
  }
  void num(int v) { num(static_cast<int64_t>(v)); }
  /// Nanoseconds as microseconds with three decimals.
  void us(int64_t ns) {
    if (ns < 0) ns = 0;
    num(static_cast<uint64_t>(ns / 1000));
    const auto frac = static_cast<unsigned>(ns % 1000);
    const char d[4] = {'.', static_cast<char>('0' + frac / 100),
                       static_cast<char>('0' + frac / 10 % 10), static_cast<char>('0' + frac % 10)};
    buf_.append(d, 4);
  }
  void str(std::string_view s) {
    ch('"');
    for (const char c : s) {
      const auto u = static_cast<unsigned char>(c);
      if (c == '"' || c == '\\') {
        ch('\\');
        ch(c);
      } else if (u < 0x20) {
        char esc[8];
        std::snprintf(esc, sizeof esc, "\\u%04x", u);
        raw(esc);
      } else {
        ch(c);
      }
    }
    ch('"');
  }
  /// Starts an event object (the separator before it included).
  void begin_event() {
    if (events_++ != 0) ch(',');
    raw("\n{");
  }
  void maybe_flush() {
    if (buf_.size() >= kFlushAt) flush();
  }
  void flush() {
    if (!buf_.empty() && std::fwrite(buf_.data(), 1, buf_.size(), f_) != buf_.size()) {
      failed_ = true;
    }
    buf_.clear();
  }
  bool failed() const { return failed_; }
  uint64_t events() const { return events_; }

 private:
  static constexpr size_t kFlushAt = 4 << 20;
  std::FILE* f_;
  std::string buf_;
  uint64_t events_ = 0;
  bool failed_ = false;
};

/// `"ph":"X","name":..,"cat":..,"pid":..,"tid":..,"ts":..` and "dur" for intervals.
void head(Writer& w, char ph, std::string_view name, const char* cat, int pid, int64_t tid,
          int64_t begin) {
  w.begin_event();
  w.raw("\"ph\":\"");
  w.ch(ph);
  w.raw("\",\"name\":");
  w.str(name);
  w.raw(",\"cat\":\"");
  w.raw(cat);
  w.raw("\",\"pid\":");
  w.num(pid);
  w.raw(",\"tid\":");
  w.num(tid);
  w.raw(",\"ts\":");
  w.us(begin);
}

void interval(Writer& w, std::string_view name, const char* cat, int pid, int64_t tid,
              const Record& r) {
  head(w, 'X', name, cat, pid, tid, r.begin);
  w.raw(",\"dur\":");
  w.us(std::max<int64_t>(r.end - r.begin, 0));
}

void instant(Writer& w, std::string_view name, const char* cat, int pid, int64_t tid, int64_t at) {
  head(w, 'i', name, cat, pid, tid, at);
  w.raw(",\"s\":\"t\"");
}

void flow(Writer& w, char ph, uint64_t id, int pid, int64_t tid, const Record& r) {
  // Bound to the enclosing slice: the middle of the interval the arrow starts or ends at.
  head(w, ph, "dispatch", "flow", pid, tid, r.begin + (r.end - r.begin) / 2);
  w.raw(",\"id\":");
  w.num(id);
  if (ph == 'f') w.raw(",\"bp\":\"e\"");
  w.ch('}');
}

void metadata(Writer& w, const char* what, int pid, int64_t tid, std::string_view key,
              std::string_view name, int64_t sort_index) {
  w.begin_event();
  w.raw("\"ph\":\"M\",\"name\":\"");
  w.raw(what);
  w.raw("\",\"pid\":");
  w.num(pid);
  w.raw(",\"tid\":");
  w.num(tid);
  w.raw(",\"args\":{\"");
  w.raw(key);
  w.raw("\":");
  if (name.empty()) {
    w.num(sort_index);
  } else {
    w.str(name);
  }
  w.raw("}}");
}

void bytes_args(Writer& w, const Record& r) {
  w.raw(",\"args\":{\"bytes\":");
  w.num(r.a);
  w.raw(",\"device\":");
  w.num(static_cast<int>(r.device));
  if (r.stream >= 0) {
    w.raw(",\"stream\":");
    w.num(static_cast<int64_t>(r.stream));
  }
}

/// Where a record goes: the recording thread's track of the host process, or the track of its
/// stream in its device's process.
struct Track {
  int host_pid;
  int64_t thread;
  int dev_pid;
  int64_t stream;
};

/// A command's CPU encode, device interval or completion, or a host copy.
void write_op(Writer& w, std::string_view name, const Track& k, const Record& r) {
  switch (r.kind) {
    case Kind::Encode:
      interval(w, name, "encode", k.host_pid, k.thread, r);
      bytes_args(w, r);
      w.raw("}}");
      flow(w, 's', r.b, k.host_pid, k.thread, r);
      break;
    case Kind::Device:
      interval(w, name, "device", k.dev_pid, k.stream, r);
      bytes_args(w, r);
      w.raw("}}");
      flow(w, 'f', r.b, k.dev_pid, k.stream, r);
      break;
    case Kind::Completion:
      instant(w, name, "completion", k.dev_pid, k.stream, r.begin);
      bytes_args(w, r);
      w.raw(",\"device_ns\":");
      w.num(r.c);
      w.raw("}}");
      break;
    default:  // Kind::HostCopy
      interval(w, name, "copy", k.host_pid, k.thread, r);
      bytes_args(w, r);
      w.raw("}}");
      break;
  }
}

void write_command_buffer(Writer& w, std::string_view name, const Track& k, const Record& r) {
  interval(w, name, "command_buffer", k.dev_pid, k.stream, r);
  w.raw(",\"args\":{\"commands\":");
  w.num(r.a);
  w.raw(",\"commit_ns\":");
  w.num(r.b);
  w.raw(",\"completion_ns\":");
  w.num(r.c);
  w.raw("}}");
}

/// A mark, a range, an async range or a host op.
void write_annotation(Writer& w, std::string_view name, const Track& k, const Record& r) {
  switch (r.kind) {
    case Kind::Mark:
      instant(w, name, "mark", k.host_pid, k.thread, r.begin);
      w.ch('}');
      break;
    case Kind::Range:
      interval(w, name, "range", k.host_pid, k.thread, r);
      w.raw(",\"args\":{\"depth\":");
      w.num(r.a);
      w.raw("}}");
      break;
    case Kind::AsyncRange:
      // An async slice (begin and end share the id): its own row under the process, since
      // such ranges may overlap without nesting and end on another thread.
      for (const auto& [ph, ts] : {std::pair<char, int64_t>{'b', r.begin}, {'e', r.end}}) {
        head(w, ph, name, "range", k.host_pid, k.thread, ts);
        w.raw(",\"id\":");
        w.num(r.a);
        w.ch('}');
      }
      break;
    default:  // Kind::HostOp
      interval(w, name, "host_op", k.dev_pid, k.stream, r);
      w.raw(",\"args\":{\"device\":");
      w.num(static_cast<int>(r.device));
      w.raw(",\"stream\":");
      w.num(static_cast<int64_t>(r.stream));
      w.raw("}}");
      break;
  }
}

void write_counter(Writer& w, const Track& k, const Record& r) {
  for (const auto& [series, value] : {std::pair<const char*, uint64_t>{"allocated", r.a},
                                      std::pair<const char*, uint64_t>{"reserved", r.b}}) {
    head(w, 'C', series, "memory", k.dev_pid, 0, r.begin);
    w.raw(",\"args\":{\"bytes\":");
    w.num(value);
    w.raw("}}");
  }
}

/// An allocation, free, heap creation or release, out-of-memory or empty_cache.
void write_allocator(Writer& w, std::string_view name, const Track& k, const Record& r) {
  instant(w, name, "allocator", k.host_pid, k.thread, r.begin);
  w.raw(",\"args\":{\"bytes\":");
  w.num(r.a);
  w.raw(",\"device\":");
  w.num(static_cast<int>(r.device));
  if (r.kind != Kind::Oom && r.kind != Kind::EmptyCache) {
    char addr[24];
    std::snprintf(addr, sizeof addr, "%#llx", static_cast<unsigned long long>(r.b));
    w.raw(",\"address\":");
    w.str(addr);
    w.raw(",\"pool\":");
    w.str(r.stream == 0 ? "small" : "large");
  }
  w.raw("}}");
}

void write_record(Writer& w, const ThreadRecords& t, const Record& r, int host_pid) {
  const std::string_view name = record_name(t, r);
  const Track k{host_pid, t.tid, kDevicePidBase + r.device, static_cast<int64_t>(r.stream) + 1};
  switch (r.kind) {
    case Kind::Encode:
    case Kind::Device:
    case Kind::Completion:
    case Kind::HostCopy:
      write_op(w, name, k, r);
      break;
    case Kind::CommandBuffer:
      write_command_buffer(w, name, k, r);
      break;
    case Kind::Mark:
    case Kind::Range:
    case Kind::AsyncRange:
    case Kind::HostOp:
      write_annotation(w, name, k, r);
      break;
    case Kind::Counter:
      write_counter(w, k, r);
      break;
    case Kind::Alloc:
    case Kind::Free:
    case Kind::SegmentAlloc:
    case Kind::SegmentFree:
    case Kind::Oom:
    case Kind::EmptyCache:
      write_allocator(w, name, k, r);
      break;
  }
}

/// The names and order of the tracks: the host process and its threads, each device's process
/// and its streams.
void write_track_names(Writer& w, const Snapshot& s) {
  metadata(w, "process_name", s.pid, 0, "name", "host (pid " + std::to_string(s.pid) + ")", 0);
  metadata(w, "process_sort_index", s.pid, 0, "sort_index", "", 0);
  std::set<std::pair<int, int64_t>> streams;
  std::set<int> devices;
  for (const ThreadRecords& t : s.threads) {
    const std::string tname =
        (t.name.empty() ? std::string("thread") : t.name) + " (tid " + std::to_string(t.tid) + ")";
    metadata(w, "thread_name", s.pid, t.tid, "name", tname, 0);
    for (const Record& r : t.records) {
      devices.insert(r.device);
      if (r.kind == Kind::Device || r.kind == Kind::Completion || r.kind == Kind::CommandBuffer ||
          r.kind == Kind::HostOp) {
        streams.emplace(r.device, r.stream);
      }
    }
  }
  for (const DeviceName& d : s.devices) devices.insert(d.index);
  for (const int d : devices) {
    std::string name = "mpsrt device " + std::to_string(d);
    for (const DeviceName& dn : s.devices) {
      if (dn.index == d) name += " (" + dn.name + ")";
    }
    metadata(w, "process_name", kDevicePidBase + d, 0, "name", name, 0);
    metadata(w, "process_sort_index", kDevicePidBase + d, 0, "sort_index", "", 1 + d);
  }
  for (const auto& [d, id] : streams) {
    metadata(w, "thread_name", kDevicePidBase + d, id + 1, "name",
             "stream " + std::to_string(id) + (id == 0 ? " (default)" : ""), 0);
  }
}

/// Each thread's records, parents before children at equal start times: by begin, then by end
/// descending.
void write_records(Writer& w, const Snapshot& s) {
  std::vector<const Record*> order;
  for (const ThreadRecords& t : s.threads) {
    order.clear();
    order.reserve(t.records.size());
    for (const Record& r : t.records) order.push_back(&r);
    std::stable_sort(order.begin(), order.end(), [](const Record* a, const Record* b) {
      return a->begin != b->begin ? a->begin < b->begin : a->end > b->end;
    });
    for (const Record* r : order) {
      write_record(w, t, *r, s.pid);
      w.maybe_flush();
    }
  }
}

}  // namespace

profiler::TraceSummary write_trace_json(const Snapshot& s, const std::string& path) {
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "wb"));
  if (!f) {
    throw_error("[profiler] export_trace: cannot open '" + path +
                "' for writing: " + std::strerror(errno));
  }
  Writer w(f.get());
  w.raw("{\"displayTimeUnit\":\"ns\",\"otherData\":{\"producer\":\"mpsrt\",\"dropped_records\":");
  w.num(s.dropped());
  w.raw("},\"traceEvents\":[");

  write_track_names(w, s);
  write_records(w, s);
  w.raw("\n]}\n");
  w.flush();
  const bool closed = std::fclose(f.release()) == 0;
  if (w.failed() || !closed) {
    throw_error("[profiler] export_trace: writing '" + path + "' failed: " + std::strerror(errno));
  }
  return {w.events(), s.records(), s.dropped()};
}

}  // namespace mpsrt::detail::prof
