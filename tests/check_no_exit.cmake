# Fails when the library LIBRARY refers to exit() or one of its kin: library code never ends
# the caller's process (cuflash/error.h). nvcc can compile a host call to a __device__-only
# function into a stub that calls exit(), without a diagnostic; this finds such a call in CI,
# where no GPU runs the code.
#   cmake -DNM=<nm> -DLIBRARY=<file> -P check_no_exit.cmake
execute_process(COMMAND ${NM} -u ${LIBRARY} OUTPUT_VARIABLE undefined RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${NM} -u ${LIBRARY} failed (${status})")
endif()
string(REGEX MATCHALL "[ \t]U[ \t]+(exit|_exit|_Exit|quick_exit)\n" calls "${undefined}")
if(calls)
  string(REGEX REPLACE "[ \t\n]*U[ \t]+([^\n]+)\n" "\\1 " names "${calls}")
  message(FATAL_ERROR "${LIBRARY} refers to: ${names}(a host call to a __device__ function?)")
endif()
message(STATUS "${LIBRARY}: no call to exit()")
