// Timeline semaphores and host waits for the device: wait_semaphores() (poll, then block in
// vkWaitSemaphores) and Semaphore, the backend's timeline events (also the queues'
// completion timelines, vk_queue.cpp).
#include <algorithm>
#include <mutex>
#include <thread>
#include <utility>

#include "backends/vulkan/vk_common.h"

namespace mpsrt::vk {

bool wait_semaphores(const DeviceShared& d, const VkSemaphore* s, const uint64_t* v, uint32_t n,
                     bool any, int64_t timeout_ns) {
  auto reached = [&] {
    uint32_t hits = 0;
    for (uint32_t i = 0; i < n; ++i) {
      uint64_t cur = 0;
      check(d.fn.vkGetSemaphoreCounterValue(d.device, s[i], &cur), "vkGetSemaphoreCounterValue");
      if (cur >= v[i]) {
        if (any) return true;
        ++hits;
      }
    }
    return hits == n;
  };
  if (reached()) return true;
  if (timeout_ns == 0) return false;
  // Poll first: the work a waiter waits for is often microseconds from done, and a blocking
  // wait costs a sleep and a wake-up in the driver. The first microseconds spin on the value;
  // after that the poll yields between reads, so that a device that runs on this machine's
  // cores (lavapipe) keeps its time slices.
  const int64_t start = host_now_ns();
  const int64_t spin = timeout_ns < 0 ? d.spin_ns : std::min(d.spin_ns, timeout_ns);
  for (int64_t now = start; now - start < spin; now = host_now_ns()) {
    if (reached()) return true;
    if (now - start > 2000) std::this_thread::yield();
  }
  int64_t left = -1;
  if (timeout_ns >= 0) {
    left = timeout_ns - (host_now_ns() - start);
    if (left <= 0) return reached();
  }
  auto wi = make<VkSemaphoreWaitInfo>(VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO);
  wi.flags = any ? VK_SEMAPHORE_WAIT_ANY_BIT : 0;
  wi.semaphoreCount = n;
  wi.pSemaphores = s;
  wi.pValues = v;
  const VkResult r =
      d.fn.vkWaitSemaphores(d.device, &wi, left < 0 ? UINT64_MAX : static_cast<uint64_t>(left));
  if (r == VK_SUCCESS) return true;
  if (r == VK_TIMEOUT) return false;
  fail("vkWaitSemaphores", r);
}

Semaphore::Semaphore(std::shared_ptr<DeviceShared> d) : d_(std::move(d)) {
  auto ti = make<VkSemaphoreTypeCreateInfo>(VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO);
  ti.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
  ti.initialValue = 0;
  auto ci = make<VkSemaphoreCreateInfo>(VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO);
  ci.pNext = &ti;
  check(d_->fn.vkCreateSemaphore(d_->device, &ci, nullptr, &sem_), "vkCreateSemaphore");
}

Semaphore::~Semaphore() {
  d_->fn.vkDestroySemaphore(d_->device, sem_, nullptr);
}

void Semaphore::signal(uint64_t v) {
  std::lock_guard<std::mutex> lock(mu_);
  if (v <= value()) return;
  auto si = make<VkSemaphoreSignalInfo>(VK_STRUCTURE_TYPE_SEMAPHORE_SIGNAL_INFO);
  si.semaphore = sem_;
  si.value = v;
  check(d_->fn.vkSignalSemaphore(d_->device, &si), "vkSignalSemaphore");
}

bool Semaphore::wait(uint64_t target, int64_t timeout_ns) {
  return wait_semaphores(*d_, &sem_, &target, 1, false, timeout_ns);
}

// Both semaphores in one vkWaitSemaphores (VK_SEMAPHORE_WAIT_ANY_BIT).
bool Semaphore::wait_either(uint64_t target, backend::TimelineEvent& other, uint64_t other_target,
                            int64_t timeout_ns) {
  auto* o = dynamic_cast<Semaphore*>(&other);
  if (o == nullptr || o->d_ != d_) return wait(target, timeout_ns);
  const VkSemaphore s[2] = {sem_, o->sem_};
  const uint64_t v[2] = {target, other_target};
  return wait_semaphores(*d_, s, v, 2, true, timeout_ns);
}

uint64_t Semaphore::value() const {
  uint64_t v = 0;
  check(d_->fn.vkGetSemaphoreCounterValue(d_->device, sem_, &v), "vkGetSemaphoreCounterValue");
  return v;
}

}  // namespace mpsrt::vk
