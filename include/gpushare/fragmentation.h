// File: gpushare/fragmentation.h
// -----------------------------------------------------------------------------
// GPU fragmentation against a target workload, as defined by fragmentation
// gradient descent (FGD, Weng et al., USENIX ATC 2023): the idle GPU share on
// a node that the tasks one expects to arrive could not use.
//
//   std::vector<gpushare::Request> workload = ...;    // e.g. from trace.h
//   auto target = gpushare::TypicalTasks(workload);   // the frequent shapes
//   if (!target.ok()) return target.status();
//   gpushare::ClusterFragmentation f = gpushare::Fragmentation(cluster, *target);
//   std::cout << f.amount << " milli-GPU, rate " << f.rate << "\n";
//
// For one target task t and a node N with idle share gL[i] on GPU i:
//  - t needs no GPU, or N cannot host t (CPU short, GPU model not allowed,
//    no GPU with gL >= t's share, fewer than t.gpu_count fully idle GPUs for a
//    whole-GPU task): F_N(t) = sum of gL over all GPUs;
//  - otherwise F_N(t) = sum of gL[i] over the GPUs with gL[i] < t's share.
// F_N(T) = sum over t of weight(t) * F_N(t). Host memory is never considered.
//
// The share is GPU compute (thousandths of a GPU, FragResource::kCompute) or
// GPU memory units (FragResource::kMemory); a task whose share equals a whole
// GPU (1000 compute, or the GPU's memory) is a whole-GPU task.

#ifndef GPUSHARE_FRAGMENTATION_H_
#define GPUSHARE_FRAGMENTATION_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "gpushare/types.h"

namespace gpushare {

class Cluster;

// Which per-GPU quantity fragmentation is measured in.
enum class FragResource {
  kCompute,  // Idle compute, thousandths of a GPU (the FGD paper's gpu_milli).
  kMemory,   // Free GPU memory, memory units.
};

// One task shape of the target workload and its probability.
struct TargetTask {
  int64_t cpu = 0;        // Host CPU, thousandths of a core.
  int64_t gpu_share = 0;  // Per GPU: compute thousandths or memory units; 0 = no GPU.
  int gpu_count = 0;      // GPUs; 0 = CPU-only.
  std::vector<std::string> gpu_models;  // Allowed models; empty = any.
  double weight = 0;      // Probability; weights usually sum to 1.
};

// The workload distribution that fragmentation is measured against.
struct TargetWorkload {
  FragResource resource = FragResource::kCompute;
  std::vector<TargetTask> tasks;
};

// A node state in the raw form of the FGD paper, for computing fragmentation
// without a Cluster (e.g. what-if states).
struct NodeShape {
  int64_t cpu_left = 0;            // Free host CPU, thousandths of a core.
  std::vector<int64_t> gpu_left;   // Per GPU idle share (compute or memory units).
  int64_t gpu_full = kGpuCompute;  // The share of one whole GPU (1000 for compute).
  std::string model;               // GPU model of every GPU on the node.
};

// F_N(T) of a raw node state, in the unit of `gpu_left`. O(tasks * GPUs).
double NodeFragmentation(const NodeShape& node, const TargetWorkload& target);

// F_N(T) of a node of a cluster now (unhealthy GPUs count as fragment; CPU
// untracked on the node = never short). O(tasks * GPUs).
double NodeFragmentation(const NodeStatus& node, const TargetWorkload& target);

// Totals over a cluster.
struct ClusterFragmentation {
  double amount = 0;  // Sum of F_N(T) over nodes: compute thousandths or memory units.
  double idle = 0;    // Sum of idle shares over every GPU, same unit.
  double rate = 0;    // amount / idle; 0 when nothing is idle.
};

ClusterFragmentation Fragmentation(const Cluster& cluster, const TargetWorkload& target);

// The "typical tasks" of a workload: requests grouped by (cpu, per-GPU share,
// GPU count, allowed models), the most frequent groups kept until they cover
// at least `coverage` of the requests, their weights renormalised to sum to
// 1. Ties in frequency keep the group seen first. Shared requests give
// gpu_share = compute (kCompute) or gpu_memory / gpu_count (kMemory);
// exclusive requests give a whole GPU (1000 for kCompute; 0 for kMemory,
// meaning "the whole GPU, whatever its size").
// Errors: InvalidArgument for an empty workload or coverage outside (0, 1].
absl::StatusOr<TargetWorkload> TypicalTasks(const std::vector<Request>& workload,
                                            double coverage = 0.95,
                                            FragResource resource = FragResource::kCompute);

// The target workload as JSON, the form `gpushare-extender
// --target-workload FILE` reads and `gpushare typical-tasks` writes:
//
//   {"resource": "compute",
//    "tasks": [{"cpu": 3152, "gpu_share": 810, "gpu_count": 1, "weight": 0.135},
//              {"cpu": 11300, "gpu_share": 1000, "gpu_count": 1, "weight": 0.113,
//               "gpu_models": ["V100M16", "V100M32"]}, ...]}
//
// "resource" is "compute" or "memory"; per task, "weight" is required and
// the other fields default to 0 or empty (the tasks of gs.typical_tasks()
// have these keys). Writing then reading gives the same workload.
std::string TargetWorkloadToJson(const TargetWorkload& target);

// Errors: InvalidArgument naming the offending value: malformed JSON, a
// missing or mistyped field, an unknown key (a misspelt field would
// otherwise be ignored), a resource other than compute / memory, no task,
// cpu or gpu_share outside 0..kMaxQuantity, gpu_count outside
// 0..kMaxGpusPerNode, a GPU share without GPUs, or a weight that is not a
// positive finite number, e.g. "tasks[2].weight: -1 is not a positive
// number".
absl::StatusOr<TargetWorkload> TargetWorkloadFromJson(std::string_view json);

// Checks the values of a target workload built by hand (C++ or Python):
// at least one task; per task cpu and gpu_share within 0..kMaxQuantity,
// gpu_count within 0..kMaxGpusPerNode, no GPU share without GPUs, and a
// positive finite weight. InvalidArgument names the task and the value as
// the JSON reader does, e.g. "tasks[2].weight: -1 is not a positive number".
// MakePolicy() checks PolicyOptions::fgd_target with it.
absl::Status ValidateTargetWorkload(const TargetWorkload& target);

}  // namespace gpushare

#endif  // GPUSHARE_FRAGMENTATION_H_
