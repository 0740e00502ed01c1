#include <cstddef>

#include "gpushare/cluster.h"
#include "src/internal/cluster_state.h"

namespace gpushare::internal {

void ClusterAccess::Reserve(Cluster& cluster, size_t nodes, size_t gpus, size_t placements) {
  ClusterState& s = *cluster.state_;
  s.nodes.reserve(s.nodes.size() + nodes);
  s.tie_keys.reserve(s.tie_keys.size() + nodes);
  s.node_index.reserve(s.node_index.size() + nodes);
  s.gpu_uuids.reserve(s.gpu_uuids.size() + gpus);
  s.placements.Reserve(placements);
}

}  // namespace gpushare::internal
