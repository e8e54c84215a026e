# Configures tests/embed (a host that embeds tfk with add_subdirectory) in
# WORK_DIR: its CMakeLists checks the host's settings; here, tfk added no
# install rules of its own (TFK_INSTALL is off when embedded) unless asked.
function(configure dir)
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/embed -B ${dir}
                          -G ${GENERATOR} -DTFK_SOURCE_DIR=${SOURCE_DIR} --fresh ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "configuring the host failed:\n${out}\n${err}")
  endif()
endfunction()
configure(${WORK_DIR}/default)
file(READ ${WORK_DIR}/default/tfk/cmake_install.cmake rules)
if(rules MATCHES "tfkTargets|tfk\\.pc")
  message(FATAL_ERROR "tfk added install rules to a host that embeds it")
endif()
configure(${WORK_DIR}/install -DTFK_INSTALL=ON)
file(READ ${WORK_DIR}/install/tfk/cmake_install.cmake rules)
if(NOT rules MATCHES "tfkTargets")
  message(FATAL_ERROR "TFK_INSTALL=ON added no install rules")
endif()
message(STATUS "an embedding host keeps its settings; install rules only with TFK_INSTALL")
