// The profiler's recorder: what the streams call for each command they encode while a session
// runs (its encode interval, then the device side of its command buffer) and the host copies.
// It writes to the session's buffers and to the platform sink, and calls nothing above them.
#include <cstdio>

#include "core/profiler.h"
#include "core/profiler_records.h"
#include "core/profiler_session.h"

namespace mpsrt::detail::prof {

namespace {

std::atomic<uint64_t> g_flow{0};

void log_op(const char* what, const Batch& b, const PendingOp& op, uint64_t gpu_ns) {
  const uint32_t log = log_bits();
  char extra[160] = {};
  int n = 0;
  const auto add = [&](const char* fmt, auto... args) {
    if (n >= 0 && static_cast<size_t>(n) < sizeof extra) {
      n += std::snprintf(extra + n, sizeof extra - static_cast<size_t>(n), fmt, args...);
    }
  };
  if ((log & kLogIncludeGpuTime) != 0) add(", GPU=%.3f ms", static_cast<double>(gpu_ns) / 1e6);
  if ((log & kLogIncludeKernelTime) != 0) {
    add(", KRNL=%.3f ms", static_cast<double>(op.device_end - op.device_begin) / 1e6);
  }
  if ((log & kLogIncludeBufferId) != 0) {
    add(", buffer=%#llx", static_cast<unsigned long long>(op.desc.buffer_id));
  }
  std::fprintf(stderr, "[profiler] %s %s: device %d stream %lld, %llu bytes%s\n", what,
               op_name(op.desc.op), b.device, static_cast<long long>(b.stream),
               static_cast<unsigned long long>(op.desc.bytes), extra);
}

/// The records of a completed command buffer: its interval and each command's device interval
/// or completion instant, as the batch's flags ask; `done` is when the completion was reported.
void push_completion_locked(ThreadBuffer& t, const Batch& b, const backend::Completion& c,
                            int64_t done) {
  const int64_t off = b.host_offset_ns;
  Record r;
  r.device = static_cast<uint8_t>(b.device);
  r.stream = static_cast<int32_t>(b.stream);
  if ((b.flags & kIntervals) != 0) {
    r.kind = Kind::CommandBuffer;
    r.name = static_cast<uint32_t>(Op::CommandBuffer);
    r.begin =
        (b.flags & kSchedule) != 0 ? b.commit_ns : static_cast<int64_t>(c.device_start_ns) + off;
    r.end = static_cast<int64_t>(c.device_end_ns) + off;
    r.a = b.ops.size();
    r.b = static_cast<uint64_t>(b.commit_ns);
    r.c = static_cast<uint64_t>(done);
    t.push_locked(r);
  }
  for (const PendingOp& op : b.ops) {
    if (op.device_end == 0) continue;  // not reached (the command buffer failed early)
    r.name = static_cast<uint32_t>(op.desc.op);
    r.begin = static_cast<int64_t>(op.device_begin) + off;
    r.end = static_cast<int64_t>(op.device_end) + off;
    r.a = op.desc.bytes;
    r.b = op.flow;
    r.c = op.device_end - op.device_begin;
    if ((b.flags & kIntervals) != 0) {
      r.kind = Kind::Device;
      t.push_locked(r);
    }
    if ((b.flags & kEvents) != 0) {
      r.kind = Kind::Completion;
      r.begin = r.end;
      t.push_locked(r);
    }
  }
}

}  // namespace

Batch* new_batch(int device, int64_t stream, int64_t host_offset_ns) {
  auto* b = new Batch;
  b->session = session();
  b->flags = flags();
  b->device = device;
  b->stream = stream;
  b->host_offset_ns = host_offset_ns;
  return b;
}

PendingOp& add_op(Batch& b, const OpDesc& d) {
  PendingOp& op = b.ops.emplace_back();
  op.desc = d;
  op.flow = g_flow.fetch_add(1, std::memory_order_relaxed) + 1;
  return op;
}

void record_encode(const Batch& b, const PendingOp& op) {
  if ((b.flags & kIntervals) == 0) return;
  Record r;
  r.begin = op.host_begin;
  r.end = op.host_end;
  r.a = op.desc.bytes;
  r.b = op.flow;
  r.name = static_cast<uint32_t>(op.desc.op);
  r.kind = Kind::Encode;
  r.device = static_cast<uint8_t>(b.device);
  r.stream = static_cast<int32_t>(b.stream);
  push(r);
  if (backend::TraceSink* sink = platform_sink()) {
    sink->encode(op_name(op.desc.op), b.stream, op.desc.bytes);
  }
}

void complete(const Batch& b, const backend::Completion& c) {
  if (b.session != session()) return;  // a newer session
  const int64_t done = now_ns();
  const uint32_t log = log_bits();
  const uint64_t gpu_ns = c.device_end_ns - c.device_start_ns;
  with_buffer([&](ThreadBuffer& t) { push_completion_locked(t, b, c, done); });
  if ((log & (kLogOperationInfo | kLogCopyInfo)) != 0) {
    for (const PendingOp& op : b.ops) {
      if ((log & (is_copy(op.desc.op) ? kLogCopyInfo : kLogOperationInfo)) != 0) {
        log_op(is_copy(op.desc.op) ? "copy" : "operation", b, op, gpu_ns);
      }
    }
  }
  if (backend::TraceSink* sink = platform_sink()) {
    for (const PendingOp& op : b.ops) {
      sink->completed(op_name(op.desc.op), b.stream, op.device_end - op.device_begin);
    }
  }
}

void record_host_copy(Op op, int device, uint64_t bytes, int64_t begin_ns, int64_t end_ns) {
  const uint32_t f = flags();
  if (f == 0) return;
  Record r;
  r.begin = begin_ns;
  r.end = end_ns;
  r.a = bytes;
  r.name = static_cast<uint32_t>(op);
  r.kind = Kind::HostCopy;
  r.device = static_cast<uint8_t>(device);
  r.stream = -1;
  push(r);
  if ((log_bits() & kLogCopyInfo) != 0) {
    std::fprintf(stderr, "[profiler] copy %s: device %d, %llu bytes, CPU=%.3f ms\n", op_name(op),
                 device, static_cast<unsigned long long>(bytes),
                 static_cast<double>(end_ns - begin_ns) / 1e6);
  }
}

}  // namespace mpsrt::detail::prof
