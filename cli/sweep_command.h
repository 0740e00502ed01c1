// The `gpushare sweep` command: the FGD trace experiment for every trace x
// policy x seed, written as CSV (one row per run and 1% step of arrived GPU
// request, the columns of Python's gs.sweep()).

#ifndef GPUSHARE_CLI_SWEEP_COMMAND_H_
#define GPUSHARE_CLI_SWEEP_COMMAND_H_

namespace gpushare::cli {

// argv[0] is "sweep". Returns the process exit code.
int RunSweep(int argc, char** argv);

}  // namespace gpushare::cli

#endif  // GPUSHARE_CLI_SWEEP_COMMAND_H_
