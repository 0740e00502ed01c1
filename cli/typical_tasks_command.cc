#include "cli/typical_tasks_command.h"

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "gpushare/gpushare.h"

namespace gpushare::cli {
namespace {

constexpr char kUsage[] =
    "usage: gpushare typical-tasks (--tasks FILE.csv | --pods FILE.json) [options]\n"
    "\n"
    "Prints the target workload of a workload as JSON: its request shapes, the\n"
    "most frequent first, until they cover --coverage of the requests (the FGD\n"
    "paper's typical tasks). gpushare-extender --target-workload reads it.\n"
    "\n"
    "  --tasks FILE       an openb task CSV (shares of GPU compute)\n"
    "  --pods FILE        a Kubernetes pod list, `kubectl get pods -A -o json`\n"
    "                     (shares of GPU memory, aliyun.com/gpu-mem units)\n"
    "  --coverage C       fraction of the requests the shapes cover, in (0, 1]\n"
    "                     (default 0.95)\n"
    "  --out FILE         write there instead of standard output\n";

int Fail(const std::string& why) {
  std::cerr << "gpushare typical-tasks: " << why << "\n";
  return 1;
}

}  // namespace

int RunTypicalTasks(int argc, char** argv) {
  SplitArgs split;
  if (!SplitFlagValues("typical-tasks", {"--help"}, &argc, &argv, &split)) return 2;
  std::string tasks_path, pods_path, out_path;
  double coverage = 0.95;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return 0;
    } else if (arg == "--tasks" && v != nullptr) {
      tasks_path = argv[++i];
    } else if (arg == "--pods" && v != nullptr) {
      pods_path = argv[++i];
    } else if (arg == "--out" && v != nullptr) {
      out_path = argv[++i];
    } else if (arg == "--coverage" && v != nullptr) {
      char* end = nullptr;
      coverage = std::strtod(argv[++i], &end);
      if (end == argv[i] || *end != '\0') {
        std::cerr << "gpushare typical-tasks: --coverage takes a number, not '" << argv[i]
                  << "'\n";
        return 2;
      }
    } else {
      std::cerr << "gpushare typical-tasks: unknown or incomplete flag " << arg << "\n" << kUsage;
      return 2;
    }
  }
  if (tasks_path.empty() == pods_path.empty()) {
    std::cerr << "gpushare typical-tasks: give one of --tasks and --pods\n" << kUsage;
    return 2;
  }
  std::vector<Request> requests;
  FragResource resource = FragResource::kCompute;
  if (!tasks_path.empty()) {
    absl::StatusOr<std::vector<TraceTask>> tasks = LoadOpenbTasks(tasks_path);
    if (!tasks.ok()) return Fail(std::string(tasks.status().message()));
    requests = ToRequests(*tasks);
  } else {
    std::ifstream in(pods_path, std::ios::binary);
    if (!in) return Fail("cannot read " + pods_path);
    std::stringstream text;
    text << in.rdbuf();
    absl::StatusOr<std::vector<k8s::Pod>> pods = k8s::ParsePodList(text.str());
    if (!pods.ok()) return Fail(pods_path + ": " + std::string(pods.status().message()));
    for (const k8s::Pod& pod : *pods) requests.push_back(pod.request);
    resource = FragResource::kMemory;
  }
  absl::StatusOr<TargetWorkload> target = TypicalTasks(requests, coverage, resource);
  if (!target.ok()) return Fail(std::string(target.status().message()));
  const std::string json = TargetWorkloadToJson(*target);
  if (out_path.empty()) {
    std::cout << json;
    return 0;
  }
  std::ofstream out(out_path, std::ios::binary | std::ios::trunc);
  if (!(out << json) || !out.flush()) return Fail("cannot write " + out_path);
  return 0;
}

}  // namespace gpushare::cli
