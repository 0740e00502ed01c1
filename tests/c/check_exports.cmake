# cmake -DLIBRARY=libgpushare_c.so -DHEADER=gpushare.h -DNM=nm -P check_exports.cmake
#
# Fails unless the library's dynamic symbols defined in it are exactly the
# gs_* functions the header declares (each under version node GPUSHARE_C_1,
# GPUSHARE_C_2 or GPUSHARE_C_3),
# plus the version node itself: no C++ symbol leaks out, none is missing.
foreach(var LIBRARY HEADER NM)
  if(NOT ${var})
    message(FATAL_ERROR "check_exports: -D${var}=... is required")
  endif()
endforeach()

execute_process(COMMAND ${NM} -D --defined-only ${LIBRARY}
                OUTPUT_VARIABLE nm_out ERROR_VARIABLE nm_err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "check_exports: ${NM} -D failed (${rc}): ${nm_err}")
endif()

# The header's functions: "GS_API <type> gs_name(".
file(READ ${HEADER} header)
string(REGEX MATCHALL "GS_API[^;(]*[ *](gs_[a-z0-9_]+)\\(" decls "${header}")
set(declared "")
foreach(d ${decls})
  string(REGEX REPLACE ".*[ *](gs_[a-z0-9_]+)\\($" "\\1" name "${d}")
  list(APPEND declared ${name})
endforeach()
list(REMOVE_DUPLICATES declared)
list(LENGTH declared n_declared)
if(n_declared LESS 40)
  message(FATAL_ERROR "check_exports: only ${n_declared} declarations read from ${HEADER}")
endif()

string(REPLACE "\n" ";" lines "${nm_out}")
set(exported "")
set(bad "")
foreach(line ${lines})
  string(STRIP "${line}" line)
  if(line STREQUAL "")
    continue()
  endif()
  # "<address> <type> <name>[@@<version>]"; the version node is type A.
  string(REGEX REPLACE "^[0-9a-fA-F]* *[A-Za-z] +" "" sym "${line}")
  if(sym MATCHES "^GPUSHARE_C_[123](@@GPUSHARE_C_[123])?$")
    continue()
  endif()
  if(sym MATCHES "^(gs_[a-z0-9_]+)@@GPUSHARE_C_[123]$")
    list(APPEND exported ${CMAKE_MATCH_1})
  else()
    list(APPEND bad "${sym}")
  endif()
endforeach()

set(missing ${declared})
list(REMOVE_ITEM missing ${exported})
set(extra ${exported})
list(REMOVE_ITEM extra ${declared})
list(LENGTH exported n_exported)
if(bad OR missing OR extra)
  list(JOIN bad "\n  " bad_text)
  message(FATAL_ERROR "check_exports: ${LIBRARY}\n"
          "exported but not gs_* under GPUSHARE_C_1, _2 or _3:\n  ${bad_text}\n"
          "declared in the header but not exported: ${missing}\n"
          "exported but not declared in the header: ${extra}")
endif()
message(STATUS "check_exports: ${n_exported} gs_* functions under GPUSHARE_C_1, _2 and _3, nothing else")
