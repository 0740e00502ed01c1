// The `gpushare simulate` command: the FGD trace experiment over policies and
// seeds, printed as a summary table, with the per-bin curve written as CSV.

#ifndef GPUSHARE_CLI_SIMULATE_COMMAND_H_
#define GPUSHARE_CLI_SIMULATE_COMMAND_H_

namespace gpushare::cli {

// argv[0] is "simulate". Returns the process exit code.
int RunSimulate(int argc, char** argv);

}  // namespace gpushare::cli

#endif  // GPUSHARE_CLI_SIMULATE_COMMAND_H_
