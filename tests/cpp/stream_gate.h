// A test helper shared by the C++ tests: a host callback that blocks a stream.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "core/profiler.h"
#include "core/stream.h"

namespace mpsrt::test {

// A host callback that blocks the stream until release() (or a 20 s safety timeout). The flag
// is shared with the callback, so it stays valid however the test ends; the destructor
// releases the stream.
class StreamGate {
 public:
  StreamGate() : open_(std::make_shared<std::atomic<bool>>(false)) {}
  ~StreamGate() { release(); }
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;

  // Encodes the blocking callback on `s` and commits it.
  void block(mpsrt::detail::StreamImpl& s) {
    std::shared_ptr<std::atomic<bool>> open = open_;
    s.encode(
        {mpsrt::detail::prof::Op::Callback},
        [open](mpsrt::backend::CommandBuffer& cb) {
          cb.host_callback([open] {
            const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
            while (!open->load() && std::chrono::steady_clock::now() < until) {
              std::this_thread::sleep_for(std::chrono::milliseconds(1));
            }
          });
        },
        mpsrt::SyncType::Commit);
  }
  void release() { open_->store(true); }

 private:
  std::shared_ptr<std::atomic<bool>> open_;
};

}  // namespace mpsrt::test
