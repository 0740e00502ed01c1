// File: gpushare/types.h
// -----------------------------------------------------------------------------
// The value types of gpushare's cluster model: GPUs, nodes, requests (pods),
// placements and fit results. They are plain structs with defaults; the
// Cluster (cluster.h) validates them when they are handed to it.
//
//   gpushare::Node node;
//   node.name = "sd-cluster-04";
//   node.address = "192.168.1.214";
//   node.labels = {{"gpushare", "true"}};
//   node.gpus = {gpushare::Gpu{.memory = 14, .model = "T4"}};   // C++20
//
//   gpushare::Request pod;
//   pod.id = "default/binpack-1";
//   pod.gpu_memory = 2;                 // 2 units on one GPU
//
// Units: GPU memory is an integer number of memory units everywhere (GiB by
// default, MiB if the cluster says so: the unit is only a display name). GPU
// compute is in thousandths of one GPU (1000 = a whole GPU). Host CPU is in
// thousandths of a core, host memory in MiB.

#ifndef GPUSHARE_TYPES_H_
#define GPUSHARE_TYPES_H_

#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "gpushare/topology.h"

namespace gpushare {

// Compute capacity of every GPU, in thousandths of a GPU.
inline constexpr int64_t kGpuCompute = 1000;

// The largest value accepted for any size (memory units, CPU, host memory).
// Sums of up to 2^31 such values still fit in int64_t, so no usage counter can
// overflow.
inline constexpr int64_t kMaxQuantity = int64_t{1} << 32;

// The largest number of GPUs on one node.
inline constexpr int kMaxGpusPerNode = 64;

// The unit that GPU memory is counted in. Display only: all arithmetic is on
// integer units.
enum class MemoryUnit { kGiB, kMiB };

// "GiB" or "MiB".
const char* MemoryUnitName(MemoryUnit unit);

// One GPU as it is installed in a node.
struct Gpu {
  int64_t memory = 0;    // Memory capacity, memory units; 1..kMaxQuantity.
  std::string model;     // e.g. "T4", "V100M16"; may be empty.
  std::string uuid;      // e.g. "GPU-0b3c...", empty when unknown.
  bool healthy = true;   // Unhealthy GPUs take no new work.
};

// Prints like a constructor call, fields at their defaults left out:
// Gpu(memory=14, model='T4').
std::ostream& operator<<(std::ostream& os, const Gpu& gpu);

// A node (a machine) and everything it can offer.
struct Node {
  std::string name;                          // Unique in the cluster.
  std::string address;                       // Optional, e.g. "192.168.1.214".
  std::map<std::string, std::string> labels;
  std::vector<Gpu> gpus;                     // Index i is GPU i; sizes may differ.
  int64_t cpu = 0;          // Host CPU, thousandths of a core; 0 = not tracked.
  int64_t host_memory = 0;  // Host memory, MiB; 0 = not tracked.
  bool schedulable = true;  // Unschedulable nodes take no new work.
  // Whether the node takes shared GPU work (requests with gpu_memory or
  // compute). Unset: decided by the labels, see TakesSharedGpuWork().
  std::optional<bool> gpu_sharing;
  // How the GPUs are wired (gpushare/topology.h); its GPU count must equal
  // gpus.size(). Null: topology-blind, GPUs chosen by the policy alone.
  TopologyPtr topology;
};

// Prints like a constructor call, fields at their defaults left out:
// Node(name='sd-cluster-04', gpus=[Gpu(memory=14, model='T4')],
//      labels={'gpushare': 'true'}, address='192.168.1.214').
std::ostream& operator<<(std::ostream& os, const Node& node);

// True when `node` takes shared GPU work: `gpu_sharing` if it is set, otherwise
// one of the labels gpushare=true, cgpu=true, ack.node.gpu.schedule=share or
// ack.node.gpu.schedule=cgpu. Exclusive and CPU-only work go to any node.
bool TakesSharedGpuWork(const Node& node);

// A request for resources: one pod.
//
// Kinds (exactly one applies):
//  - shared: gpu_memory > 0 or compute > 0. N = gpu_memory units are split
//    over M = gpu_count distinct GPUs of one node, N/M on each (N must be
//    divisible by M), plus `compute` thousandths on each of them;
//  - exclusive: whole_gpus = k > 0 GPUs that hold nothing, held whole;
//  - CPU-only: none of the above; only cpu and host_memory are used.
struct Request {
  std::string id;              // Unique among placed requests, e.g. "ns/pod".
  int64_t gpu_memory = 0;      // Total GPU memory N, memory units.
  int64_t gpu_count = 1;       // M: distinct GPUs sharing N; 1..64.
  int64_t compute = 0;         // Per GPU, thousandths of a GPU; 0 or 1..1000.
  int64_t whole_gpus = 0;      // k exclusive whole GPUs; 0 = none.
  int64_t cpu = 0;             // Host CPU, thousandths of a core.
  int64_t host_memory = 0;     // Host memory, MiB.
  std::vector<std::string> gpu_models;  // Allowed GPU models; empty = any.
  std::map<std::string, std::string> node_selector;  // Label equality.
  // How much the interconnect between the chosen GPUs matters on nodes with
  // a topology (gpushare/topology.h); ignored on topology-blind nodes unless
  // it requires a minimum link.
  TopologyNeed topology;
};

// Prints like a constructor call, fields at their defaults left out:
// Request(id='binpack-1', gpu_memory=2).
std::ostream& operator<<(std::ostream& os, const Request& request);

// What a validated request needs from one node: the per-GPU shape that
// policies see. Made by Cluster::Validate().
struct Demand {
  enum class Kind { kCpuOnly, kShared, kExclusive };
  Kind kind = Kind::kCpuOnly;
  int gpu_count = 0;            // GPUs on one node; 0 for CPU-only.
  int64_t memory_per_gpu = 0;   // Shared: memory units on each GPU.
  int64_t compute_per_gpu = 0;  // Shared: thousandths on each GPU.
  int64_t cpu = 0;              // Thousandths of a core.
  int64_t host_memory = 0;      // MiB.
};

// Where a request went. Returned by Cluster::Place() and Cluster::Plan();
// Cluster::Commit() takes it back.
struct Placement {
  std::string request_id;
  std::string node;
  std::vector<int> gpus;        // GPU indices on `node`, ascending.
  int64_t memory_per_gpu = 0;   // Memory units on each GPU (shared requests).
  int64_t compute_per_gpu = 0;  // Thousandths on each GPU (shared requests).
  bool exclusive = false;       // The GPUs are held whole (memory and compute).
  int64_t cpu = 0;              // Thousandths of a core.
  int64_t host_memory = 0;      // MiB.
  // The weakest link between two of `gpus` ("NV2", "PIX", ...) on a node with
  // a topology; empty for one GPU or a topology-blind node. Derived from the
  // node's topology (Commit() sets it), so operator== ignores it.
  std::string weakest_link;

