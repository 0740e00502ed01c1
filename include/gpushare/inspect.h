// File: gpushare/inspect.h
// -----------------------------------------------------------------------------
// Text views of a cluster in the shape users know from
// `kubectl inspect gpushare` (a table of GPU memory per node and GPU) and
// `kubectl inspect gpushare -d` / `arena top node -s -d` (per node, every
// request with its namespace and its units on each GPU).
//
//   std::cout << gpushare::InspectTable(cluster);
//
//   NAME           IPADDRESS      GPU0(Allocated/Total)  GPU Memory(GiB)
//   sd-cluster-04  192.168.1.214  8/14                   8/14
//   sd-cluster-05  192.168.1.215  10/14                  10/14
//   ----------------------------------------------------------
//   Allocated/Total GPU Memory In Cluster:
//   18/28 (64%)
//
// Percentages are rounded down. Nodes without GPUs are left out. A GPU marked
// unhealthy shows "(unhealthy)" after its numbers.

#ifndef GPUSHARE_INSPECT_H_
#define GPUSHARE_INSPECT_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "gpushare/cluster.h"

namespace gpushare {

// The summary table, one row per node with GPUs, in the order nodes were added.
std::string InspectTable(const Cluster& cluster);

// The detailed view: per node, each request placed there with its namespace
// (the part of its id before '/', else "default") and its units on each GPU,
// then the node's allocated and total memory; then the cluster total. A node
// with a GPU topology also gets a line "TOPOLOGY:   links SYS to NV2" (its
// worst and best link) and a WEAKEST LINK column: the weakest link between
// the GPUs of each multi-GPU request ("-" for one GPU).
std::string InspectDetails(const Cluster& cluster);

// The detailed view of one node. Errors: NotFound for an unknown node.
absl::StatusOr<std::string> InspectNode(const Cluster& cluster,
                                        std::string_view node);

}  // namespace gpushare

#endif  // GPUSHARE_INSPECT_H_
