// Command-line flags of gpushare's programs (gpushare, gpushare-extender,
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
// ours rather than the parser's. A flag given twice keeps its last value,
// unless it is defined as repeatable (AddRepeated): then each value counts,
// in the order given. A switch (AddSwitch) takes no value: "--markdown=yes"
// is an error, not a way to spell true.
//
//   gpushare::flags::FlagSet flags("gpushare sweep", "usage: gpushare sweep [flags] FILE...");
//   flags.Add("Flags", "--out", "FILE", "write the CSV there", SetString("--out", &out));
//   flags.AddRepeated("Flags", "--tasks", "FILE", "a task file", [&](const char* v) {...});
//   if (absl::Status s = flags.Parse(argc, argv); !s.ok()) ...  // s.message() says why.
//   if (flags.help_requested()) std::cout << flags.Help();
//   if (flags.version_requested()) std::cout << flags.Version();

#ifndef GPUSHARE_TOOLS_FLAGS_FLAGS_H_
#define GPUSHARE_TOOLS_FLAGS_FLAGS_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/status/status.h"

namespace CLI {
class App;
class Option;
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

  // Adds the flag `name` ("--port"; "-s,--server" for a short alias,
  // "--policies,--policy" for a second long one) to the --help section
  // `group`, shown as "NAME VALUE_NAME  help" (`help` may span lines). Only
  // the last value given is set.
  void Add(const std::string& group, const std::string& name, const std::string& value_name,
           const std::string& help, Setter set);
  // The same for a flag that may be given many times: `set` takes every
  // value, in the order given, interleaved with those of AddPositionals.
  void AddRepeated(const std::string& group, const std::string& name,
                   const std::string& value_name, const std::string& help, Setter set);
  // A positional argument (at most one value).
  void AddPositional(const std::string& name, const std::string& help, std::string* out);
  // Positional arguments, any number: `set` takes each, in the order given.
  void AddPositionals(const std::string& name, const std::string& help, Setter set);
  // A flag without a value ("-d"): sets `*out` to true, or calls `on`, each
  // time it is given (in the order given among switches).
  void AddSwitch(const std::string& group, const std::string& name, const std::string& help,
                 bool* out);
  void AddSwitch(const std::string& group, const std::string& name, const std::string& help,
                 std::function<void()> on);

  // Parses argv[1..argc-1]. InvalidArgument naming the flag and value on a
  // bad value, "unknown or incomplete flag ARG" for an argument nothing
  // takes, "--switch takes no value, got '--switch=V'" for a switch given a
  // value. --help or -h: OK, and help_requested(); --version: OK, and
  // version_requested(). Parse once per FlagSet.
  absl::Status Parse(int argc, const char* const* argv);
  bool help_requested() const { return help_; }
  bool version_requested() const { return version_; }
  // The --help text.
  std::string Help() const;
  // The --version text: VersionLine(the program's name).
  std::string Version() const;

 private:
  // Registers the setter of a flag that takes a value under each of its
  // long names; returns the first, the key of setters_.
  std::string AddSetter(const std::string& names, Setter set);
  // Runs the setters of AddRepeated and AddPositionals in the order given.
  absl::Status RunOrdered() const;

  std::string program_;
  std::unique_ptr<CLI::App> app_;
  std::map<std::string, Setter> setters_;      // By the flag's first long name.
  std::map<std::string, std::string> keys_;    // Each long name of a flag -> its first.
  std::set<std::string> switches_;             // Each long name of a switch.
  std::map<const CLI::Option*, Setter> ordered_;  // AddRepeated and AddPositionals.
  bool help_ = false;
  bool version_ = false;
};

// "PROGRAM 0.1.0 (git v0.1.0-12-gabc1234)\n": the library's version and the
// `git describe` of the checkout the program was built from (left out when
// it was built outside a git checkout).
std::string VersionLine(const std::string& program);

// Setters of common kinds. Each names `flag` in its message.
// Any text (a file name, a URL); a missing value is an error.
FlagSet::Setter SetString(const std::string& flag, std::string* out);
// A whole number in lo..hi: "FLAG takes WHAT in LO..HI, not V".
FlagSet::Setter SetInt(const std::string& flag, const std::string& what, int64_t lo, int64_t hi,
                       int64_t* out);
FlagSet::Setter SetInt(const std::string& flag, const std::string& what, int64_t lo, int64_t hi,
                       int* out);
// Any whole number of the type: "FLAG takes a whole number, not V", for
// values whose range the library checks.
FlagSet::Setter SetInt(const std::string& flag, int64_t* out);
FlagSet::Setter SetInt(const std::string& flag, int* out);
FlagSet::Setter SetMs(const std::string& flag, int64_t lo, int64_t hi,
                      std::chrono::milliseconds* out);
// A number ("1.3", "2e-3") in lo..hi: "FLAG takes WHAT in LO..HI, not V";
// NaN never is.
FlagSet::Setter SetDouble(const std::string& flag, const std::string& what, double lo, double hi,
                          double* out);
// Any number: "FLAG takes a number, not V", for values whose range the
// library checks.
FlagSet::Setter SetDouble(const std::string& flag, double* out);
// "true" or "1", "false" or "0": "FLAG takes true or false, not V".
FlagSet::Setter SetBool(const std::string& flag, bool* out);

// --kubeconfig FILE and --context NAME in `group`, as the programs that reach
// the Kubernetes API (gpushare-extender, gpushare-device-plugin) define them.
void AddKubeconfigFlags(FlagSet* flags, const std::string& group, std::string* kubeconfig,
                        std::string* context);

// "123", "64Ki", "192Mi", "1Gi" (powers of two, as Kubernetes quantities).
bool ParseBytes(const char* text, uint64_t* out);
// A whole number in lo..hi, nothing after it.
bool ParseInt(const char* text, int64_t lo, int64_t hi, int64_t* out);
// A number (strtod's forms) in lo..hi, nothing after it.
bool ParseDouble(const char* text, double lo, double hi, double* out);

}  // namespace gpushare::flags

#endif  // GPUSHARE_TOOLS_FLAGS_FLAGS_H_
