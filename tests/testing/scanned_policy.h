// A built-in policy behind a wrapper of another type, so that Cluster::Plan()
// cannot recognise it and takes the generic scan over every node instead of
// the placement indexes: the same answers by the slow path, for the tests
// that compare the two and the benchmarks that time them.
//
//   gpushare::testing::ScannedPolicy scanned(*gpushare::MakePolicy("binpack"));
//   cluster.Place(request, scanned);   // scans

#ifndef GPUSHARE_TESTS_TESTING_SCANNED_POLICY_H_
#define GPUSHARE_TESTS_TESTING_SCANNED_POLICY_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gpushare/gpushare.h"

namespace gpushare::testing {

class ScannedPolicy : public Policy {
 public:
  explicit ScannedPolicy(std::unique_ptr<Policy> inner) : inner_(std::move(inner)) {}
  std::string Name() const override { return inner_->Name(); }
  NodeChoice Evaluate(const Demand& demand, const NodeStatus& node,
                      const std::vector<int>& fitting, const Cluster& cluster) override {
    return inner_->Evaluate(demand, node, fitting, cluster);
  }

 private:
  std::unique_ptr<Policy> inner_;
};

}  // namespace gpushare::testing

#endif  // GPUSHARE_TESTS_TESTING_SCANNED_POLICY_H_
