# Runs PROGRAM with ARGS in an environment with ENV (both lists separated by
# '|') and checks that it exits with 0 and that its stderr holds the line
# tfk prints for a refused variable: exactly once where EXPECT names the
# variable's assignment (VAR=value), never where EXPECT is empty (accepted
# values are taken without a word).
string(REPLACE "|" ";" args "${ARGS}")
string(REPLACE "|" ";" env "${ENV}")
execute_process(COMMAND ${CMAKE_COMMAND} -E env ${env} ${PROGRAM} ${args}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${PROGRAM} ${args} with ${env} exited with ${rc}:\n${out}\n${err}")
endif()
string(REGEX MATCHALL "tfk: ignoring [^\n]*" lines "${err}")
list(LENGTH lines count)
if(EXPECT STREQUAL "")
  if(NOT count EQUAL 0)
    message(FATAL_ERROR "with ${env}, an accepted setting, tfk printed: ${lines}")
  endif()
else()
  # The value is followed by " (want ...)", or ": " and the call's message.
  string(FIND "${lines}" "tfk: ignoring ${EXPECT} (" at)
  string(FIND "${lines}" "tfk: ignoring ${EXPECT}: " at_colon)
  if(NOT count EQUAL 1 OR (at EQUAL -1 AND at_colon EQUAL -1))
    message(FATAL_ERROR
      "with ${env}, want one line 'tfk: ignoring ${EXPECT} (...)' on stderr, got: ${lines}")
  endif()
  message(STATUS "${lines}")
endif()
