// File: gpushare/kubernetes.h
// -----------------------------------------------------------------------------
// Kubernetes in and out: Kubernetes quantities, v1.Pod and v1.Node JSON as
// kube-scheduler and kubectl print them, the state of a cluster rebuilt from
// `kubectl get nodes -o json` and `kubectl get pods -o json`, and the
// scheduler-extender protocol (k8s.io/kube-scheduler/extender/v1) over a
// thread-safe Scheduler (scheduler.h). Every function takes and returns JSON
// text, so no JSON library appears in this header.
//
//   auto cluster = gpushare::k8s::RebuildCluster(nodes_json, pods_json);
//   auto scheduler = gpushare::Scheduler::Create(*std::move(cluster));
//   gpushare::k8s::Extender extender(scheduler->get());
//   // In an HTTP handler for POST /gpushare-scheduler/filter:
//   absl::StatusOr<std::string> reply = extender.Filter(body);
//   // !reply.ok(): malformed body -> HTTP 400 with ErrorJson(reply.status()).
//
// Names (see domain.md §2): a pod asks `aliyun.com/gpu-mem` units (container
// limits, summed; init containers excluded), optionally labelled
// `aliyun.com/gpu-count: "M"` to split them over M GPUs, or `nvidia.com/gpu`
// whole GPUs. A node offers capacity `aliyun.com/gpu-mem` (all its GPUs) over
// `aliyun.com/gpu-count` GPUs of equal size. Host CPU and memory of pods are
// read into Request::cpu / host_memory, but nodes leave them untracked (0):
// kube-scheduler accounts for them itself.
//
// Thread safety: the free functions are pure. Extender methods may be called
// from any number of threads at once; they lock the Scheduler as documented
// there and guard their own pod cache with a mutex.

#ifndef GPUSHARE_KUBERNETES_H_
#define GPUSHARE_KUBERNETES_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpushare/cluster.h"
#include "gpushare/scheduler.h"
#include "gpushare/types.h"

namespace gpushare::k8s {

inline constexpr char kGpuMemResource[] = "aliyun.com/gpu-mem";
inline constexpr char kGpuCountResource[] = "aliyun.com/gpu-count";  // Also the pod label.
inline constexpr char kWholeGpuResource[] = "nvidia.com/gpu";
// Node annotations gpushare-device-plugin writes: each GPU's units
// ("10,20"), and the indices of unhealthy GPUs ("1,3"; absent when none).
inline constexpr char kGpuMemoryAnnotation[] = "gpushare.io/gpu-memory";
inline constexpr char kUnhealthyGpusAnnotation[] = "gpushare.io/unhealthy-gpus";

// ---- Quantities ---------------------------------------------------------------
//
// Kubernetes quantity syntax: a non-negative decimal number ("2", "1.5", ".5")
// with an optional suffix: binary Ki Mi Gi Ti Pi Ei, decimal n u m k M G T P E,
// or an exponent e<int> / E<int> ("1e3"). Errors: InvalidArgument naming the
// text for malformed, negative or out-of-range (> kMaxQuantity after scaling)
// values.

// In thousandths, rounded up: "500m" -> 500, "2" -> 2000, "1.5" -> 1500.
absl::StatusOr<int64_t> QuantityMilli(std::string_view text);
// Bytes in MiB, rounded up: "8Gi" -> 8192, "1e9" -> 954, "512Mi" -> 512.
absl::StatusOr<int64_t> QuantityMiB(std::string_view text);
// An exact integer count: "2" -> 2, "1e3" -> 1000, "1k" -> 1000; "1.5" and
// "500m" are InvalidArgument.
absl::StatusOr<int64_t> QuantityInteger(std::string_view text);

// ---- Names ------------------------------------------------------------------------
//
// Kubernetes' own rules for object names, as the API server applies them:
// pods and nodes are named by a DNS-1123 subdomain (at most 253 characters;
// dot-separated parts of lower-case letters, digits and '-', each starting and
// ending with a letter or digit), namespaces by a DNS-1123 label (one such
// part, at most 63 characters). Every entry of the extender protocol checks
// the names it is given against them (Extender below), so a name that the
// API server could never have issued is refused before it reaches a URL, a
// log line or the state. OK, or InvalidArgument naming `field` and quoting
// the value (escaped, cut to a readable length):
//   ValidateDns1123Label("PodNamespace", "Kube_System")
//   -> PodNamespace "Kube_System" is not a valid Kubernetes name: it must be
//      lower-case letters, digits and '-' (a DNS-1123 label), at most 63
//      characters, starting and ending with a letter or digit
absl::Status ValidateDns1123Subdomain(std::string_view field, std::string_view value);
absl::Status ValidateDns1123Label(std::string_view field, std::string_view value);

// ---- Objects ---------------------------------------------------------------------

// One requirement of a node selector term (operators In, NotIn, Exists,
// DoesNotExist, Gt, Lt; `key` is a label, or `metadata.name` in match fields).
struct NodeSelectorRequirement {
  std::string key;
  std::string op;
  std::vector<std::string> values;
};

// A term matches when all its requirements do.
struct NodeSelectorTerm {
  std::vector<NodeSelectorRequirement> match_expressions;  // On labels.
  std::vector<NodeSelectorRequirement> match_fields;       // On metadata.name.
};

// The parts of a v1.Pod that scheduling needs.
struct Pod {
  std::string name;
  std::string namespace_name = "default";
  std::string uid;
  std::string node_name;  // spec.nodeName; empty while pending.
  std::string phase;      // status.phase, e.g. "Running", "Succeeded".
  bool terminating = false;  // metadata.deletionTimestamp is set.
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  // id "<namespace>/<name>"; gpu_memory, gpu_count, whole_gpus, cpu
  // (thousandths), host_memory (MiB), node_selector.
  Request request;
  // spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution
  // .nodeSelectorTerms: the pod fits a node matching any term; empty = any.
  std::vector<NodeSelectorTerm> required_node_affinity;

