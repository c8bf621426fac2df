# The PyTorch device's glue (csrc/torch) as a CMake target, file by file: what `import mpsrt.torch`
# compiles as one translation unit (python/mpsrt/torch/_glue.py) built here as separate ones, so
# that every file stands on its own includes and names, compile_commands.json covers the glue and
# clang-tidy can run on it. A library that loads into a process where mpsrt._C is imported, as the
# import-time build does; the wheel's prebuilt glue comes from `python -m mpsrt.torch.prebuild`.
# Needs the installed torch's CMake package: -DMPSRT_BUILD_TORCH_GLUE=ON with the Python that has
# torch first on PATH (or Python_EXECUTABLE set).
find_package(Python COMPONENTS Interpreter REQUIRED)
execute_process(
  COMMAND ${Python_EXECUTABLE} -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
  OUTPUT_VARIABLE MPSRT_TORCH_PREFIX OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "MPSRT_BUILD_TORCH_GLUE=ON needs torch importable by ${Python_EXECUTABLE}")
endif()
list(APPEND CMAKE_PREFIX_PATH ${MPSRT_TORCH_PREFIX})
find_package(Torch REQUIRED)
file(GLOB_RECURSE MPSRT_GLUE_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/csrc/torch/*.cpp)
add_library(mpsrt_torch_glue SHARED ${MPSRT_GLUE_SOURCES})
target_include_directories(mpsrt_torch_glue PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/csrc/include ${CMAKE_CURRENT_SOURCE_DIR}/csrc/torch
  ${CMAKE_CURRENT_SOURCE_DIR}/csrc/kernels)
# torch's headers are not ours to warn about; they also do not build under -Werror.
target_include_directories(mpsrt_torch_glue SYSTEM PRIVATE ${TORCH_INCLUDE_DIRS})
target_link_libraries(mpsrt_torch_glue PRIVATE ${TORCH_LIBRARIES})
target_compile_features(mpsrt_torch_glue PRIVATE cxx_std_17)
# Aggregates filled in part (the rest defaulted) and c10::List's by-value iteration are idioms
# here, not mistakes.
target_compile_options(mpsrt_torch_glue PRIVATE -Wall -Wextra -Werror -Wno-unused-parameter
  -Wno-missing-field-initializers -Wno-range-loop-construct)
# No debug information: this library is a check (it is not what `import mpsrt.torch` loads), and
# the debug information of torch's templates was 40 % of each file's compile time.
target_compile_options(mpsrt_torch_glue PRIVATE -g0)
# torch's headers dominate each file's compile time: parsed once.
target_precompile_headers(mpsrt_torch_glue PRIVATE <ATen/core/Tensor.h> <torch/library.h>
  <ATen/core/dispatch/Dispatcher.h> <ATen/TensorIterator.h>)
