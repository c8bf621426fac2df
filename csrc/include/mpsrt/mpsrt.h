// Umbrella header for C++ embedders: #include <mpsrt/mpsrt.h> and link mpsrt::mpsrt.
#pragma once

#include "mpsrt/allocator.h"
#include "mpsrt/api.h"
#include "mpsrt/device.h"
#include "mpsrt/error.h"
#include "mpsrt/event.h"
#include "mpsrt/generator.h"
#include "mpsrt/kernel.h"
#include "mpsrt/options.h"
#include "mpsrt/philox.h"
#include "mpsrt/profiler.h"
#include "mpsrt/stream.h"
