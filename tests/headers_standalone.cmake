# Every public header compiles on its own, as C11 (-pedantic) and, where a C++
# compiler is found, as C++: a program may include any topical header of
# include/stoker/ alone (stoker.h is the umbrella over them; docs/abi.md).
# Run by CTest (test `headers_standalone`):
#   cmake -DCC=... -DINCLUDE=<repo>/include -DWORK=<dir> -P tests/headers_standalone.cmake
file(GLOB headers "${INCLUDE}/stoker/*.h")
list(LENGTH headers count)
if(count LESS 7)
  message(FATAL_ERROR "expected the umbrella and its topical headers in ${INCLUDE}/stoker, found ${count}")
endif()
find_program(CXX NAMES c++ g++ clang++)
file(MAKE_DIRECTORY "${WORK}")
foreach(h ${headers})
  get_filename_component(name ${h} NAME)
  file(WRITE "${WORK}/alone_${name}.c" "#include <stoker/${name}>\nint stk_alone_;\n")
  execute_process(COMMAND ${CC} -std=c11 -Wall -Wextra -Werror -pedantic -I${INCLUDE}
                          -fsyntax-only "${WORK}/alone_${name}.c"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "stoker/${name} does not compile alone as C:\n${out}")
  endif()
  if(CXX)
    file(WRITE "${WORK}/alone_${name}.cpp" "#include <stoker/${name}>\nint stk_alone_;\n")
    execute_process(COMMAND ${CXX} -Wall -Wextra -Werror -I${INCLUDE} -fsyntax-only
                            "${WORK}/alone_${name}.cpp"
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "stoker/${name} does not compile alone as C++:\n${out}")
    endif()
  endif()
endforeach()
message(STATUS "${count} public headers compile alone")
