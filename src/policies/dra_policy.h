// Internal: the "dra" policies (documented in gpushare/policy.h): a node
// choice, and the devices inside the node chosen as Kubernetes' DRA
// allocator chooses them.
#ifndef GPUSHARE_POLICIES_DRA_POLICY_H_
#define GPUSHARE_POLICIES_DRA_POLICY_H_

#include <memory>

#include "gpushare/policy.h"

namespace gpushare::policies {

// The DRA allocator's device choice (k8s.io/dynamic-resource-allocation's
// structured allocator, first fit): the first demand.gpu_count GPUs of
// `fitting`, which lists them in index order, the order a DRA driver
// publishes them in its node's ResourceSlice.
std::vector<int> DraDevices(int gpu_count, const std::vector<int>& fitting);

// "dra": kube-scheduler's own node choice for a pod whose GPUs are a
// ResourceClaim (NodeResourcesFit's LeastAllocated on CPU; no default score
// plugin counts DRA devices), then DraDevices().
std::unique_ptr<Policy> NewDraPolicy();

// "dra+<name>": `node_policy` scores each node on the GPUs DraDevices()
// will take there (it is offered those alone as the fitting ones), which is
// what GpuShare does for DRA claims; DraDevices() chooses the GPUs. A policy of the compact form
// (fgd::KernelPolicy) stays one, so the simulator's engine runs it fast; any
// other is wrapped through Evaluate().
std::unique_ptr<Policy> NewDraPolicy(std::unique_ptr<Policy> node_policy);

// The same through Evaluate() whatever `node_policy` is: the slow, obviously
// correct reference the tests compare the compact form against.
std::unique_ptr<Policy> NewDraReferencePolicy(std::unique_ptr<Policy> node_policy);

}  // namespace gpushare::policies

#endif  // GPUSHARE_POLICIES_DRA_POLICY_H_
