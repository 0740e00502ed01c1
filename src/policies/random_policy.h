// Internal: the "random" policy (documented in gpushare/policy.h).

#ifndef GPUSHARE_POLICIES_RANDOM_POLICY_H_
#define GPUSHARE_POLICIES_RANDOM_POLICY_H_

#include <cstdint>
#include <memory>

#include "gpushare/policy.h"

namespace gpushare::policies {

std::unique_ptr<Policy> NewRandomPolicy(uint64_t seed);

}  // namespace gpushare::policies

#endif  // GPUSHARE_POLICIES_RANDOM_POLICY_H_
