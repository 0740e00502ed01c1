// The `gpushare typical-tasks` command: the target workload of a trace or of
// a Kubernetes pod list, as the JSON that gpushare-extender
// --target-workload reads (gpushare/fragmentation.h).

#ifndef GPUSHARE_CLI_TYPICAL_TASKS_COMMAND_H_
#define GPUSHARE_CLI_TYPICAL_TASKS_COMMAND_H_

namespace gpushare::cli {

// argv[0] is "typical-tasks". Returns the process exit code.
int RunTypicalTasks(int argc, char** argv);

}  // namespace gpushare::cli

#endif  // GPUSHARE_CLI_TYPICAL_TASKS_COMMAND_H_
