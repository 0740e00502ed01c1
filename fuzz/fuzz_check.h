// Shared by the fuzz targets: a property check that stops the run with a
// message (libFuzzer then saves the input as a crash reproducer).

#ifndef GPUSHARE_FUZZ_FUZZ_CHECK_H_
#define GPUSHARE_FUZZ_FUZZ_CHECK_H_

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"

// Aborts with `what` when `cond` is false.
#define FUZZ_CHECK(cond, what)                                                     \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      std::fprintf(stderr, "%s:%d: property violated: %s\n  %s\n", __FILE__,       \
                   __LINE__, #cond, std::string(what).c_str());                    \
      std::abort();                                                                \
    }                                                                              \
  } while (0)

// Aborts unless `status` is OK.
#define FUZZ_CHECK_OK(status, what)                                                \
  do {                                                                             \
    const absl::Status fuzz_status_ = (status);                                    \
    FUZZ_CHECK(fuzz_status_.ok(), std::string(what) + ": " + fuzz_status_.ToString()); \
  } while (0)

#endif  // GPUSHARE_FUZZ_FUZZ_CHECK_H_
