# One runtime kernel of csrc/kernels/runtime/ for the metal backend: GLSL -> SPIR-V (glslc) ->
# MSL (SPIRV-Cross) -> a C++ raw string literal that metal_kernels.mm embeds. Run by the build
# (CMakeLists.txt, metal section) and by .ci/metal_check.sh, as
#   cmake -DGLSLC=... -DSPIRV_CROSS=... -DNAME=fill -DSRC=.../fill.comp -DOUT=.../fill.msl.inc
#         -P translate_kernel.cmake
# SPIRV-Cross options: MSL 2.3, entry point main renamed mpsrt_<NAME>, no argument buffers,
# resources in its default order: the push constants [[buffer(0)]], storage-buffer binding i
# [[buffer(i + 1)]] (aliased blocks of one binding share it). The entry point's signature is
# checked, so a SPIRV-Cross that binds otherwise fails here, not on a Mac.
foreach(var GLSLC SPIRV_CROSS NAME SRC OUT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "[metal] translate_kernel.cmake needs -D${var}=...")
  endif()
endforeach()
get_filename_component(dir ${SRC} DIRECTORY)
set(spv ${OUT}.spv)
set(msl ${OUT}.metal)
execute_process(COMMAND ${GLSLC} --target-env=vulkan1.2 -I ${dir} -o ${spv} ${SRC}
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "[metal] glslc failed on ${SRC}; fix the kernel (it must build without float64)")
endif()
execute_process(COMMAND ${SPIRV_CROSS} --msl --msl-version 20300
  --rename-entry-point main mpsrt_${NAME} comp --output ${msl} ${spv}
  RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "[metal] spirv-cross --msl failed on ${NAME}: ${err}; the kernel must not use float64")
endif()
file(READ ${msl} text)
set(want "kernel void mpsrt_${NAME}(constant Params& pc [[buffer(0)]], ")
string(FIND "${text}" "${want}" at)
string(FIND "${text}" "spvBufferAliasSet0Binding0 [[buffer(1)]]" at1)
if(at EQUAL -1 OR at1 EQUAL -1)
  message(FATAL_ERROR "[metal] spirv-cross bound ${NAME}'s resources otherwise than "
    "metal_kernels.mm expects (push constants buffer 0, binding i buffer i + 1); update both")
endif()
string(FIND "${text}" ")mpsrt_msl\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "[metal] ${NAME}'s MSL contains the raw-string delimiter; change it")
endif()
file(WRITE ${OUT} "R\"mpsrt_msl(${text})mpsrt_msl\"\n")
