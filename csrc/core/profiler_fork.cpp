// The profiler's fork() handlers (called from the runtime's): the profiler's locks are held
// across the fork; in the child the session ends and only the forking thread's buffer stays
// registered.
#include <memory>

#include "core/profiler.h"
#include "core/profiler_ranges.h"
#include "core/profiler_session.h"

namespace mpsrt::detail::prof {

void fork_prepare() {
  session_mutex().lock();
  registry().mu.lock();
  async_ranges_mutex().lock();
}

void fork_parent() {
  async_ranges_mutex().unlock();
  registry().mu.unlock();
  session_mutex().unlock();
}

void fork_child() {
  g_flags.store(0);
  // Other threads' buffers may be locked by threads that do not exist here.
  Registry& r = registry();
  r.retain_locked([](const std::shared_ptr<ThreadBuffer>& b) { return b.get() == tls_buffer; });
  r.mu.unlock();
  async_ranges_mutex().unlock();  // open ranges stay open in the child: it may end them
  session_mutex().unlock();
}

}  // namespace mpsrt::detail::prof