  // Whether the pod asks for GPU memory or whole GPUs.
  bool uses_gpus() const { return request.gpu_memory > 0 || request.whole_gpus > 0; }
  // Succeeded or Failed: it holds nothing any more.
  bool completed() const { return phase == "Succeeded" || phase == "Failed"; }
};

// Parses a v1.Pod. Errors: InvalidArgument for malformed JSON, a missing
// metadata.name, a malformed quantity (naming the container and resource), a
// gpu-count label that is not a positive integer ("0", "-1", "two") on a pod
// asking for GPUs (naming the value; on a pod asking for none the label is
// ignored), or an unsupported affinity operator, or a gpushare.io/gpu-topology
// annotation that is not "none", "prefer" or a link kind ("NV1", "PIX", ...:
// every pair of the pod's GPUs must be at least that good); it sets
// Request::topology (default "prefer").
absl::StatusOr<Pod> ParsePod(std::string_view json);

// Parses a v1.Node into a Node: status.capacity (else allocatable)
// aliyun.com/gpu-mem over aliyun.com/gpu-count GPUs (total / count units
// each, rounded down), or nvidia.com/gpu GPUs of 1 unit each when no gpu-mem
// is offered; GPU model from the label nvidia.com/gpu.product or
// aliyun.accelerator/nvidia_name; labels; spec.unschedulable; the first
// InternalIP (else the first) address. A node offering aliyun.com/gpu-mem
// takes shared GPU work (Node::gpu_sharing set) unless labelled
// gpushare=false or cgpu=false, as with gpushare-scheduler-extender; other
// nodes take it only when labelled for it (see TakesSharedGpuWork()).
// The annotation gpushare.io/gpu-topology (Topology::kKubernetesAnnotation),
// when present, gives the GPU topology in the compact JSON form of
// gpushare/topology.h; without it the node is topology-blind. The
// annotations of gpushare-device-plugin, when present, give each GPU's own
// size (kGpuMemoryAnnotation: one count per GPU, summing to the capacity)
// and mark GPUs unhealthy (kUnhealthyGpusAnnotation). When a well-formed
// annotation disagrees with the capacity (another number of GPUs, another
// sum: the plugin found other GPUs than the kubelet reports yet), the node
// is in transition: its GPUs are marked unhealthy (no new work) and it is
// topology-blind until they agree. All are ignored while the capacity
// offers no GPUs.
// Errors: InvalidArgument for malformed JSON, a missing metadata.name, a
// malformed quantity, or a malformed topology, GPU memory or unhealthy-GPU
// annotation (naming it).
absl::StatusOr<Node> ParseNode(std::string_view json);

// Whether `node` (its name and labels) satisfies the pod's required node
// affinity.
bool MatchesNodeAffinity(const Pod& pod, const std::string& node_name,
                         const std::map<std::string, std::string>& labels);

// ---- State rebuilt from kubectl -------------------------------------------------------

struct RebuildReport {
  int nodes = 0;          // Nodes added.
  int placed = 0;         // Pods whose placement was restored.
  int skipped = 0;        // Pods left out (see warnings).
  std::vector<std::string> warnings;  // One line per skipped pod or node.
};

// Rebuilds a cluster from `kubectl get nodes -o json` and `kubectl get pods
// -A -o json` output (v1.NodeList / v1.PodList, or a bare list). Every pod
// that is assigned to a known node, not completed and carries the bind
// annotations (ALIYUN_COM_GPU_MEM_IDX, else
// scheduler.framework.gpushare.allocation) gets its placement back; completed
// pods hold nothing. Pods that cannot be restored (no annotation on an
// exclusive pod, a conflicting or stale annotation) are skipped with a warning.
// Errors: InvalidArgument for malformed JSON or objects.
absl::StatusOr<Cluster> RebuildCluster(std::string_view nodes_json,
                                       std::string_view pods_json,
                                       ClusterOptions options = {},
                                       RebuildReport* report = nullptr);

// The items of a v1.PodList / v1.NodeList (or a bare array), each read as
// ParsePod() / ParseNode() read one object, for a host that uses a list more
// than once (gpushare-extender's start-up: RebuildCluster() and
// Extender::RememberPods()). Lists are read with simdjson (several times
// faster than nlohmann/json on large lists); the results and errors are
// those of ParsePod() / ParseNode() on each item. Errors: InvalidArgument for malformed
// JSON, a list that is neither an array nor an object with "items", or the
// first malformed item (as ParsePod() / ParseNode() name it).
absl::StatusOr<std::vector<Pod>> ParsePodList(std::string_view pods_json);
absl::StatusOr<std::vector<Node>> ParseNodeList(std::string_view nodes_json);

// An item of a list that a lenient read left out.
struct SkippedItem {
  // "<namespace>/<name>" (a namespaced object) or "<name>" from its
  // metadata when they could be read, else "".
  std::string name;
  std::string message;  // Why: the error ParsePod() / ParseNode() gave.
};

// The same, leniently, for a host that must not let one bad object stop it
// (a Node with 65 GPUs, say, which the API server accepts): an item that
// ParsePod() / ParseNode() refuses is left out and described in `skipped`
// (in list order); the others are returned. Errors: InvalidArgument only for
// malformed JSON or a text that is not a list.
absl::StatusOr<std::vector<Pod>> ParsePodList(std::string_view pods_json,
                                              std::vector<SkippedItem>* skipped);
absl::StatusOr<std::vector<Node>> ParseNodeList(std::string_view nodes_json,
                                                std::vector<SkippedItem>* skipped);

// RebuildCluster() from parsed lists. Errors: InvalidArgument for a node
// listed twice.
absl::StatusOr<Cluster> RebuildCluster(const std::vector<Node>& nodes,
                                       const std::vector<Pod>& pods,
                                       ClusterOptions options = {},
                                       RebuildReport* report = nullptr);

// ---- Extender protocol ---------------------------------------------------------------

// Result of a bind: where the pod went and what to write on it.
struct BindResult {
  Placement placement;
  // The pod annotations of domain.md §2 (see device_plugin.h).
  std::map<std::string, std::string> annotations;
  // A JSON merge patch for the pod: {"metadata":{"annotations":{...}}}.
  std::string patch;
  // The token of the reservation this bind made or found (see
  // gpushare/scheduler.h); 0 when the placement is confirmed.
  uint64_t reservation_token = 0;
};

// The pod and the node of a bind, as ExtenderBindingArgs names them.
struct BindTarget {
  std::string pod_namespace = "default";
  std::string pod_name;
  std::string pod_uid;
  std::string node;
};

// The v1.Binding that binds the pod to its node, for
// POST /api/v1/namespaces/<namespace>/pods/<name>/binding, carrying
// `annotations` (a BindResult's): the API server merges them into the pod
// in the same update that sets spec.nodeName, so the pod is never bound
// without them and the bind is one write.
std::string BindingJson(const BindTarget& target,
                        const std::map<std::string, std::string>& annotations = {});

// What Extender::Sync() changed.
struct SyncReport {
  int nodes_added = 0;
  int nodes_updated = 0;   // Replaced (labels, GPUs), cordoned / uncordoned, or a hold
                           // placed / lifted (GPU pods gpushare did not place).
  int nodes_removed = 0;   // Gone from the list and holding nothing.
  int confirmed = 0;       // Reservations whose pod is now bound to their node.
  int released = 0;        // Placements whose pod ended, went away or moved.
  int restored = 0;        // Bound pods with bind annotations gpushare did not hold.
  std::vector<std::string> warnings;  // One line per change that had to wait.
};

struct ExtenderOptions {
  // How many pods seen by Filter/Prioritize are remembered for Bind (which
  // only gets the pod's name and UID). The oldest are forgotten first.
  int max_cached_pods = 100'000;
  // Version string served by /version.
  std::string version = "gpushare";
  // Writes a bind to the API server: typically one POST of
  // BindingJson(target, result.annotations). Called without any
  // lock held, from the thread that called Bind(), at most once at a time per
  // pod. When set, Bind() reserves the GPUs, calls it, and reads its status:
  //  - OK: the pod is bound; the reservation is confirmed.
  //  - AlreadyExists (HTTP 409 on the Binding): the pod was already bound,
  //    by an earlier try or another replica;
  //  - Unavailable, DeadlineExceeded, Unknown, Internal: the outcome is
  //    unknown (the Binding may have been applied);
  //    in both cases Bind() reads the pod with `pod_reader`: bound to this
  //    node, it keeps the GPUs its bind annotations name (a success); bound
  //    elsewhere or not bound, the reservation is forgotten (an error). If the
  //    pod cannot be read (or `pod_reader` is empty), the reservation is kept
  //    until Sync() or the time-to-live settles it, so that the GPUs of a pod
  //    that may be bound are never promised to another;
  //  - any other code: the pod was not bound; the reservation is forgotten.
  // When empty, Bind() only reserves: the host confirms once the pod is bound
  // (Confirm(), or Sync() seeing spec.nodeName), else the reservation expires
  // after the scheduler's time-to-live.
  std::function<absl::Status(const BindTarget& target, const BindResult& result)> binder;
  // Reads the pod of a bind from the API server (GET
  // /api/v1/namespaces/NS/pods/NAME) as v1.Pod JSON, to learn where it is
  // bound when the binder's outcome says "already bound" or "unknown" (see
  // above). Called without any lock held.
  std::function<absl::StatusOr<std::string>(const BindTarget& target)> pod_reader;
  // How long a bind waits for a concurrent bind of the same pod to the same
  // node, whose outcome it then returns, milliseconds.
  int64_t bind_wait_ms = 30'000;
  // How long one PlanMigrations() call may search, in milliseconds: past it
  // the answer is the search so far, not proven (see PlanMigrations()).
  int64_t plan_deadline_ms = 5'000;
};

// The scheduler-extender protocol over a Scheduler. JSON keys are the Go
// field names of k8s.io/kube-scheduler/extender/v1; other letter cases are
// accepted as Go's decoder does. Every method taking a body returns
// InvalidArgument (and changes nothing) for a malformed body; scheduling
// outcomes (no fit, bind refused) are reported in the reply's "Error" field.
class Extender {
 public:
  // `scheduler` must outlive the extender.
  explicit Extender(Scheduler* scheduler, ExtenderOptions options = {});
  ~Extender();
  Extender(const Extender&) = delete;
  Extender& operator=(const Extender&) = delete;

