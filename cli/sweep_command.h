// The `gpushare sweep` command: the FGD trace experiment for every trace x
// policy x seed, written as CSV (one row per run and 1% step of arrived GPU
// request, the columns of Python's gs.sweep()).

#ifndef GPUSHARE_CLI_SWEEP_COMMAND_H_
#define GPUSHARE_CLI_SWEEP_COMMAND_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cli/args.h"

namespace gpushare::cli {

// The flags and task files of `gpushare sweep`, each as --help describes it.
struct SweepConfig {
  bool help = false;  // --help: print SweepHelp() and exit 0.
  std::string nodes;  // The openb node CSV (required).
  // The openb task CSVs, of --tasks and the arguments that are no flags, in
  // the order given (at least one).
  std::vector<std::string> tasks;
  std::vector<std::string> policies = PaperPolicies();  // Known names, at least one.
  std::vector<uint64_t> seeds = DefaultSeeds();          // Distinct, at most kMaxSeeds.
  double inflate = 1.3;  // Total GPU request as a multiple of capacity, 0..100.
  int threads = 0;       // Worker threads; 0: all cores.
  std::string out;       // The CSV file; "" for standard output.
  // --progress (true) or --no-progress (false), the last given; unset: the
  // progress line shows when stderr is a terminal.
  std::optional<bool> progress;
};

// Parses the command's arguments (argv[0] is "sweep"). InvalidArgument
// naming the flag and the bad value, or saying which required argument is
// missing; `help` set for --help (then nothing else is checked). Reads no
// file.
absl::StatusOr<SweepConfig> ParseSweepFlags(int argc, const char* const* argv);

// The --help text, generated from the same definitions.
std::string SweepHelp();

// argv[0] is "sweep". Returns the process exit code: 0, 1 when a file or a
// run fails, 2 for bad usage.
int RunSweep(int argc, char** argv);

}  // namespace gpushare::cli

#endif  // GPUSHARE_CLI_SWEEP_COMMAND_H_
