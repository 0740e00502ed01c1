// Arguments shared by the `gpushare` commands.

#ifndef GPUSHARE_CLI_ARGS_H_
#define GPUSHARE_CLI_ARGS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace gpushare::cli {

// More seeds than this is a typing error (each seed is a whole experiment).
inline constexpr uint64_t kMaxSeeds = 10000;

// The six policies of the FGD paper, the default of both commands.
inline constexpr char kPaperPolicies[] = "fgd,bestfit,dotprod,gpupacking,gpuclustering,random";

// A command's arguments (argv[0] is its name) with every "--flag=value"
// split in two, "--flag" and "value", the form the commands' parsers read:
// both forms work, as they do for gpushare-extender. The argument after a
// "--flag" that takes a value (every flag not in `switches`) is that value
// and is kept whole, so a value may contain '=' or begin with "--".
struct SplitArgs {
  std::vector<std::string> args;
  std::vector<char*> argv;  // Into `args`.
};
// Splits `*argc` and `*argv` into `*out` and points them at it. A switch
// given a value ("--markdown=yes") is refused: prints "gpushare COMMAND: "
// and the reason, naming the argument, to stderr and returns false.
bool SplitFlagValues(const char* command, const std::vector<std::string>& switches, int* argc,
                     char*** argv, SplitArgs* out);

// Parses "A-B" ranges and single seeds separated by commas (the value of
// --seeds) into `seeds`. Returns an error message, or "" on success. A seed
// listed twice is an error: running it again would only repeat the same
// result and count it twice in a mean.
std::string ParseSeeds(const std::string& text, std::vector<uint64_t>* seeds);

// Splits the value of --policies into `names`, each a name of PolicyNames().
// Returns an error message naming the bad value and the known policies, or "".
std::string ParsePolicies(const std::string& text, std::vector<std::string>* names);

}  // namespace gpushare::cli

#endif  // GPUSHARE_CLI_ARGS_H_
