// The `gpushare typical-tasks` command: the target workload of a trace or of
// a Kubernetes pod list, as the JSON that gpushare-extender
// --target-workload reads (gpushare/fragmentation.h).

#ifndef GPUSHARE_CLI_TYPICAL_TASKS_COMMAND_H_
#define GPUSHARE_CLI_TYPICAL_TASKS_COMMAND_H_

#include <string>

#include "absl/status/statusor.h"

namespace gpushare::cli {

// The flags of `gpushare typical-tasks`, each as --help describes it.
struct TypicalTasksConfig {
  bool help = false;  // --help: print TypicalTasksHelp() and exit 0.
  // Exactly one: an openb task CSV, or a Kubernetes pod list (JSON).
  std::string tasks, pods;
  // Fraction of the requests the shapes cover; TypicalTasks() checks it is in
  // (0, 1] (exit 1 when not).
  double coverage = 0.95;
  std::string out;  // The JSON file; "" for standard output.
};

// Parses the command's arguments (argv[0] is "typical-tasks").
// InvalidArgument naming the flag and the bad value, or saying that not
// exactly one of --tasks and --pods was given; `help` set for --help (then
// nothing else is checked). Reads no file.
absl::StatusOr<TypicalTasksConfig> ParseTypicalTasksFlags(int argc, const char* const* argv);

// The --help text, generated from the same definitions.
std::string TypicalTasksHelp();

// argv[0] is "typical-tasks". Returns the process exit code: 0, 1 when a
// file cannot be read or written or holds no workload, 2 for bad usage.
int RunTypicalTasks(int argc, char** argv);

}  // namespace gpushare::cli

#endif  // GPUSHARE_CLI_TYPICAL_TASKS_COMMAND_H_
