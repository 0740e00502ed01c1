// The `gpushare simulate` command: the FGD trace experiment over policies and
// seeds, printed as a summary table, with the per-bin curve written as CSV.

#ifndef GPUSHARE_CLI_SIMULATE_COMMAND_H_
#define GPUSHARE_CLI_SIMULATE_COMMAND_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cli/args.h"
#include "gpushare/gpushare.h"

namespace gpushare::cli {

// The flags of `gpushare simulate`, each as --help describes it.
struct SimulateConfig {
  bool help = false;        // --help: print SimulateHelp() and exit 0.
  std::string nodes, tasks;  // The openb node and task CSVs (both required).
  std::string curve;         // The per-bin curve CSV to write; "" for none.
  std::vector<std::string> policies = PaperPolicies();  // Known names, at least one.
  std::vector<uint64_t> seeds = DefaultSeeds();          // Distinct, at most kMaxSeeds.
  double inflate = 1.3;  // Total GPU request as a multiple of capacity.
  int threads = 0;       // Worker threads; 0: all cores.
  bool markdown = false;
  bool replay = false;
  // --topology rules as given ("N=FILE" or "MODEL=FILE"), in order; read by
  // RunSimulate (LoadTopologyRule).
  std::vector<std::string> topologies;
  std::vector<int> migration_budgets = {0};  // Moves per 100 tasks attempted, each 0..10000.
  // Not range-checked here: the simulator refuses a bad value (exit 1).
  int max_moves = SimulationOptions{}.max_moves_per_request;
  int migration_nodes = SimulationOptions{}.migration_nodes;
  int64_t migration_search = SimulationOptions{}.migration_search_budget;
};

// Parses the command's arguments (argv[0] is "simulate"). InvalidArgument
// naming the flag and the bad value, or saying which required flag is
// missing; `help` set for --help (then nothing else is checked). Reads no
// file.
absl::StatusOr<SimulateConfig> ParseSimulateFlags(int argc, const char* const* argv);

// The --help text, generated from the same definitions.
std::string SimulateHelp();

// argv[0] is "simulate". Returns the process exit code: 0, 1 when a file or
// the simulation fails, 2 for bad usage.
int RunSimulate(int argc, char** argv);

}  // namespace gpushare::cli

#endif  // GPUSHARE_CLI_SIMULATE_COMMAND_H_
