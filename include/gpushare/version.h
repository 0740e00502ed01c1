// File: gpushare/version.h
// -----------------------------------------------------------------------------
// The library's version.

#ifndef GPUSHARE_VERSION_H_
#define GPUSHARE_VERSION_H_

#define GPUSHARE_VERSION_MAJOR 0
#define GPUSHARE_VERSION_MINOR 1
#define GPUSHARE_VERSION_PATCH 0

namespace gpushare {

// "0.1.0"
const char* Version();

}  // namespace gpushare

#endif  // GPUSHARE_VERSION_H_
