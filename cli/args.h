// Arguments shared by the `gpushare simulate` and `gpushare sweep` commands.

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
