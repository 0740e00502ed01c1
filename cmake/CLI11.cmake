# CLI11, the flag parser of gpushare's programs (tools/flags/flags.h); header-only.
# Debian's libcli11-dev ships a CMake config (CLI11::CLI11); an install with
# only the headers is found by them. The library (src/) does not use it.
if(NOT TARGET CLI11::CLI11)
  find_package(CLI11 2.1 CONFIG QUIET)
  if(NOT TARGET CLI11::CLI11)
    find_path(GPUSHARE_CLI11_INCLUDE_DIR CLI/CLI.hpp)
    if(NOT GPUSHARE_CLI11_INCLUDE_DIR)
      message(FATAL_ERROR "CLI11 (CLI/CLI.hpp) not found: install libcli11-dev "
                          "(scripts/install-deps.sh)")
    endif()
    add_library(CLI11::CLI11 INTERFACE IMPORTED)
    target_include_directories(CLI11::CLI11 INTERFACE ${GPUSHARE_CLI11_INCLUDE_DIR})
  endif()
endif()
