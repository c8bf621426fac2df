// Lists the devices of the active backend, round-trips an empty command buffer on each, and
// shows the options in force. Exits non-zero on any failure.
#include <mpsrt/mpsrt.h>

#include <chrono>
#include <cstdio>
#include <exception>

int main() {
  try {
    std::printf("mpsrt %s, backend %s, %d device(s)\n", mpsrt::version(),
                mpsrt::backend_name().c_str(), mpsrt::device_count());
    for (int i = 0; i < mpsrt::device_count(); ++i) {
      const mpsrt::DeviceProperties p = mpsrt::get_device_properties(i);
      mpsrt::Stream s = mpsrt::default_stream(i);
      const auto t0 = std::chrono::steady_clock::now();
      s.commit(mpsrt::SyncType::CommitAndWait);
      const auto us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      std::printf(
          "  device %d: %s, %llu MiB (recommended %llu MiB), unified=%d, %s; "
          "empty command buffer round trip %.1f us, idle=%d\n",
          p.index, p.name.c_str(), static_cast<unsigned long long>(p.total_memory >> 20),
          static_cast<unsigned long long>(p.recommended_max_memory >> 20), p.unified_memory ? 1 : 0,
          p.details.c_str(), us, s.query() ? 1 : 0);
      if (!s.query()) return 1;
    }
    for (const mpsrt::OptionInfo& o : mpsrt::options()) {
      std::printf("  %s=%s\n", o.name.c_str(), o.value.c_str());
    }
    mpsrt::synchronize();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
