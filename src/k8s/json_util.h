// Internal: exception-free helpers over nlohmann::json for the Kubernetes
// layer, and the parsers that work on already-parsed JSON values.

#ifndef GPUSHARE_K8S_JSON_UTIL_H_
#define GPUSHARE_K8S_JSON_UTIL_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpushare/kubernetes.h"
#include "nlohmann/json.hpp"

namespace gpushare::k8s::internal {

using nlohmann::json;

// Parses `text`; InvalidArgument naming `what` if it is not JSON.
absl::StatusOr<json> ParseJson(std::string_view text, const char* what);

// The member `key` of object `obj`, matched exactly or else ignoring letter
// case (as Go's encoding/json does); nullptr if absent, null, or `obj` is not
// an object.
const json* Member(const json& obj, std::string_view key);

// Member `key` as a string; "" if absent. InvalidArgument if not a string.
absl::StatusOr<std::string> StringMember(const json& obj, std::string_view key,
                                         std::string_view where);

// A string-to-string map member (labels, annotations, nodeSelector); empty if
// absent. InvalidArgument if not such a map.
absl::StatusOr<std::map<std::string, std::string>> StringMap(const json& obj,
                                                            std::string_view key,
                                                            std::string_view where);

// The items of a list object ({"items": [...]}) or a bare array.
absl::StatusOr<const json*> ListItems(const json& list, const char* what);

absl::StatusOr<Pod> PodFromJson(const json& pod);
absl::StatusOr<Node> NodeFromJson(const json& node);

// The placement recorded in the bind annotations of a pod bound to a node of
// `cluster` (ALIYUN_COM_GPU_MEM_IDX, else the allocation annotation); nullopt
// for a pod that holds nothing (pending, completed, no GPUs). Errors: NotFound
// for an unknown node, FailedPrecondition without annotations, InvalidArgument
// for malformed or inconsistent ones, those of Cluster::Validate().
absl::StatusOr<std::optional<Placement>> RecordedPlacement(const Cluster& cluster,
                                                           const Pod& pod);

// ALIYUN_COM_GPU_MEM_ASSUME_TIME of a pod (ns since the epoch), 0 if absent.
int64_t AssumeTime(const Pod& pod);

// Shared by PodFromJson() / NodeFromJson() and the fast readers below.
std::string Who(const Pod& pod);    // "pod <namespace>/<name>", for messages.
std::string Who(const Node& node);  // "node <name>".
// The rest of a pod once its fields are read: the gpu-count label and the
// topology annotation.
absl::Status PodRequestFromMetadata(Pod* pod);
// A node's GPUs from its capacity (units of gpu-mem, gpu-count — absent when
// the capacity does not name it — and whole GPUs) and its model labels.
// InvalidArgument for gpu-mem over an explicit gpu-count of 0.
absl::Status NodeGpus(int64_t memory, std::optional<int64_t> gpu_count, int64_t whole,
                      Node* node);
// A node's topology annotation, and whether it takes shared GPU work.
absl::Status NodeTopologyAndSharing(const std::map<std::string, std::string>& annotations,
                                    int64_t memory, Node* node);

// ---- Whole lists (fast_objects.cc) ------------------------------------------
//
// The items of a v1.PodList / v1.NodeList text (or a bare array), read by
// simdjson with the rules of PodFromJson() / NodeFromJson(). An item the fast
// reader does not handle itself (required node affinity, keys that match
// only ignoring case, numbers written as floats, anything malformed) is read
// by PodFromJson() / NodeFromJson(); a text simdjson refuses is read by the
// reference below. Results and errors are those of the reference.

// The reference: ParseJson(text, "pod list"), ListItems(), PodFromJson() of
// each item in order.
absl::StatusOr<std::vector<Pod>> ReadPodListReference(std::string_view text);
absl::StatusOr<std::vector<Node>> ReadNodeListReference(std::string_view text);

// With `skipped` set, items the reference refuses are left out and
// described there instead of failing the read (ParsePodList(text, skipped)).
absl::StatusOr<std::vector<Pod>> ReadPodList(std::string_view text,
                                             std::vector<SkippedItem>* skipped = nullptr);
absl::StatusOr<std::vector<Node>> ReadNodeList(std::string_view text,
                                               std::vector<SkippedItem>* skipped = nullptr);

// For tests: how many items the last ReadPodList() / ReadNodeList() on this
// thread read without the nlohmann readers.
int FastItemsOfLastRead();

// Both lists, with the errors of parsing both texts, then checking both
// lists, then reading the nodes, then the pods (as Extender::Sync() reports
// them).
// With `skipped_nodes` and `skipped_pods` set, both lists are read
// leniently and what was left out is described there.
absl::Status ReadLists(std::string_view nodes_json, std::string_view pods_json,
                       std::vector<Node>* nodes, std::vector<Pod>* pods,
                       std::vector<SkippedItem>* skipped_nodes = nullptr,
                       std::vector<SkippedItem>* skipped_pods = nullptr);

}  // namespace gpushare::k8s::internal

#endif  // GPUSHARE_K8S_JSON_UTIL_H_
