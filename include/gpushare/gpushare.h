// File: gpushare/gpushare.h
// -----------------------------------------------------------------------------
// The whole public API of gpushare. Include this, or the single headers:
//
//   types.h          GPUs, nodes, requests, placements, fit results
//   policy.h         the Policy interface and the built-in policies
//   cluster.h        the cluster and its operations; JSON snapshots
//   batch.h          results of batch placement and of the migration planner
//   inspect.h        `kubectl inspect gpushare`-style text views
//   device_plugin.h  pod annotations and container environment of a placement
//   fragmentation.h  GPU fragmentation against a target workload (FGD)
//   trace.h          loading the openb trace CSVs
//   simulate.h       the FGD trace experiment and a time-driven replay
//   kubernetes.h     Kubernetes objects and the scheduler-extender protocol
//   scheduler.h      a thread-safe scheduler core with reserve / confirm / forget
//
// Nothing outside include/gpushare/ is part of the API.

#ifndef GPUSHARE_GPUSHARE_H_
#define GPUSHARE_GPUSHARE_H_

#include "gpushare/batch.h"
#include "gpushare/cluster.h"
#include "gpushare/device_plugin.h"
#include "gpushare/fragmentation.h"
#include "gpushare/inspect.h"
#include "gpushare/kubernetes.h"
#include "gpushare/policy.h"
#include "gpushare/scheduler.h"
#include "gpushare/simulate.h"
#include "gpushare/topology.h"
#include "gpushare/trace.h"
#include "gpushare/types.h"
#include "gpushare/version.h"

#endif  // GPUSHARE_GPUSHARE_H_
