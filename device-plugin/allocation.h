// File: device-plugin/allocation.h
// -----------------------------------------------------------------------------
// What a container gets from a kubelet Allocate call, and which container
// that is.
//
// The kubelet's device ids decide what a container gets. Each id names its
// GPU ("<uuid>-mem-<k>" one unit of it, "<uuid>" the whole GPU), the kubelet
// never hands one id to two containers at once, and it counts them against
// what ListAndWatch advertised; so a container granted exactly the GPUs and
// units its ids name can never take more of a GPU than the GPU has, whatever
// a pod's spec or annotations say. The scheduler's choice reaches the
// kubelet before that, through GetPreferredAllocation, which asks for the
// ids of the GPUs the scheduler recorded on the pod (Ledger::Match).
//
//   std::vector<std::string> skipped;
//   absl::StatusOr<std::vector<NodePod>> pods = ParseNodePods(pod_list_json, &skipped);
//   Ledger ledger;
//   absl::StatusOr<Grant> predicted =                   // GetPreferredAllocation
//       ledger.Match(Resource::kGpuMem, /*count=*/3, *pods, inventory, options);
//   absl::StatusOr<Grant> grant =                       // Allocate
//       ledger.Allocate(Resource::kGpuMem, device_ids, *pods, inventory, options);
//   // grant->env["NVIDIA_VISIBLE_DEVICES"]: the UUIDs of the ids' GPUs
//   ledger.Record(*grant, now_ns);
//
// Which container a call is for: Allocate carries no pod, so the plugin
// finds the container among the pods bound to its node by what each
// container asks for. That choice only labels the grant (the pod's
// ALIYUN_COM_GPU_MEM_POD, which pod is marked ALIYUN_COM_GPU_MEM_ASSIGNED,
// whose annotations are corrected); it never changes the GPUs granted.
// Allocate prefers the container whose recorded placement is exactly what
// the ids name; when none is, the grant says it disagrees (Grant::disagrees)
// and the program corrects that pod's annotations to the kubelet's record
// (pod_resources.h: CorrectionsFrom). When no pod can be told at all (its
// annotations are missing, or it could not be read), the container still gets
// its ids' GPUs (Grant::identified is false).
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
// them by creationTimestamp). So the pod predicted is, among the pods bound
// before the kubelet started (Ledger::set_kubelet_start_ns), the one created
// first; else the one bound first (ALIYUN_COM_GPU_MEM_ASSUME_TIME); then
// creation time, then name. When several candidates would get different
// GPUs, Grant::ambiguous says so.
//
// The scheduler's plan for a container (what Match predicts): the pod's GPUs
// (every one of them for a multi-card pod) and its own share of units on
// each. A pod's GPU containers split the pod's placement: with one GPU, each
// container takes its own request on it (2 + 3 units of a 5-unit pod); over
// M GPUs, each container's units are spread over the M GPUs round-robin,
// continuing where the previous container stopped, so that the containers'
// shares sum to the placement on every GPU. An allocation annotation with
// one entry per GPU container ({"<container>":{"<gpu>":units}}, containers
// numbered among the pod's containers as ACK does) is followed as written.
// Init containers run before the others and take their units from the start
// of the same GPUs. Whole GPUs (nvidia.com/gpu): each container takes the
// next of the pod's recorded GPUs.
//
// One GPU, two resources: the kubelet counts aliyun.com/gpu-mem and
// nvidia.com/gpu apart, so it could hand GPU 0 whole to one pod while units
// of GPU 0 are in use by another. The ledger remembers which devices are in
// use (Record; the kubelet's pod-resources API after a restart, Reconcile),
// and Allocate refuses a GPU that the other resource holds.
//
// Thread safety: ParseNodePods(), DevicesOf() and MakeEnv() are pure; a
// Ledger is not synchronised (the server guards it).

#ifndef GPUSHARE_DEVICE_PLUGIN_ALLOCATION_H_
#define GPUSHARE_DEVICE_PLUGIN_ALLOCATION_H_

#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "device-plugin/inventory.h"
#include "nlohmann/json_fwd.hpp"

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

// The pods of a v1.PodList. One pod that cannot be read (a quantity out of
// range, a container that is not an object) affects only itself: it is left
// out, and `skipped`, when given, gets one line naming it and why
// ("pod default/huge container main: limits aliyun.com/gpu-mem: ...").
// Errors: InvalidArgument when the list itself is not a v1.PodList.
absl::StatusOr<std::vector<NodePod>> ParseNodePods(std::string_view pod_list_json,
                                                   std::vector<std::string>* skipped = nullptr);

// One v1.Pod (a parsed JSON object). Errors: InvalidArgument naming the pod,
// the container and the quantity that cannot be read.
absl::StatusOr<NodePod> ParseNodePod(const nlohmann::json& pod);

// The GPUs and units a container's device ids name: `gpus` ascending,
// `units` the ids on each (nvidia.com/gpu: each GPU's units). Errors:
// InvalidArgument naming an id that is not one of this node's devices of
// `resource`, or that is repeated; FailedPrecondition for aliyun.com/gpu-count
// or no id at all.
struct DeviceSet {
  std::vector<int> gpus;
  std::vector<int64_t> units;
  bool operator==(const DeviceSet& o) const { return gpus == o.gpus && units == o.units; }
};
absl::StatusOr<DeviceSet> DevicesOf(Resource resource, const std::vector<std::string>& ids,
                                    const Inventory& inventory);

