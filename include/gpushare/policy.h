// File: gpushare/policy.h
// -----------------------------------------------------------------------------
// Placement policies: how a node and its GPUs are chosen among those that can
// host a request. A policy is a narrow interface: the cluster finds every
// feasible node and the GPUs on it that could take the request; the policy
// picks the GPUs on each such node and gives the node a score; the highest
// score wins. Ties between nodes go to the node that ranks first in the
// cluster's tie-break order (see ClusterOptions::tie_break_seed).
//
//   auto policy = gpushare::MakePolicy("binpack");
//   if (!policy.ok()) return policy.status();   // lists the known names
//   auto placement = cluster.Place(request, **policy);
//
// Built-in policies ("binpack", "spread", ...) are documented where they are
// made: see the comments of PolicyNames() below. Users may implement their own.

#ifndef GPUSHARE_POLICY_H_
#define GPUSHARE_POLICY_H_

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "gpushare/types.h"

namespace gpushare {

class Cluster;
struct TargetWorkload;  // gpushare/fragmentation.h

// A node's score under a policy; compared lexicographically, higher is better.
// Keys a policy does not use stay 0.
struct Score {
  double primary = 0;
  double secondary = 0;
  double tertiary = 0;
  // Not the policy's: the cluster sets it after Evaluate() from the node's
  // GPU topology (0..1, see "GPU topology" under PolicyNames() below); it
  // only decides between nodes whose three policy keys are equal, and only
  // among the first 16 of them in the tie-break order. Policies leave it 0;
  // a value they set is overwritten.
  double topology = 0;

  friend bool operator<(const Score& a, const Score& b) {
    if (a.primary != b.primary) return a.primary < b.primary;
    if (a.secondary != b.secondary) return a.secondary < b.secondary;
    if (a.tertiary != b.tertiary) return a.tertiary < b.tertiary;
    return a.topology < b.topology;
  }
  friend bool operator==(const Score& a, const Score& b) {
    return a.primary == b.primary && a.secondary == b.secondary &&
           a.tertiary == b.tertiary && a.topology == b.topology;
  }
};

std::ostream& operator<<(std::ostream& os, const Score& s);

// A policy's verdict on one feasible node.
struct NodeChoice {
  Score score;
  std::vector<int> gpus;  // The demand.gpu_count GPUs chosen, from `fitting`.
};

// The interface every placement policy implements.
//
// Thread safety: a policy object is used by one call at a time. Policies with
// state (a random stream, caches) must not be shared between threads.
class Policy {
 public:
  virtual ~Policy() = default;

  // The stable lower_snake_case name, e.g. "binpack".
  virtual std::string Name() const = 0;

  // Scores `node`, which the cluster has found able to host `demand`, and
  // chooses demand.gpu_count GPUs for it. `fitting` lists, in ascending order,
  // the indices of the node's GPUs that can each take one share: healthy, of
  // an allowed model, with enough free memory and compute (idle, for
  // exclusive demands). It has at least demand.gpu_count entries; for CPU-only
  // demands it is empty and `gpus` must stay empty.
  //
  // `cluster` gives read access to the rest of the state (e.g. the placements
  // on the node). The result must be a function of its arguments and the
  // policy's own state.
  virtual NodeChoice Evaluate(const Demand& demand, const NodeStatus& node,
                              const std::vector<int>& fitting,
                              const Cluster& cluster) = 0;

