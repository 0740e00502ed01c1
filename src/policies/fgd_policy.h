// Internal: the "fgd", "fgdcpu" and "fgdpack" policies (documented in
// gpushare/policy.h).

#ifndef GPUSHARE_POLICIES_FGD_POLICY_H_
#define GPUSHARE_POLICIES_FGD_POLICY_H_

#include <memory>

#include "gpushare/policy.h"

namespace gpushare::policies {

enum class FgdVariant {
  kPaper,    // "fgd"
  kCpuTies,  // "fgdcpu"
  kPacking,  // "fgdpack"
};
std::unique_ptr<Policy> NewFgdPolicy(const PolicyOptions& options,
                                     FgdVariant variant = FgdVariant::kPaper);

}  // namespace gpushare::policies

#endif  // GPUSHARE_POLICIES_FGD_POLICY_H_
