"""mpsrt in a few lines: the backend and its devices, a Buffer filled with random numbers on a
stream, an event that times it, and the caching allocator's view of it all."""

import mpsrt

print("mpsrt", mpsrt.__version__, "backend:", mpsrt.backend())
for i in range(mpsrt.device_count()):
    print(f"  device {i}:", mpsrt.get_device_properties(i))

with mpsrt.device(0):
    mpsrt.synchronize()  # waits for all work on the device's streams
print("current device:", mpsrt.current_device())

mpsrt.manual_seed(0)
stream = mpsrt.Stream()
start, end = mpsrt.Event(enable_timing=True), mpsrt.Event(enable_timing=True)
with stream:  # the stream is current inside the block
    start.record()
    x = mpsrt.randn(1024, 1024)  # float32 standard normal numbers (Philox4x32-10)
    x.uniform_(-1.0, 1.0)  # refilled in place, on the same stream
    end.record()
end.synchronize()
print(
    f"{x.shape} {x.dtype} filled in {start.elapsed_time(end):.3f} ms on stream {stream.stream_id}"
)
if mpsrt.get_device_properties(0).unified_memory:
    values = x.numpy()  # shares the memory; waits for the buffer's pending work first
    print(f"min {values.min():.3f}, max {values.max():.3f}")
    del values
print(f"allocated {mpsrt.memory_allocated()} bytes, reserved {mpsrt.memory_reserved()} bytes")
del x
mpsrt.empty_cache()
print(f"after empty_cache: reserved {mpsrt.memory_reserved()} bytes")
