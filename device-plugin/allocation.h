// File: device-plugin/allocation.h
// -----------------------------------------------------------------------------
// Which container a kubelet Allocate call is for, and what that container
// gets. The kubelet's call names only device ids (Allocate carries no pod),
// so the plugin finds the container among the pods bound to its node, as the
// API server lists them, by what each container asks for:
//
//   absl::StatusOr<std::vector<NodePod>> pods = ParseNodePods(pod_list_json);
//   Ledger ledger;
//   absl::StatusOr<Grant> grant =
//       ledger.Match(Resource::kGpuMem, /*count=*/3, *pods, inventory, options);
//   // grant->env["NVIDIA_VISIBLE_DEVICES"] == "GPU-7300..."
//   ledger.Record(*grant);
//
// A candidate is a pod that is not finished or being deleted, that a
// gpushare scheduler bound here (ALIYUN_COM_GPU_MEM_IDX, else the allocation
// annotation scheduler.framework.gpushare.allocation, naming GPUs of this
// node), that is not marked ALIYUN_COM_GPU_MEM_ASSIGNED=true, and that has a
// container asking exactly `count` of the resource which the ledger has not
// yet served. The kubelet admits pods one at a time and allocates a pod's
// containers in order (init containers first), so the container taken is the
// first such container of the chosen pod. It admits pods in the order it
// learns of them: as they are bound, except at its start, when it lists every
// pod bound to it and admits those by creation time (HandlePodAdditions sorts
// them by creationTimestamp). So the pod chosen is, among the pods bound
// before the kubelet started (Ledger::set_kubelet_start_ns), the one created
// first; else the one bound first (ALIYUN_COM_GPU_MEM_ASSUME_TIME); then
// creation time, then name. creationTimestamp counts seconds, and the
// kubelet's order of pods created in the same second is arbitrary: among
// those the choice is a guess. When several candidates would get different
// GPUs, Grant::ambiguous says so (the program counts it); when they would all
// get the same GPUs and units the choice cannot matter.
//
// What a container gets (gpu-mem): the pod's GPUs (every one of them for a
// multi-card pod, so NVIDIA_VISIBLE_DEVICES lists all M UUIDs) and its own
// share of units on each. A pod's GPU containers split the pod's placement:
// with one GPU, each container takes its own request on it (2 + 3 units of a
// 5-unit pod); over M GPUs, each container's units are spread over the M GPUs
// round-robin, continuing where the previous container stopped, so that the
// containers' shares sum to the placement on every GPU. An allocation
// annotation with one entry per GPU container ({"<container>":{"<gpu>":
// units}}, containers numbered among the pod's containers as ACK does) is
// followed as written. Init containers run before the others and take their
// units from the start of the same GPUs. Whole GPUs (nvidia.com/gpu): each
// container takes the next of the pod's recorded GPUs.
//
// The choice can be wrong: pods created in the same second are admitted by
// the kubelet in an order nobody outside it knows. Then two containers of
// the same size have swapped GPUs (each GPU still carries the same units).
// The kubelet's own records show it (GetPreferredAllocation steers its
// device ids to the GPUs granted): CorrectionsFrom() (pod_resources.h) finds
// the pods whose devices sit on other GPUs than their annotations name, the
// program writes the annotations to match (the extender follows at once),
// and Ledger::Reconcile() puts back the container wrongly taken as served.
//
// Thread safety: ParseNodePods() and MakeEnv() are pure; a Ledger is not
// synchronised (the server guards it).

#ifndef GPUSHARE_DEVICE_PLUGIN_ALLOCATION_H_
#define GPUSHARE_DEVICE_PLUGIN_ALLOCATION_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "device-plugin/inventory.h"

namespace gpushare::deviceplugin {

enum class Resource { kGpuMem, kGpuCount, kWholeGpu };

// "aliyun.com/gpu-mem", "aliyun.com/gpu-count", "nvidia.com/gpu".
const char* ResourceName(Resource resource);

// One container of a pod, as the kubelet allocates it.
struct ContainerDemand {
  std::string name;
  bool init = false;        // spec.initContainers[]
  int64_t gpu_mem = 0;      // limits aliyun.com/gpu-mem (units)
  int64_t whole_gpus = 0;   // limits nvidia.com/gpu
};

// A pod bound to this node: the parts that allocation reads.
struct NodePod {
  std::string uid;
  std::string namespace_name;
  std::string name;
  std::string phase;               // status.phase
  bool terminating = false;        // metadata.deletionTimestamp is set
  std::string creation_timestamp;  // RFC 3339, so ordered as text
  std::map<std::string, std::string> annotations;
  std::vector<ContainerDemand> containers;  // Init containers first, each in order.