struct AllocationOptions {
  // Also set HAMi-core's per-GPU limits CUDA_DEVICE_MEMORY_LIMIT_<i>
  // ("<MiB>m", i counting the container's visible GPUs), for nodes that
  // install that library to enforce them; gpushare itself does not enforce.
  bool hami_limits = false;
};

// A device in use, as the ledger remembers it.
struct HeldDevice {
  std::string device_id;
  Resource resource = Resource::kGpuMem;
  int gpu = -1;          // Index into Inventory::gpus().
  std::string pod_uid;   // "" when the pod is not known.
  std::string pod;       // "<namespace>/<name>", for messages; may be "".
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
  // The kubelet's device ids (Allocate only), as given, and each as a
  // device in use.
  std::vector<std::string> device_ids;
  std::vector<HeldDevice> devices;
  // This is the pod's last GPU container not yet served: the pod is now
  // fully assigned (the program marks ALIYUN_COM_GPU_MEM_ASSIGNED=true).
  bool completes_pod = false;
  // Other candidates would have got other GPUs or units.
  bool ambiguous = false;
  // Allocate: a container of a pod was told (pod_uid, pod, container set).
  bool identified = false;
  // Allocate: the told pod's annotations plan other GPUs or units for this
  // container than its ids name (the ids were granted).
  bool disagrees = false;
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
  // What GetPreferredAllocation asks the kubelet for: the scheduler's plan.
  absl::StatusOr<Grant> Match(Resource resource, int64_t count,
                              const std::vector<NodePod>& pods, const Inventory& inventory,
                              const AllocationOptions& options = {}) const;
  // What an Allocate of `device_ids` grants: exactly the GPUs and units the
  // ids name (DevicesOf), labelled with the container they are for (see the
  // file comment), its environment made by MakeEnv. Does not record it.
  // Errors: DevicesOf's; FailedPrecondition naming the GPU, the resource and
  // the pod when a GPU the ids name is in use through the other resource
  // (whole, or by units) by another pod.
  absl::StatusOr<Grant> Allocate(Resource resource, const std::vector<std::string>& device_ids,
                                 const std::vector<NodePod>& pods, const Inventory& inventory,
                                 const AllocationOptions& options = {}) const;
  // Records the container served and, for a grant of Allocate, its devices
  // in use. `now_ns`: a monotonic time (see Reconcile); 0 for records that
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
  // `in_use`, when given, is every device the kubelet lists as allocated:
  // those are held, and devices recorded at least `grace_ns` ago that it
  // does not list are free again.
  std::vector<Key> Reconcile(const std::vector<Key>& kubelet, int64_t now_ns, int64_t grace_ns,
                             const std::vector<HeldDevice>* in_use = nullptr);
  bool Served(const std::string& pod_uid, const std::string& container,
              Resource resource) const;
  // When the kubelet last started (Unix time, ns; 0: unknown, every pod is
  // taken as bound after it): orders the candidates (see the file comment).
  void set_kubelet_start_ns(int64_t ns) { kubelet_start_ns_ = ns; }
  // Forgets pods that are not in `pods` any more (deleted), and frees the
  // devices of those and of finished pods. `listed_at_ns` (the monotonic time
  // `pods` was read) keeps records made after it: another call may have
  // served a pod too new for this list.
  void Prune(const std::vector<NodePod>& pods,
             int64_t listed_at_ns = std::numeric_limits<int64_t>::max());
  size_t size() const { return served_.size(); }
  // The devices in use, by id.
  std::vector<HeldDevice> Held() const;

 private:
  struct Candidate {
    const NodePod* pod;
    size_t container;  // Index into pod->containers.
  };
  // The pods with a container waiting for `count` of `resource`, in the
  // kubelet's order of admission; why each other pod asking for it is not.
  std::vector<Candidate> Candidates(Resource resource, int64_t count,
                                    const std::vector<NodePod>& pods,
                                    std::vector<std::string>* why_not) const;
  void Label(const Candidate& c, Grant* grant) const;

  struct Holding {
    HeldDevice device;
    int64_t at_ns = 0;  // When recorded (0: from the kubelet's records).
  };
  // (pod uid, container, resource) served -> when it was recorded (0: fixed).
  std::map<std::tuple<std::string, std::string, Resource>, int64_t> served_;
  std::map<std::string, Holding> held_;  // By device id.
  int64_t kubelet_start_ns_ = 0;
};

// The GPUs recorded on `pod` by its annotations (ALIYUN_COM_GPU_MEM_IDX,
// else the allocation annotation), ascending; empty when neither is there.
// Errors: InvalidArgument for a malformed one or a GPU this node lacks.
absl::StatusOr<std::vector<int>> RecordedGpus(const NodePod& pod, const Inventory& inventory);

// The container environment of `grant` (its gpus and units filled in) for
// `pod` (nullptr when not known: ALIYUN_COM_GPU_MEM_POD is then the
// container's own units) on `inventory`: NVIDIA_VISIBLE_DEVICES (the GPUs' UUIDs); for
// gpu-mem also ALIYUN_COM_GPU_MEM_CONTAINER (the container's units per GPU;
// a comma-separated list when they differ), ALIYUN_COM_GPU_MEM_DEV (units
// of its first GPU), ALIYUN_COM_GPU_MEM_IDX (GPU indices joined by '-') and
// ALIYUN_COM_GPU_MEM_POD (the pod's units), plus HAMi-core's limits when
// asked.
std::map<std::string, std::string> MakeEnv(const Grant& grant, const NodePod* pod,
                                           const Inventory& inventory,
                                           const AllocationOptions& options);

}  // namespace gpushare::deviceplugin

#endif  // GPUSHARE_DEVICE_PLUGIN_ALLOCATION_H_