  // ExtenderArgs -> ExtenderFilterResult. With "Nodes" the reply lists the
  // node objects that fit (nodes unknown to the scheduler are added to it
  // first); with "NodeNames" it lists names. "FailedNodes" maps every other
  // node to its reason.
  absl::StatusOr<std::string> Filter(std::string_view body);

  // ExtenderArgs -> HostPriorityList: every node that fits, with Score 0..10
  // (10 = the policy's best); nodes that do not fit get 0.
  absl::StatusOr<std::string> Prioritize(std::string_view body);

  // ExtenderBindingArgs -> ExtenderBindingResult. Reserves the pod's GPUs on
  // "Node" under the policy (the pod must have been seen by Filter or
  // Prioritize), then binds it through options.binder if set (see
  // ExtenderOptions). The reply adds "Placement" and "Annotations" to "Error".
  //
  // Binds of one pod are atomic: while one is in progress, a bind of the same
  // pod (UID) to the same node waits for it (up to options.bind_wait_ms) and
  // returns its outcome; one to another node, or of another UID, is
  // Unavailable (kube-scheduler retries). With a binder, a retried bind of a
  // pod already bound to that node returns its placement without calling the
  // binder again. A bind of a pod whose name holds a placement made for
  // another UID (the pod was deleted and recreated) releases that placement
  // first.
  absl::StatusOr<std::string> Bind(std::string_view body);
  // The same, typed. Errors: NotFound if the pod was never seen; those of
  // Scheduler::Reserve(); Unavailable for a concurrent bind (see above); the
  // binder's error (see ExtenderOptions for what is kept).
  absl::StatusOr<BindResult> BindPod(const BindTarget& target);