  std::string id() const { return namespace_name + "/" + name; }
};

// The pods of a v1.PodList. Errors: InvalidArgument for malformed JSON or a
// malformed quantity (naming the pod, container and resource).
absl::StatusOr<std::vector<NodePod>> ParseNodePods(std::string_view pod_list_json);

struct AllocationOptions {
  // Also set HAMi-core's per-GPU limits CUDA_DEVICE_MEMORY_LIMIT_<i>
  // ("<MiB>m", i counting the container's visible GPUs), for nodes that
  // install that library to enforce them; gpushare itself does not enforce.
  bool hami_limits = false;
};

// What one container gets.
struct Grant {
  Resource resource = Resource::kGpuMem;
  std::string pod_uid;
  std::string pod;        // "<namespace>/<name>"
  std::string container;
  std::vector<int> gpus;        // Indices into Inventory::gpus(), ascending.
  std::vector<int64_t> units;   // Units on each of `gpus` (whole GPUs: all of it).
  std::map<std::string, std::string> env;
  // This is the pod's last GPU container not yet served: the pod is now
  // fully assigned (the program marks ALIYUN_COM_GPU_MEM_ASSIGNED=true).
  bool completes_pod = false;
  // Other candidates would have got other GPUs or units.
  bool ambiguous = false;
};

class Ledger {
 public:
  // The container an Allocate of `count` devices of `resource` is for, and
  // what it gets (see the file comment). Does not record it: Record() does,
  // once the reply is sent. Errors: NotFound naming the resource, the count
  // and, for each pod bound here that asks for the resource, why it is not a
  // match; InvalidArgument for a malformed placement annotation on the
  // chosen pod, or one naming a GPU this node lacks; FailedPrecondition for
  // aliyun.com/gpu-count, which is advertised to count the GPUs, not to be
  // asked for.
  absl::StatusOr<Grant> Match(Resource resource, int64_t count,
                              const std::vector<NodePod>& pods, const Inventory& inventory,
                              const AllocationOptions& options = {}) const;
  // `now_ns`: a monotonic time (see Reconcile); 0 for records that
  // Reconcile must never drop.
  void Record(const Grant& grant, int64_t now_ns = 0);
  // Marks a container served without an Allocate from this process (a
  // restart: what the kubelet's pod-resources API reports).
  void RecordServed(const std::string& pod_uid, const std::string& container,
                    Resource resource);
  // Makes the ledger what the kubelet's records say (`kubelet`: every
  // container it allocated, from its pod-resources API): those are served;
  // a container recorded at least `grace_ns` before `now_ns` that the kubelet
  // does not list was not the one the kubelet admitted then (it admitted
  // another pod's container of the same size, see the file comment), so it
  // is waiting again. Recent records stay: the kubelet lists a container
  // only once its Allocate has returned. Returns the containers put back.
  struct Key {
    std::string pod_uid;
    std::string container;
    Resource resource;
  };
  std::vector<Key> Reconcile(const std::vector<Key>& kubelet, int64_t now_ns, int64_t grace_ns);
  bool Served(const std::string& pod_uid, const std::string& container,
              Resource resource) const;
  // When the kubelet last started (Unix time, ns; 0: unknown, every pod is
  // taken as bound after it): orders the candidates (see the file comment).
  void set_kubelet_start_ns(int64_t ns) { kubelet_start_ns_ = ns; }
  // Forgets pods that are not in `pods` any more (deleted).
  void Prune(const std::vector<NodePod>& pods);
  size_t size() const { return served_.size(); }

 private:
  // (pod uid, container, resource) served -> when it was recorded (0: fixed).
  std::map<std::tuple<std::string, std::string, Resource>, int64_t> served_;
  int64_t kubelet_start_ns_ = 0;
};

// The GPUs recorded on `pod` by its annotations (ALIYUN_COM_GPU_MEM_IDX,
// else the allocation annotation), ascending; empty when neither is there.
// Errors: InvalidArgument for a malformed one or a GPU this node lacks.
absl::StatusOr<std::vector<int>> RecordedGpus(const NodePod& pod, const Inventory& inventory);

// The container environment of `grant` (its gpus and units filled in) for
// `pod` on `inventory`: NVIDIA_VISIBLE_DEVICES (the GPUs' UUIDs); for
// gpu-mem also ALIYUN_COM_GPU_MEM_CONTAINER (the container's units per GPU;
// a comma-separated list when they differ), ALIYUN_COM_GPU_MEM_DEV (units
// of its first GPU), ALIYUN_COM_GPU_MEM_IDX (GPU indices joined by '-') and
// ALIYUN_COM_GPU_MEM_POD (the pod's units), plus HAMi-core's limits when
// asked.
std::map<std::string, std::string> MakeEnv(const Grant& grant, const NodePod& pod,
                                           const Inventory& inventory,
                                           const AllocationOptions& options);

}  // namespace gpushare::deviceplugin

#endif  // GPUSHARE_DEVICE_PLUGIN_ALLOCATION_H_
