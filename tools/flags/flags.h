// Command-line flags of gpushare's programs (gpushare-extender,
// kubectl-inspect-gpushare), defined once: each definition parses its flag
// and writes the --help text.
//
// Built on CLI11 (Debian's libcli11-dev, header-only). Why CLI11: a parser is
// an object (CLI::App) and parsing returns to the caller, so a program's
// flags parse in a unit test as many times as it likes, with no process
// state to reset; "--flag value" and "--flag=value" are both understood by
// the parser itself; --help is generated from the definitions, grouped as
// we choose. Abseil's flags, already a dependency, are process-global
// (ABSL_FLAG defines one variable per process, parsed once by
// absl::ParseCommandLine, which exits on errors), which makes each rule
// hard to test and two programs' flags hard to keep apart. cxxopts
// (libcxxopts-dev) would parse as well, but has no per-flag callbacks: each
// value would be fetched and checked after parsing, apart from its
// definition, and its help layout cannot be changed (kubectl's plugin
// convention wants our own "usage:" line, which CLI11's Formatter allows).
// Only the programs use it: the library (src/, include/) does not.
//
// Each flag takes exactly one value (booleans too: "--leader-elect true", as
// Kubernetes components take them), parsed by a setter that returns the
// error message naming the flag and the value, so messages and rules stay
// ours rather than the parser's. A flag given twice keeps its last value.

#ifndef GPUSHARE_TOOLS_FLAGS_FLAGS_H_
#define GPUSHARE_TOOLS_FLAGS_FLAGS_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"

namespace CLI {
class App;
}  // namespace CLI

namespace gpushare::flags {

class FlagSet {
 public:
  // Parses `v`, the flag's value (nullptr when the flag ends the command line
  // without one), into its target. Returns "" or the error message.
  using Setter = std::function<std::string(const char* v)>;

  // `usage` is the first line of --help ("usage: NAME [flags]"); `about`
  // follows it.
  FlagSet(std::string program, std::string usage, std::string about = "");
  ~FlagSet();
  FlagSet(const FlagSet&) = delete;
  FlagSet& operator=(const FlagSet&) = delete;

  // Adds the flag `name` ("--port"; "-s,--server" for a short alias too) to
  // the --help section `group`, shown as "NAME VALUE_NAME  help" (`help` may
  // span lines).
  void Add(const std::string& group, const std::string& name, const std::string& value_name,
           const std::string& help, Setter set);
  // A positional argument (at most one value).
  void AddPositional(const std::string& name, const std::string& help, std::string* out);
  // A flag without a value ("-d").
  void AddSwitch(const std::string& group, const std::string& name, const std::string& help,
                 bool* out);

  // Parses argv[1..argc-1]. InvalidArgument naming the flag and value on a
  // bad value, "unknown or incomplete flag ARG" for an argument nothing
  // takes. --help or -h: OK, and help_requested().
  absl::Status Parse(int argc, const char* const* argv);
  bool help_requested() const { return help_; }
  // The --help text.
  std::string Help() const;

 private:
  std::string program_;
  std::unique_ptr<CLI::App> app_;
  std::map<std::string, Setter> setters_;  // By the flag's long name.
  bool help_ = false;
};

// Setters of common kinds. Each names `flag` in its message.
// Any text (a file name, a URL); a missing value is an error.
FlagSet::Setter SetString(const std::string& flag, std::string* out);
// A whole number in lo..hi: "FLAG takes WHAT in LO..HI, not V".
FlagSet::Setter SetInt(const std::string& flag, const std::string& what, int64_t lo, int64_t hi,
                       int64_t* out);
FlagSet::Setter SetInt(const std::string& flag, const std::string& what, int64_t lo, int64_t hi,
                       int* out);
FlagSet::Setter SetMs(const std::string& flag, int64_t lo, int64_t hi,
                      std::chrono::milliseconds* out);
// "true" or "1", "false" or "0": "FLAG takes true or false, not V".
FlagSet::Setter SetBool(const std::string& flag, bool* out);

// "123", "64Ki", "192Mi", "1Gi" (powers of two, as Kubernetes quantities).
bool ParseBytes(const char* text, uint64_t* out);
// A whole number in lo..hi, nothing after it.
bool ParseInt(const char* text, int64_t lo, int64_t hi, int64_t* out);

}  // namespace gpushare::flags

#endif  // GPUSHARE_TOOLS_FLAGS_FLAGS_H_