  // Called after a placement the policy chose has been committed. Policies
  // with state to advance (e.g. caches keyed by node version) may override.
  virtual void OnCommitted(const Placement& /*placement*/) {}
};

// Options for MakePolicy(); what a given policy ignores is harmless.
struct PolicyOptions {
  uint64_t seed = 42;  // For "random".
  // For "fgd", "fgdcpu" and "fgdpack": the workload whose fragmentation it
  // descends, e.g. from TypicalTasks(). Null: one whole-GPU task (only partly
  // used GPUs count). MakePolicy() refuses one that ValidateTargetWorkload()
  // refuses, for every policy name.
  std::shared_ptr<const TargetWorkload> fgd_target;
};

// The names MakePolicy() knows, sorted:
//
// "binpack" — keep whole GPUs and whole nodes free for big requests.
//   GPUs on a node: the demand.gpu_count fitting GPUs with the least free
//   memory, then the least free compute, then the lowest index.
//   Node score:
//     shared:    ( -sum of free memory left on the chosen GPUs,
//                  -sum of free compute left on the chosen GPUs )
//                so for one GPU this is best fit over every GPU of the cluster;
//     exclusive: ( -idle GPUs on the node, -free GPU memory on the node );
//     CPU-only:  ( cpu used / cpu, host memory used / host memory ) (0 when
//                untracked) — the most used node.
//
// "spread" — put new work on the least used node and GPU.
//   GPUs on a node: the fitting GPUs with the most free memory, then the most
//   free compute, then the lowest index.
//   Node score:
//     shared:    ( -GPU memory used / GPU memory of the node,
//                  -GPU compute used / GPU compute of the node,
//                  +sum of free memory left on the chosen GPUs );
//     exclusive: ( +idle GPUs on the node, +free GPU memory on the node );
//     CPU-only:  ( -cpu used / cpu, -host memory used / host memory ).
//
// The policies of the FGD paper (Weng et al., USENIX ATC 2023), scored on GPU
// compute; gL = idle compute per GPU (thousandths), G = sum of gL on the node,
// cpuL = free CPU (0 when untracked), task (c, m per GPU, n GPUs), R = m * n
// (m = 1000 for exclusive GPUs). Scores are integers (truncated); unless said
// otherwise the GPUs are the fitting ones with the least idle compute (ties:
// lowest index), or for exclusive requests the first n idle ones by index.
//
// "bestfit" — int(100 * (1 - [0.5 * (cpuL - c) / 128000 + 0.5 * (G - R) / 8000])).
//
// "dotprod" — int(100 * (1 - dot / 2)), dot = cpuL/128000 * c/128000 +
//   G/8000 * R/8000: the smallest product wins.
//
// "fgd" — fragmentation gradient descent against PolicyOptions::fgd_target
//   (see gpushare/fragmentation.h): F0 = the node's fragmentation now, F1 =
//   after the placement; score int(100 * sigmoid((F0 - F1) / W)), sigmoid(x)
//   = 1 / (1 + e^-x), W = 1000 (a memory target: the memory of GPU 0). A
//   single-GPU shared request tries every fitting GPU and takes the first one
//   with the best score.
//
// "fgdcpu" — "fgd" whose ties are broken by CPU: the same integer score S,
//   plus int(100 * sigmoid((C0 - C1) / W)) / 101, where C is the node's
//   fragmentation with each target task type counting only the fitting GPUs
//   the node's free CPU can serve with copies of it (largest idle share
//   first; see FragAmount in gpushare/fragmentation.h for the rest) — or
//   50 / 101 on a node whose GPU model some target task type with a GPU
//   model list may use, where the seeded tie order is left to decide which
//   models stay free, and for a request for one GPU (a share of one, or one
//   whole GPU; not a CPU-only one) on a node whose GPUs are all wholly idle
//   (its CPU-bound C counts GPUs as stranded that a multi-GPU request would
//   use whole). A single-GPU shared request takes,
//   among its best GPUs, the one with the least idle compute. FGD's score
//   truncates to integers, so many nodes tie; among them "fgdcpu" fills the
//   GPUs a node's CPU would strand and spares nodes whose CPU is running
//   short. On the openb traces it leaves fewer GPUs unallocated than "fgd"
//   on eight of nine variants and no more on the ninth (README, "Beyond
//   FGD").
//
// "fgdpack" — "fgdcpu" that packs shared GPUs as a bin-packing problem first.
//   The single-GPU shared types of PolicyOptions::fgd_target (share s_i of a
//   GPU of W units, weight p_i) are priced once, per GPU size, by the dual of
//   the cutting-stock LP: y_i >= 0 with no multiset of shares that fits one
//   GPU worth more than 1, maximising sum p_i y_i (so y_i is the part of a
//   GPU a copy is worth when the target is packed as tightly as it can be:
//   1 for a share that needs a GPU of its own, 0 for one that only fills
//   holes others leave). An idle share g is worth V(g) = the most a multiset
//   fitting in g is worth. A single-GPU shared request is scored on the GPU
//   "fgdcpu" picks: fgdcpu's score - 128 * round(10^6 * (V(g) - V(g - m))),
//   the packing value it loses there, so the loss decides first and fgdcpu's
//   score breaks its ties (a share that completes a tight pattern loses only
//   its own price; one put where it breaks a pattern loses more). Other
//   requests score as in "fgdcpu". On the openb traces it leaves fewer GPUs
//   unallocated than "fgd" and "fgdcpu" on all nine variants (default 3.84%
//   against 4.73% and 4.27%; README, "Beyond FGD"). Shares of GPUs larger
//   than 65,536 units (a memory target in MiB) are not priced: there it is
//   "fgdcpu".
//
// "gpuclustering" — tags: "share-gpu", "<n>-gpu"; u = int(25 * (8000 - G) /
//   8000); the node's GPU requests all have the request's tag: 75 + u; some
//   do: 50 + u; the node has no GPU request: 25 + u; otherwise u. CPU-only: 0.
//
// "gpupacking" — every GPU of the node idle: max(33 - idle GPUs, idle GPUs);
//   the chosen GPUs include k >= 1 idle ones: max(50 - k, 33); otherwise
//   max(100 - sum over chosen GPUs of int(gL * 100 / 1000) / 10, 50).
//   CPU-only: 0.
//
// "random" — a uniformly random feasible node (seeded by PolicyOptions::seed)
//   and uniformly random fitting GPUs.
//
// Kubernetes' Dynamic Resource Allocation (DRA), for the simulator: with a
// DRA driver that publishes each GPU as a device whose memory (or compute)
// is consumable capacity, kube-scheduler chooses the node, and the DRA
// allocator (k8s.io/dynamic-resource-allocation/structured, Kubernetes 1.37)
// chooses the devices in it: first fit, no scoring — the first devices, in
// the order the driver lists them (GPU index), that have room. Both policies
// below choose GPUs so; they differ in who chooses the node.
//
// "dra" — kube-scheduler alone: no default score plugin counts DRA devices
//   or consumed capacity, so the node is the one NodeResourcesFit's
//   LeastAllocated strategy prefers: int(100 * (free CPU after the pod) /
//   CPU capacity) (0 when CPU is untracked; host memory, its second
//   resource, is not in this view). GPUs: the first demand.gpu_count fitting.
//
// "dra+<name>" — for every name above (not "dra"): <name>'s node score on
//   the GPUs the allocator will take there (the policy is offered those
//   alone), what GpuShare does for pods whose claims use the gpushare device
//   class; GPUs: the first demand.gpu_count fitting.
//   So "dra+fgdpack" against "fgdpack" is what DRA's device choice costs
//   fragmentation-aware placement.
//
// Scores use the state before the placement. Ties between nodes: see
// ClusterOptions::tie_break_seed.
//
// GPU topology (gpushare/topology.h), the same for every policy. For a
// request of two or more GPUs whose Request::topology is not kNone, the
// cluster combines each feasible node's policy score with the connectivity
// the node can offer, lexicographically:
//  1. the policy's own score (primary, secondary, tertiary), computed on the
//     GPUs the policy picks, decides first, so packing and the FGD
//     fragmentation descent are never traded for connectivity;
//  2. among the nodes it scores equal, the first 16 in the tie-break order
//     compete on Score::topology, and the highest wins: the node's
//     topology chooses its set (Topology::Choose() among the fitting GPUs,
//     with the policy's pick first in the preference order), and the key is
//     that set's measure divided by the measure of the best set of as many
//     GPUs the topology has when every GPU is idle — the weakest pair's
//     weight for TopologyObjective::kWeakestLink, the total for kTotal. So
//     it is 1 when the node can still offer its best (always on NVSwitch
//     nodes) and less when its free GPUs are worse connected; e.g. on a
//     DGX-1 a free NV2 pair scores 1, a free SYS pair 8/50 = 0.16. A node
//     without a topology scores 1 (nothing is known against it);
//  3. equal keys go to the earlier node in the tie-break order
//     (ClusterOptions::tie_break_seed).
// The window of 16 bounds the cost: at most 16 more nodes are evaluated
// than without topology, however many nodes tie (the tie-break order is a
// seeded shuffle, so they are a sample of the tied nodes). The key is a
// function of the node and the request only (like the rest of the score),
// 0 for single-GPU, CPU-only and kNone requests, and 1 on every node of a
// cluster without topologies, where the result is the policy's alone. The GPUs placed are the set the topology chose: at least as well
// connected as the policy's pick (for kWeakestLink, never a weaker weakest
// pair), equal to it when no other set is better or leaves better groups
// behind. A single GPU is moved only among idle GPUs. A required minimum
// link (TopologyNeed::kRequire) makes nodes that cannot meet it infeasible
// before any score is computed. Placement::weakest_link reports the result.
std::vector<std::string> PolicyNames();

// Makes the policy called `name`.
// Errors: InvalidArgument for an unknown name; the message lists the known
// ones.
absl::StatusOr<std::unique_ptr<Policy>> MakePolicy(
    std::string_view name, const PolicyOptions& options = {});

}  // namespace gpushare

#endif  // GPUSHARE_POLICY_H_
