# Installs the build tree into WORK_DIR/prefix, then configures, builds and
# runs tests/consumer against it: with find_package(tfk) in a project of C
# and C++ and in one of C alone (linked by the C driver), and compiled with
# `pkg-config --cflags --libs tfk`; and runs the installed tfk-info.
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed: ${ARGN}\n${out}\n${err}")
  endif()
  set(last_out "${out}" PARENT_SCOPE)
endfunction()

run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

# CMake package
run(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/cmake -G ${GENERATOR}
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/cmake)
run(${WORK_DIR}/cmake/consumer_c)
message(STATUS "find_package, C: ${last_out}")
run(${WORK_DIR}/cmake/consumer_cpp)
message(STATUS "find_package, C++: ${last_out}")
run(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/cmake_c -G ${GENERATOR}
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release -DTFK_CONSUMER_CXX=OFF)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/cmake_c)
run(${WORK_DIR}/cmake_c/consumer_c)
message(STATUS "find_package, C project: ${last_out}")

# pkg-config
file(GLOB_RECURSE pc_file ${prefix}/*/tfk.pc)
if(NOT pc_file)
  message(FATAL_ERROR "tfk.pc not installed")
endif()
# The prefix is the one install used, as a literal path.
file(STRINGS ${pc_file} pc_prefix REGEX "^prefix=")
if(NOT pc_prefix STREQUAL "prefix=${prefix}")
  message(FATAL_ERROR "tfk.pc has '${pc_prefix}', expected 'prefix=${prefix}'")
endif()
get_filename_component(pc_dir ${pc_file} DIRECTORY)
set(ENV{PKG_CONFIG_PATH} ${pc_dir})
# A static libtfk brings its dependencies through Requires.private; a
# shared one names none (pkg-config reads them for --cflags too, so its
# consumers would need Highway's and oneTBB's .pc files).
file(GLOB_RECURSE static_lib ${prefix}/*/libtfk.a)
file(STRINGS ${pc_file} pc_requires REGEX "^Requires.private:")
if(static_lib)
  set(pc_static --static)
  if(NOT pc_requires)
    message(FATAL_ERROR "tfk.pc of the static library has no Requires.private")
  endif()
elseif(pc_requires)
  message(FATAL_ERROR "tfk.pc of the shared library has '${pc_requires}'")
endif()
run(pkg-config ${pc_static} --cflags --libs tfk)
string(STRIP "${last_out}" flags)
separate_arguments(flags UNIX_COMMAND "${flags}")
get_filename_component(libdir ${pc_dir} DIRECTORY)
run(cc ${SOURCE_DIR}/consumer.c -o ${WORK_DIR}/pc_consumer ${flags} -Wl,-rpath,${libdir})
run(${WORK_DIR}/pc_consumer)
message(STATUS "pkg-config, C: ${last_out}")

# The installed tfk-info finds the library of its prefix by itself.
if(EXISTS ${prefix}/bin/tfk-info)
  run(${prefix}/bin/tfk-info --isas)
  message(STATUS "installed tfk-info: ${last_out}")
endif()
