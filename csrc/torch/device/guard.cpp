// The DeviceGuardImpl of the mpsrt device (what torch.accelerator, torch.Stream and torch.Event
// reach): devices, torch.Streams as mpsrt streams, torch.Events as mpsrt events.
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "device/allocator.h"
#include "device/runtime_client.h"

namespace mpsrt::torch_glue {
namespace {

struct GuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kDev; }
  c10::Device exchangeDevice(c10::Device d) const override {
    const auto cur = current_index();
    if (d.index() == cur) return d;  // nothing to switch (the common case)
    int prev = 0;
    check_index(d.index());
    check(api().set_device(d.index(), &prev));
    return c10::Device(kDev, static_cast<c10::DeviceIndex>(prev));
  }
  c10::Device getDevice() const override { return c10::Device(kDev, current_index()); }
  void setDevice(c10::Device d) const override {
    check_index(d.index());
    check(api().set_device(d.index(), nullptr));
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (g_api) g_api->set_device(d.index(), nullptr);
  }
  c10::Stream getStream(c10::Device d) const override {
    return torch_stream(api().stream_current(d.index()));
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return torch_stream(api().stream_default(d.index()));
  }
  c10::Stream getNewStream(c10::Device d, int priority) const override {
    MpsrtStream* s = nullptr;
    check(api().stream_from_pool(priority, d.index(), &s));
    return torch_stream(s);
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool high_priority) const override {
    return getNewStream(d, high_priority ? -1 : 0);
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    return torch_stream(api().stream_set_current(stream_of(s)));
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return g_api ? static_cast<c10::DeviceIndex>(g_api->device_count()) : 0;
  }
  // The dtypes whose tensors the device makes, copies and converts (operators without an mpsrt
  // kernel run torch's CPU kernels, so the CPU's dtypes, the quantized ones included: their
  // ops run as the QuantizedCPU kernels through the fallback): not the packed and sub-byte ones
  // that copy_ cannot convert, nor
  // complex types beyond the three the CPU kernels make (torch 2.14's BComplex32 has no fill).
  c10::DeviceCapability getDeviceCapability(c10::Device) const override {
    c10::DeviceCapability cap;
#define MPSRT_DROP_UNSUPPORTED(_, name)                        \
  if (!device_dtype(c10::ScalarType::name)) {                  \
    cap.capability_data.supported_scalar_types.has_##name = 0; \
  }
    AT_FORALL_SCALAR_TYPES_WITH_COMPLEX_AND_QINTS(MPSRT_DROP_UNSUPPORTED)
#undef MPSRT_DROP_UNSUPPORTED
    return cap;
  }
  static bool device_dtype(c10::ScalarType t) {
    using c10::ScalarType;
    const auto in = [t](ScalarType lo, ScalarType hi) {
      return static_cast<int>(t) >= static_cast<int>(lo) &&
             static_cast<int>(t) <= static_cast<int>(hi);
    };
    const bool sub_byte =
        in(ScalarType::UInt1, ScalarType::UInt7) || in(ScalarType::Int1, ScalarType::Int7);
    const bool other_complex = c10::isComplexType(t) && t != ScalarType::ComplexHalf &&
                               t != ScalarType::ComplexFloat && t != ScalarType::ComplexDouble;
    return !(c10::isBitsType(t) || sub_byte || other_complex || t == ScalarType::Float4_e2m1fn_x2);
  }
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex,
              const c10::EventFlag flag) const override {
    if (*event == nullptr) {
      MpsrtEvent* e = nullptr;
      check(api().event_create(flag == c10::EventFlag::BACKEND_DEFAULT ? 1 : 0, &e));
      *event = e;
    }
    check(api().event_record(static_cast<MpsrtEvent*>(*event), stream_of(stream)));
  }
  void block(void* event, const c10::Stream& stream) const override {
    if (event == nullptr) return;
    check(api().event_wait(static_cast<MpsrtEvent*>(event), stream_of(stream)));
  }
  bool queryEvent(void* event) const override {
    if (event == nullptr) return true;
    int r = api().event_query(static_cast<MpsrtEvent*>(event));
    if (r < 0) check(MPSRT_ERR_RUNTIME);
    return r == 1;
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    if (event != nullptr && g_api != nullptr) g_api->event_destroy(static_cast<MpsrtEvent*>(event));
  }
  bool queryStream(const c10::Stream& stream) const override {
    int r = api().stream_query(stream_of(stream));
    if (r < 0) check(MPSRT_ERR_RUNTIME);
    return r == 1;
  }
  void synchronizeStream(const c10::Stream& stream) const override {
    check(api().stream_synchronize(stream_of(stream)));
  }
  void synchronizeEvent(void* event) const override {
    if (event != nullptr) check(api().event_synchronize(static_cast<MpsrtEvent*>(event)));
  }
  void synchronizeDevice(const c10::DeviceIndex d) const override {
    check(api().synchronize(d));
  }
  void recordDataPtrOnStream(const c10::DataPtr& ptr, const c10::Stream& stream) const override {
    device_allocator().recordStream(ptr, stream);
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start && end, "[torch] elapsed_time: both events must have been recorded");
    double ms = 0;
    check(api().event_elapsed_ms(static_cast<MpsrtEvent*>(start), static_cast<MpsrtEvent*>(end),
                                 &ms));
    return ms;
  }
};

}  // namespace

C10_REGISTER_GUARD_IMPL(PrivateUse1, GuardImpl);

}  // namespace mpsrt::torch_glue
