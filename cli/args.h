// What the `gpushare` commands share: their --seeds and --policies values,
// how a command's flags (tools/flags/flags.h) are defined, parsed and shown,
// and what a command does when they did not parse into something to run.

#ifndef GPUSHARE_CLI_ARGS_H_
#define GPUSHARE_CLI_ARGS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tools/flags/flags.h"

namespace gpushare::cli {

// More seeds than this is a typing error (each seed is a whole experiment).
inline constexpr uint64_t kMaxSeeds = 10000;

// The six policies of the FGD paper, the default of both commands.
inline constexpr char kPaperPolicies[] = "fgd,bestfit,dotprod,gpupacking,gpuclustering,random";
// The seeds of both commands unless --seeds is given.
inline constexpr char kDefaultSeeds[] = "42-51";

// kPaperPolicies and kDefaultSeeds, parsed.
std::vector<std::string> PaperPolicies();
std::vector<uint64_t> DefaultSeeds();

// Parses "A-B" ranges and single seeds separated by commas (the value of
// --seeds) into `seeds`. Returns an error message, or "" on success. A seed
// listed twice is an error: running it again would only repeat the same
// result and count it twice in a mean.
std::string ParseSeeds(const std::string& text, std::vector<uint64_t>* seeds);

// Splits the value of --policies into `names`, each a name of PolicyNames().
// Returns an error message naming the bad value and the known policies, or "".
std::string ParsePolicies(const std::string& text, std::vector<std::string>* names);

// Setters of --seeds and --policies (ParseSeeds, ParsePolicies): `*out` is
// replaced only by a good value.
flags::FlagSet::Setter SetSeeds(std::vector<uint64_t>* out);
flags::FlagSet::Setter SetPolicies(std::vector<std::string>* out);

// The flags of the experiment that simulate and sweep share, into `group`:
// `policies_flag` ("--policies", or "--policies,--policy" for a second
// name), --seeds and --threads.
void AddExperimentFlags(flags::FlagSet* f, const std::string& group,
                        const std::string& policies_flag, std::vector<std::string>* policies,
                        std::vector<uint64_t>* seeds, int* threads);

// A command's flags, defined once by `define` into a `Config` (a struct with
// a `bool help`), for its Parse<Command>Flags and <Command>Help.
template <typename Config>
struct CommandFlags {
  const char* program;  // "gpushare simulate".
  const char* usage;    // The first line of --help.
  const char* about;    // What follows it.
  void (*define)(flags::FlagSet*, Config*);

  // The flags of argv (argv[0] is the command) over Config's defaults, or
  // InvalidArgument naming the flag and the bad value. For --help: `help`
  // set, and the other flags may be anything.
  absl::StatusOr<Config> Parse(int argc, const char* const* argv) const {
    Config c;
    flags::FlagSet flags(program, usage, about);
    define(&flags, &c);
    if (absl::Status s = flags.Parse(argc, argv); !s.ok()) return s;
    c.help = flags.help_requested();
    return c;
  }

  // The --help text.
  std::string Help() const {
    Config c;
    flags::FlagSet flags(program, usage, about);
    define(&flags, &c);
    return flags.Help();
  }
};

// Where `gpushare COMMAND` stops before running, given how its flags parsed
// (`parsed`; `help` for --help): with 0 after printing `help_text()` to
// stdout, or with 2 after printing "gpushare COMMAND: " and why to stderr.
// nullopt: the flags parsed, run.
std::optional<int> ExitBeforeRunning(const char* command, const absl::Status& parsed, bool help,
                                     std::string (*help_text)());

}  // namespace gpushare::cli

#endif  // GPUSHARE_CLI_ARGS_H_