  // ExtenderPreemptionArgs -> ExtenderPreemptionResult: for each candidate
  // node, the victims to evict so that the pod fits: proposed GPU holders are
  // evicted in the order given until it fits, then each one not needed after
  // all is spared. Nodes where even every victim is not enough are left out.
  // Victims given as pods (NodeNameToVictims) are matched by namespace/name,
  // meta victims by UID (pods seen by Filter or RememberPods); victims that
  // hold no GPU here are kept as kube-scheduler proposed them.
  absl::StatusOr<std::string> Preempt(std::string_view body);

  // Pod lifecycle, by {"PodNamespace","PodName"} or {"PodUID"}: confirm (the
  // device plugin took the GPUs), forget (binding failed) and release (the
  // pod ended or was deleted). Replies {"Error": ""} or the error message.
  // Given both a name and a UID, a call about a pod that no longer holds the
  // name's placement (it was made for a newer pod of the same name) is an
  // error and changes nothing.
  absl::StatusOr<std::string> Confirm(std::string_view body);
  absl::StatusOr<std::string> Forget(std::string_view body);
  absl::StatusOr<std::string> Release(std::string_view body);

  // The inspect view of the old extender: {"nodes":[{"name","totalGPU",
  // "usedGPU","devs":[{"id","totalGPU","usedGPU","pods":[{"namespace","name",
  // "usedGPU","reserved"}]}]}]}; one node when `node` is set. A node that
  // GPU pods gpushare did not place hold (NodeHold()) also has "held": the
  // reason.
  // Errors: NotFound for an unknown node.
  absl::StatusOr<std::string> Inspect(std::string_view node = "") const;

