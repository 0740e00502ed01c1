#include "src/policies/spread_policy.h"

#include "src/policies/gpu_order.h"

namespace gpushare::policies {
namespace {

class SpreadPolicy final : public Policy {
 public:
  std::string Name() const override { return "spread"; }

  NodeChoice Evaluate(const Demand& demand, const NodeStatus& node,
                      const std::vector<int>& fitting,
                      const Cluster& /*cluster*/) override {
    NodeChoice choice;
    switch (demand.kind) {
      case Demand::Kind::kShared: {
        choice.gpus = ChooseGpus(node, fitting, demand.gpu_count, /*tightest=*/false);
        choice.score = SpreadSharedScore(node, demand, choice.gpus);
        break;
      }
      case Demand::Kind::kExclusive:
        choice.gpus = ChooseGpus(node, fitting, demand.gpu_count, /*tightest=*/false);
        choice.score = {static_cast<double>(IdleHealthyGpus(node)),
                        static_cast<double>(FreeGpuMemory(node)), 0};
        break;
      case Demand::Kind::kCpuOnly:
        choice.score = {-Ratio(node.cpu_used, node.cpu),
                        -Ratio(node.host_memory_used, node.host_memory), 0};
        break;
    }
    return choice;
  }
};

}  // namespace

std::unique_ptr<Policy> NewSpreadPolicy() {
  return std::make_unique<SpreadPolicy>();
}

}  // namespace gpushare::policies
