// The profiler's records and a session's snapshot, shared by the recorder and the annotations
// that write them (profiler_recorder.cpp, profiler_alloc_trace.cpp, profiler_ranges.cpp), and
// the trace writer (trace_json.cpp) and the statistics (profiler_stats.cpp) that read a
// snapshot of them. Their names and the snapshot's totals: profiler_records.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/profiler.h"
#include "mpsrt/profiler.h"

namespace mpsrt::detail::prof {

enum class Kind : uint8_t {
  Encode,         // host thread: a command's CPU encode interval; name = Op, a = bytes, b = flow
  Device,         // stream: a command's device interval; name = Op, a = bytes, b = flow
  Completion,     // stream: a command completed (event mode); name = Op, c = device ns
  CommandBuffer,  // stream: begin/end = device start/end; a = commands, b = commit, c = done
  HostCopy,       // host thread: a copy done by the CPU; name = Op, a = bytes
  Mark,           // host thread: name = string id
  Range,          // host thread: a popped range; name = string id, a = depth
  AsyncRange,     // process: a range_start/range_end range (ended on this thread); a = its id
  HostOp,         // stream: an operation the host ran in the stream's order; name = string id
  Counter,        // device: a = allocated bytes, b = reserved bytes
  Alloc,          // host thread: a = bytes, b = address, stream = pool
  Free,
  SegmentAlloc,
  SegmentFree,
  Oom,
  EmptyCache,
};

/// One record, 56 bytes. Times in the steady clock's nanoseconds.
struct Record {
  int64_t begin = 0;
  int64_t end = 0;  // == begin for instants
  uint64_t a = 0;
  uint64_t b = 0;
  uint64_t c = 0;
  uint32_t name = 0;  // an Op, or for Mark / Range an id into the thread's strings
  Kind kind = Kind::Mark;
  uint8_t device = 0;
  int32_t stream = 0;
};

/// The records one thread made in the session.
struct ThreadRecords {
  int tid = 0;
  std::string name;  // the thread's name, when it has one
  std::vector<Record> records;
  std::vector<std::string> strings;
  uint64_t dropped = 0;
};

/// One device as the trace names it.
struct DeviceName {
  int index = 0;
  std::string name;  // "cpu: <model>"
};

/// A copy of a session's records.
struct Snapshot {
  int pid = 0;
  std::vector<ThreadRecords> threads;
  std::vector<DeviceName> devices;
  uint64_t records() const;
  uint64_t dropped() const;
};

/// Writes `s` as Chrome/Perfetto trace JSON.
profiler::TraceSummary write_trace_json(const Snapshot& s, const std::string& path);
/// The statistics table; `log_bits` chooses the sections (0: all of them).
std::string format_statistics(const Snapshot& s, uint32_t log_bits);
/// The name a record shows: its op's name or its string ("unknown" for an op or string id the
/// record's thread does not have).
std::string_view record_name(const ThreadRecords& t, const Record& r);

}  // namespace mpsrt::detail::prof
