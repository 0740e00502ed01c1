// gpushare: the command-line host of the library.
//
//   gpushare version
//   gpushare policies
//   gpushare simulate --nodes FILE --tasks FILE [--policies fgd,bestfit,...]
//                     [--seeds 42-51] [--inflate 1.3] [--curve FILE]
//   gpushare sweep --nodes FILE [--policies ...] [--seeds ...] [--out FILE]
//                  TASKS.csv...
//   gpushare typical-tasks (--tasks FILE.csv | --pods FILE.json) [--coverage 0.95]
//
// Flags take their value as "--flag VALUE" or "--flag=VALUE".

#include <cstring>
#include <iostream>

#include "cli/simulate_command.h"
#include "cli/sweep_command.h"
#include "cli/typical_tasks_command.h"
#include "gpushare/gpushare.h"
#include "tools/flags/flags.h"

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "help") == 0) {
    std::cout << "usage: gpushare <command>\n\ncommands:\n"
                 "  version    print the library version (--version: with the git commit built)\n"
                 "  policies   list the placement policies\n"
                 "  simulate   run the FGD trace experiment (gpushare simulate --help)\n"
                 "  sweep      the experiment over traces x policies x seeds, as CSV\n"
                 "             (gpushare sweep --help)\n"
                 "  typical-tasks  the target workload of a trace or pod list, as JSON\n"
                 "             (gpushare typical-tasks --help)\n"
                 "\nflags take their value as --flag VALUE or --flag=VALUE\n";
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  if (cmd == "version") {
    std::cout << gpushare::Version() << "\n";
    return 0;
  }
  if (cmd == "--version") {
    std::cout << gpushare::flags::VersionLine("gpushare");
    return 0;
  }
  if (cmd == "policies") {
    for (const std::string& name : gpushare::PolicyNames()) std::cout << name << "\n";
    return 0;
  }
  if (cmd == "simulate") return gpushare::cli::RunSimulate(argc - 1, argv + 1);
  if (cmd == "sweep") return gpushare::cli::RunSweep(argc - 1, argv + 1);
  if (cmd == "typical-tasks") return gpushare::cli::RunTypicalTasks(argc - 1, argv + 1);
  std::cerr << "gpushare: unknown command '" << cmd << "' (try 'gpushare help')\n";
  return 2;
}
