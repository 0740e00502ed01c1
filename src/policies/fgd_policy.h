// Internal: the "fgd" and "fgdcpu" policies (documented in gpushare/policy.h).

#ifndef GPUSHARE_POLICIES_FGD_POLICY_H_
#define GPUSHARE_POLICIES_FGD_POLICY_H_

#include <memory>

#include "gpushare/policy.h"

namespace gpushare::policies {

// cpu_bound: "fgdcpu".
std::unique_ptr<Policy> NewFgdPolicy(const PolicyOptions& options, bool cpu_bound = false);

}  // namespace gpushare::policies

#endif  // GPUSHARE_POLICIES_FGD_POLICY_H_
