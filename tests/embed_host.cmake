# Configures tests/embed (a host that embeds tfk with add_subdirectory) in
# WORK_DIR: its CMakeLists checks the host's settings; here, tfk added no
# install rules of its own (TFK_INSTALL is off when embedded) unless asked,
# and when asked, its package and tfk.pc are those of the static library
# the host builds.
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
# The host left BUILD_SHARED_LIBS unset, so tfk is static: its package must
# find Highway and oneTBB for the consumer's link, and tfk.pc name them.
file(READ ${WORK_DIR}/install/tfk/tfkConfig.cmake config)
if(NOT config MATCHES "if\\(TRUE\\)[ \n]*find_dependency\\(hwy")
  message(FATAL_ERROR "the package of a static tfk does not find its dependencies:\n${config}")
endif()
file(READ ${WORK_DIR}/install/tfk/tfk.pc.in pc)
if(NOT pc MATCHES "Requires.private: libhwy, tbb")
  message(FATAL_ERROR "tfk.pc of a static tfk does not name its dependencies:\n${pc}")
endif()
message(STATUS "an embedding host keeps its settings; install rules only with TFK_INSTALL")
