// Internal: the "gpupacking" policy (documented in gpushare/policy.h).

#ifndef GPUSHARE_POLICIES_GPUPACKING_POLICY_H_
#define GPUSHARE_POLICIES_GPUPACKING_POLICY_H_

#include <memory>

#include "gpushare/policy.h"

namespace gpushare::policies {

std::unique_ptr<Policy> NewGpuPackingPolicy();

}  // namespace gpushare::policies

#endif  // GPUSHARE_POLICIES_GPUPACKING_POLICY_H_
