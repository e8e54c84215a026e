# tfk-ab (bench/tfk_ab.cc) on two copies of the built library: each kernel at
# a small size (linear also over several layers) must print its comparison
# line and exit 0; --layers on another kernel or of 0, an unknown kernel
# must print the usage, and an ISA name the library refuses its message, each
# with exit status 1. Where tfk-ab was built with oneDNN (PEERS has
# `onednn`), each kernel but RMSNorm against oneDNN too, and RMSNorm's
# message; else the message that says it was built without. The copy side
# pairs with the kernels of one input and one output, and refuses add and
# linear; the peak side pairs with linear only; both run on the ISA the
# library side is active on, as the library spells it.
#   cmake -DAB=<tfk-ab> -DLIB=<libtfk.so> -DPEERS=<peers> -DWORK_DIR=<dir>
#         -P tfk_ab_test.cmake
file(MAKE_DIRECTORY ${WORK_DIR})
# dlopen loads a path once: the two builds need two names.
file(COPY_FILE ${LIB} ${WORK_DIR}/a.so)
file(COPY_FILE ${LIB} ${WORK_DIR}/b.so)
set(a ${WORK_DIR}/a.so)
set(b ${WORK_DIR}/b.so)

# side_a side_b: the two sides; case: KERNEL|DIMS... (| for ;).
function(expect_line side_a side_b case)
  string(REPLACE "|" ";" args "${case}")
  execute_process(COMMAND ${AB} ${side_a} ${side_b} ${args} --rounds 3 --threads 2
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "3 rounds of [0-9]+ calls: A( \\((oneDNN|copy|peak)\\))? [0-9.e+-]+ (GB|GFLOP)/s, B .* B / A speedup: median [0-9.]+ \\(quartiles [0-9.]+-[0-9.]+\\)")
    message(FATAL_ERROR "tfk-ab ${side_a} ${side_b} ${args}: exit ${rc}\nstdout: ${out}\nstderr: ${err}")
  endif()
endfunction()
set(cases "softmax|3|40" "layernorm|3|40" "relu|100" "gelu_erf|100" "gelu_tanh|100" "silu|100"
          "add|100" "linear|5|40|33" "linear|5|40|33|--layers|3")
foreach(case ${cases} "rmsnorm|3|40")
  expect_line(${a} ${b} ${case})
endforeach()

function(expect_failure text)
  execute_process(COMMAND ${AB} ${a} ${b} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  if(NOT rc EQUAL 1 OR NOT err MATCHES "${text}")
    message(FATAL_ERROR "tfk-ab ${ARGN}: exit ${rc}, want 1 and \"${text}\"\nstderr: ${err}")
  endif()
endfunction()
expect_failure("usage" sigmoid 100)
expect_failure("usage" softmax 0 40)
expect_failure("usage" linear 5 40)
expect_failure("usage" relu 100 --layers 2)
expect_failure("usage" linear 5 40 33 --layers 0)
expect_failure("unknown ISA name 'NOPE'" relu 100 --isa NOPE)

# The copy side: the kernels of one input and one output, either side.
foreach(case "softmax|3|40" "layernorm|3|40" "rmsnorm|3|40" "relu|100" "gelu_erf|100")
  expect_line(copy ${b} ${case})
endforeach()
expect_line(${a} copy "silu|1000")
block()
  set(a copy)
  expect_failure("copy pairs with the kernels of one input" add 100)
  expect_failure("copy pairs with the kernels of one input" linear 5 40 33)
  set(b copy)
  expect_failure("usage" relu 100)  # copy on both sides
endblock()

# The peak side: linear only.
expect_line(peak ${b} "linear|5|40|33")
expect_line(${a} peak "linear|5|40|33|--layers|2")
expect_line(peak ${b} "linear|5|40|33|--isa|SSE4")
expect_line(peak ${b} "linear|5|40|33|--isa|avx2")  # the library's spelling of the ISA
expect_line(copy ${b} "relu|1000|--isa|sse4")
block()
  set(a peak)
  expect_failure("the FMA peak pairs with linear" relu 100)
  expect_failure("unknown ISA name 'NOPE'" linear 5 40 33 --isa NOPE)
endblock()

if(PEERS MATCHES "onednn")
  foreach(case ${cases})
    expect_line(onednn ${b} ${case})
  endforeach()
  expect_line(${a} onednn "relu|100")
  set(a onednn)
  expect_failure("has no RMSNorm" rmsnorm 3 40)
  set(b onednn)
  expect_failure("usage" relu 100)  # onednn on both sides
else()
  set(a onednn)
  expect_failure("built without oneDNN" relu 100)
endif()
