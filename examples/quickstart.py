"""mpsrt in a few lines: the backend, its devices, and switching between them."""

import mpsrt

print("mpsrt", mpsrt.__version__, "backend:", mpsrt.backend())
for i in range(mpsrt.device_count()):
    print(f"  device {i}:", mpsrt.get_device_properties(i))

with mpsrt.device(0):
    mpsrt.synchronize()  # waits for all work on the device's streams
print("current device:", mpsrt.current_device())