  // {"version": options.version}.
  std::string Version() const;

  // The read-only defragmentation planner (Cluster::PlanMigrations) on the
  // extender's state, for an operator or a descheduler. The body is a JSON
  // object naming one goal:
  //   {"Pod": <v1.Pod>}                          a pending pod, as given;
  //   {"PodNamespace": "ns", "PodName": "name"}  a pending pod seen by Filter
  //                                              or remembered (RememberPods);
  //   {"FreeGPUs": k}                            free k whole GPUs;
  // with optional "MaxMoves" (0..16, default 1) and "SearchBudget" (candidate
  // moves, 1..1,000,000, default 200,000); the search also ends after
  // options.plan_deadline_ms (then "Proven" is false and "Reason" says so). Only confirmed placements move
  // (a reservation's bind is in progress); a pod the extender knows keeps its
  // nodeSelector and GPU models, any other (or one with a required node
  // affinity) the GPU models it runs on and every label of its node. Reply:
  //   {"Found": bool, "Proven": bool, "Moves": [{"PodNamespace", "PodName",
  //    "From": {"Node", "GPUs"}, "To": {"Node", "GPUs"}}, ...],
  //    "Then": {"Node", "GPUs"} (pod goal, when found), "FreeGPUs" (goal
  //    form), "Reason": why not found, "Warnings": [...], "Error": ""}.
  // Nothing changes: the search runs on a copy taken under the read lock.
  // The pod's required node affinity is not part of the search (a warning
  // says so); its resources, GPU models and nodeSelector are.
  // Errors: InvalidArgument naming the bad member; NotFound for a pod name
  // the extender does not know; AlreadyExists if the pod is already placed.
  absl::StatusOr<std::string> PlanMigrations(std::string_view body) const;

