// File: gpushare/trace.h
// -----------------------------------------------------------------------------
// Loading the openb production trace (Alibaba cluster-trace-gpu-v2023, the
// trace of the FGD paper) and turning it into gpushare nodes and requests.
//
//   auto nodes = gpushare::LoadOpenbNodes("openb_node_list_gpu_node.csv");
//   auto tasks = gpushare::LoadOpenbTasks("openb_pod_list_default.csv");
//   if (!nodes.ok() || !tasks.ok()) ...;
//   std::vector<gpushare::Request> requests = gpushare::ToRequests(*tasks);
//
// Node CSV columns: sn,cpu_milli,memory_mib,gpu,model. Task CSV columns:
// name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,qos,pod_phase,
// creation_time,deletion_time,scheduled_time] (the multigpu files have only
// the first five). Columns are found by their header names. A UTF-8 byte
// order mark is skipped; lines may end in \n, \r\n or \r. Empty cells and
// "nan" mean "none" (0, or -1 for times). Numbers must be whole (a decimal
// form such as "12.0" or "1e3" is read when it is one) and in range: sizes
// 0..kMaxQuantity, times (seconds from the start of the trace) at least 0;
// "0.9", "inf" or "1e300" are errors, never truncated.
//
// Mapping: a task with num_gpu = 1 and gpu_milli < 1000 is a shared request
// with compute = gpu_milli; gpu_milli = 1000 gives whole_gpus = num_gpu;
// num_gpu = 0 a CPU-only request. Nodes take shared work; each GPU gets the
// memory of its model in GiB (T4, P100, V100M16: 16; V100M32: 32; A10: 24;
// others: TraceOptions::default_gpu_memory). GPU memory plays no part in the
// experiment, which works on compute.

#ifndef GPUSHARE_TRACE_H_
#define GPUSHARE_TRACE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "gpushare/types.h"

namespace gpushare {

struct TraceOptions {
  int64_t default_gpu_memory = 16;  // Memory units of GPUs of an unlisted model.
};

// One row of a task CSV.
struct TraceTask {
  std::string name;
  int64_t cpu = 0;          // cpu_milli: thousandths of a core.
  int64_t memory_mib = 0;   // Host memory, MiB.
  int num_gpu = 0;          // GPUs: 0 = CPU-only.
  int64_t gpu_milli = 0;    // Share of each GPU, thousandths (1000 = whole).
  std::vector<std::string> gpu_spec;  // Allowed models, duplicates removed; empty = any.
  std::string qos;          // LS, BE, Burstable, Guaranteed; may be empty.
  std::string phase;        // Running, Failed, Pending, Succeeded; may be empty.
  int64_t creation_time = -1;   // Seconds; -1 = unknown.
  int64_t deletion_time = -1;   // Seconds; -1 = unknown.
  int64_t scheduled_time = -1;  // Seconds; -1 = never scheduled / unknown.
};

// Parses a node CSV (the text itself; `source` names it in errors).
// Errors: InvalidArgument naming the line and column for a missing column, a
// malformed or fractional number, a negative value, cpu_milli or memory_mib
// above kMaxQuantity, more than kMaxGpusPerNode GPUs or a duplicate node name.
absl::StatusOr<std::vector<Node>> ParseOpenbNodes(std::string_view csv,
                                                  std::string_view source = "nodes",
                                                  const TraceOptions& options = {});
// Reads and parses a node CSV. Errors: NotFound for a missing file, then
// those of ParseOpenbNodes().
absl::StatusOr<std::vector<Node>> LoadOpenbNodes(const std::string& path,
                                                 const TraceOptions& options = {});

// Parses a task CSV. Errors: InvalidArgument naming the line and column for a
// missing column, a malformed or fractional number, a negative size or time,
// cpu_milli or memory_mib above kMaxQuantity, gpu_milli outside 0..1000,
// num_gpu outside 0..64, a share below 1000 on several GPUs, or GPUs with no
// share.
absl::StatusOr<std::vector<TraceTask>> ParseOpenbTasks(std::string_view csv,
                                                       std::string_view source = "tasks");
// Reads and parses a task CSV. Errors: NotFound, then those of ParseOpenbTasks().
absl::StatusOr<std::vector<TraceTask>> LoadOpenbTasks(const std::string& path);

// The request of one task (id = the task name).
Request ToRequest(const TraceTask& task);
std::vector<Request> ToRequests(const std::vector<TraceTask>& tasks);

}  // namespace gpushare

#endif  // GPUSHARE_TRACE_H_
