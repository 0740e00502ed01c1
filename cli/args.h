// What the `gpushare` commands share: their --seeds and --policies values,
// and what a command does when its flags (tools/flags/flags.h) did not parse
// into something to run.

#ifndef GPUSHARE_CLI_ARGS_H_
#define GPUSHARE_CLI_ARGS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
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

// Where `gpushare COMMAND` stops before running, given how its flags parsed
// (`parsed`; `help` for --help): with 0 after printing `help_text()` to
// stdout, or with 2 after printing "gpushare COMMAND: " and why to stderr.
// nullopt: the flags parsed, run.
std::optional<int> ExitBeforeRunning(const char* command, const absl::Status& parsed, bool help,
                                     std::string (*help_text)());

}  // namespace gpushare::cli

#endif  // GPUSHARE_CLI_ARGS_H_