  // Remembers the pods of a v1.PodList (e.g. the one the state was rebuilt
  // from), so that Preempt and the lifecycle calls can find them by UID.
  // Bound GPU pods among them that the scheduler holds no placement for
  // hold their nodes (see NodeHold()).
  // Errors: InvalidArgument for malformed JSON; nothing is remembered then.
  [[nodiscard]] absl::Status RememberPods(std::string_view pods_json);
  // The same for a list already parsed (ParsePodList()).
  void RememberPods(const std::vector<Pod>& pods);

  // ---- GPU pods the scheduler does not hold ----------------------------------------
  //
  // A pod that is bound to a node, not finished and asks for GPUs, but whose
  // placement the scheduler does not hold, uses GPUs it cannot see: a pod of
  // another scheduler (kube-scheduler's default profile binding an
  // `nvidia.com/gpu` pod, a pod created with spec.nodeName) carries no bind
  // annotations, and annotations that cannot be restored (GPUs held by
  // others, malformed) name no GPUs the scheduler can count. The device
  // plugin gives such a pod GPUs of the kubelet's choosing. So its node is
  // *held*: the events, lists and RememberPods() mark the node unschedulable
  // in the Scheduler (no new work; what is placed there stays) until every
  // such pod ends, goes away or gets bind annotations the scheduler can
  // restore. The node's own cordon (spec.unschedulable) is followed beneath
  // the hold. A pod bound to a node the scheduler does not know yet holds
  // that node once it is added.
  //
  // The reason a held node is refused with (Filter; the C ABI's fit calls),
  // naming the pods, e.g.
  //   node 'gpu-3' runs GPU pods that gpushare did not place (default/train:
  //   no bind annotations); it places nothing there until they end or their
  //   annotations name their GPUs
  // nullopt for a node that is not held.
  std::optional<std::string> NodeHold(std::string_view node) const;

  // ---- Keeping up with the cluster ---------------------------------------------
  //
  // A host that can list the API server (`GET /api/v1/nodes`, `/api/v1/pods`)
  // calls, from time to time:
  //   uint64_t mark = extender.SyncMark();   // before listing
  //   ... fetch nodes_json and pods_json ...
  //   auto report = extender.Sync(nodes_json, pods_json, mark);

  // A point in the sequence of binds; binds made after it are not judged by
  // lists fetched after it was taken (the lists may predate them).
  uint64_t SyncMark() const;

  // Reconciles the scheduler with a v1.NodeList and a v1.PodList:
  //  - nodes it does not know are added; a known node whose labels, GPUs or
  //    address changed is replaced once it holds nothing (a warning until
  //    then); its schedulable flag follows spec.unschedulable;
  //  - nodes missing from the list are removed once they hold nothing;
  //  - a reservation whose pod is bound to its node (spec.nodeName) is
  //    confirmed;
  //  - a placement whose pod is missing, completed, bound to another node or
  //    to other GPUs than its bind annotations name, or replaced by a pod of
  //    the same name with another UID, is released, unless it was bound after
  //    `mark` or its bind is in progress;
  //  - a pod bound to a known node with bind annotations that the scheduler
  //    does not hold is restored as a confirmed placement (as RebuildCluster()
  //    does), whatever happened to an earlier reservation of it; a conflict
  //    (the GPUs are held by others) is a warning;
  //  - the pods are remembered as by RememberPods();
  //  - an object that cannot be read (a Node with more GPUs than a node may
  //    have, say) is left out with a warning: a node so listed is neither
  //    added nor removed, a pod so listed keeps what it holds.
  // Errors: InvalidArgument for malformed JSON or a text that is not a list;
  // nothing changes.
  absl::StatusOr<SyncReport> Sync(std::string_view nodes_json, std::string_view pods_json,
                                  uint64_t mark);

  // ---- Following watch events ----------------------------------------------------
  //
  // A host that watches the API server (list, then `?watch=1`) applies each
  // event as it arrives, instead of calling Sync() on whole lists:
  //   extender.ApplyNodeEvent("MODIFIED", node_json);
  //   extender.ApplyPodEvent("DELETED", pod_json);
  // `type` is the watch event's type: "ADDED", "MODIFIED" or "DELETED" (the
  // host handles "BOOKMARK" and "ERROR" itself). The returned SyncReport counts
  // what this one event changed. Errors: InvalidArgument for another type or a
  // malformed object; nothing changes then.