  // Total GPU memory units the request asked for (memory_per_gpu * gpus).
  int64_t total_memory() const {
    return memory_per_gpu * static_cast<int64_t>(gpus.size());
  }
  friend bool operator==(const Placement& a, const Placement& b);
  friend bool operator!=(const Placement& a, const Placement& b) {
    return !(a == b);
  }
};

// Prints like a constructor call:
// Placement(request_id='binpack-1', node='sd-cluster-05', gpus=[0],
//           memory_per_gpu=2)  — fields at their defaults are left out.
std::ostream& operator<<(std::ostream& os, const Placement& p);

// One node's answer to "can this request go here?".
struct FitResult {
  std::string node;
  bool feasible = false;
  std::string reason;  // Why not, in kube-scheduler's style; empty if feasible.
};

// Prints like a constructor call:
// FitResult(node='sd-cluster-04', feasible=False, reason='...').
std::ostream& operator<<(std::ostream& os, const FitResult& fit);

// A GPU as the cluster sees it now: capacity and what is allocated.
struct GpuStatus {
  int index = 0;
  int64_t memory = 0;          // Capacity, memory units.
  int64_t memory_used = 0;     // Allocated, memory units.
  int64_t compute_used = 0;    // Allocated, thousandths (of kGpuCompute).
  int holders = 0;             // Requests holding a share of this GPU.
  bool healthy = true;
  std::string model;
  std::string uuid;

  int64_t memory_free() const { return memory - memory_used; }
  int64_t compute_free() const { return kGpuCompute - compute_used; }
  // Nothing allocated: the GPU can be taken whole.
  bool idle() const { return holders == 0; }
};

// A node as the cluster sees it now. Policies read it; users get copies.
struct NodeStatus {
  std::string name;
  std::string address;
  std::map<std::string, std::string> labels;
  bool schedulable = true;
  bool gpu_sharing = false;     // Resolved TakesSharedGpuWork().
  int64_t cpu = 0;              // Capacity, thousandths of a core; 0 = untracked.
  int64_t cpu_used = 0;
  int64_t host_memory = 0;      // Capacity, MiB; 0 = untracked.
  int64_t host_memory_used = 0;
  std::vector<GpuStatus> gpus;
  std::vector<std::string> requests;  // Ids placed here, in no fixed order.
  TopologyPtr topology;          // Null: topology-blind.
  // Incremented by every change to this node; lets policies cache per node.
  uint64_t version = 0;

  int64_t gpu_memory() const;       // Sum of GPU capacities, memory units.
  int64_t gpu_memory_used() const;  // Sum of allocated GPU memory.
};

}  // namespace gpushare

#endif  // GPUSHARE_TYPES_H_
