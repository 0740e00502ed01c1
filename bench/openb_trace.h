// Shared set-up for the benchmark programs that run the openb trace: the
// default trace (1,213 GPU nodes, 8,152 tasks) read once per program.
//
//   const gpushare::bench::OpenbTrace& trace = gpushare::bench::DefaultOpenbTrace();
//   if (!trace.ok) state.SkipWithError("openb trace not found (set GPUSHARE_SHARED_DIR)");
//
// The trace is read from $GPUSHARE_SHARED_DIR/traces/openb, else
// ../shared/traces/openb next to the source tree; without it `ok` is false.

#ifndef GPUSHARE_BENCH_OPENB_TRACE_H_
#define GPUSHARE_BENCH_OPENB_TRACE_H_

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "gpushare/gpushare.h"

namespace gpushare::bench {

struct OpenbTrace {
  std::vector<Node> nodes;
  std::vector<TraceTask> tasks;
  std::vector<Request> requests;  // ToRequests(tasks).
  std::vector<TimedRequest> timed;
  bool ok = false;
};

inline const OpenbTrace& DefaultOpenbTrace() {
  static const OpenbTrace* trace = [] {
    auto* t = new OpenbTrace;
    std::string dir;
    if (const char* env = std::getenv("GPUSHARE_SHARED_DIR")) {
      dir = std::string(env) + "/traces/openb";
    } else {
      std::string here = __FILE__;
      here = here.substr(0, here.find_last_of('/'));  // bench/
      dir = here + "/../../shared/traces/openb";
    }
    auto nodes = LoadOpenbNodes(dir + "/openb_node_list_gpu_node.csv");
    auto tasks = LoadOpenbTasks(dir + "/openb_pod_list_default.csv");
    if (!nodes.ok() || !tasks.ok()) return t;
    t->nodes = *nodes;
    t->tasks = *tasks;
    t->requests = ToRequests(*tasks);
    for (const TraceTask& task : *tasks) {
      t->timed.push_back({ToRequest(task), std::max<int64_t>(task.creation_time, 0),
                          task.deletion_time});
    }
    t->ok = true;
    return t;
  }();
  return *trace;
}

}  // namespace gpushare::bench

#endif  // GPUSHARE_BENCH_OPENB_TRACE_H_