  // The rules of Sync() for one node: an added or modified node unknown to
  // the scheduler is added; a known one whose labels, GPUs or address changed
  // is replaced once it holds nothing (a warning until then); the schedulable
  // flag follows spec.unschedulable. A deleted node is removed once it holds
  // nothing, cordoned (with a warning) until then.
  absl::StatusOr<SyncReport> ApplyNodeEvent(std::string_view type, std::string_view node_json);

  // The rules of Sync() for one pod, judged by UID: the pod of an event is
  // "the same pod" as the one the extender knows under that namespace/name
  // (seen by Filter, remembered, or by an earlier event) when their
  // metadata.uid agree. For the same pod:
  //  - deleted, completed, or bound to another node: its placement is
  //    released;
  //  - bound to the node of its reservation: the reservation is confirmed;
  //  - bound to a known node with bind annotations the scheduler does not
  //    hold: the placement is restored (a conflict is a warning).
  // An event about another pod of the same name (another UID) changes
  // nothing: it may be a late event of an older pod, so a late DELETED never
  // releases the placement of a newer pod this extender bound. When either
  // UID is unknown, a placement this extender bound since the last Sync() is
  // not released.
  // A pending pod (no spec.nodeName) never releases anything: the event may
  // predate a bind in flight. Added and modified pods are remembered as by
  // RememberPods(). A bound GPU pod left without a placement holds its
  // node; the hold ends with the pod's deletion, end, or restored placement
  // (see NodeHold()).
  absl::StatusOr<SyncReport> ApplyPodEvent(std::string_view type, std::string_view pod_json);

 private:
  struct PodCache;
  // BindPod() once the pod's bind is known to be the only one in progress.
  absl::StatusOr<BindResult> BindExclusively(const Pod& pod, const BindTarget& target);
  // Settles a bind whose binder said "already bound" or "outcome unknown".
  absl::StatusOr<BindResult> SettleBind(const Pod& pod, const BindTarget& target,
                                        const Placement& reserved, absl::Status error);
  // The result of a bind to `placement` (annotations and patch).
  absl::StatusOr<BindResult> MakeBindResult(const Placement& placement) const;
  // Confirms the placement of a pod the API has bound; recommits it if its
  // reservation ran out meanwhile.
  absl::Status ConfirmBound(const Placement& placement);
  // Records the UIDs of bound pods whose placements the scheduler holds on
  // their node, where no owner is known yet.
  void NoteOwners(const std::vector<Pod>& pods);
  // Node holds (see NodeHold()). Account() records whether `pod` is a bound
  // GPU pod without a placement on its node (`only_add`: never clears a
  // record); Unaccount() forgets the pod of `id` (unless the record is of
  // another UID). Both apply the hold of the nodes they touch, counted in
  // `r` (nodes_updated) when that changes the node.
  void Account(const Pod& pod, bool only_add, SyncReport* r);
  void Unaccount(const std::string& id, const std::string& uid, SyncReport* r);
  // Sets the node's schedulable flag to its own (`own`, when given, is
  // recorded first: spec.unschedulable) and not held. True if it changed.
  bool ApplyHold(const std::string& node, std::optional<bool> own = std::nullopt);
  // Scheduler::AddNode() of `node`, unschedulable if it is held; records its
  // own flag.
  absl::Status AddNodeHeld(Node node);
  // Tries to restore the placements of the pods that hold `node` (pods bound
  // before the node was known), from the pods remembered.
  void RestoreHolders(const std::string& node, SyncReport* r);
  // The pod remembered under "<namespace>/<name>", if any.
  std::optional<Pod> RememberedPod(const std::string& id) const;

  Scheduler* scheduler_;
  ExtenderOptions options_;
  std::unique_ptr<PodCache> cache_;
};

// {"Error": "<message>", "Code": "<canonical code name>"}: the body a host
// sends with HTTP 400 (InvalidArgument) or 404 (NotFound). Bytes of the
// message that are not UTF-8 are written as U+FFFD.
std::string ErrorJson(const absl::Status& status);

}  // namespace gpushare::k8s

#endif  // GPUSHARE_KUBERNETES_H_
