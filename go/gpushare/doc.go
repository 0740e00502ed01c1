// Package gpushare is the Go binding of gpushare's scheduler core: where
// GPU-sharing pods go in a Kubernetes cluster, in memory units of GPUs, with
// the annotations (ALIYUN_COM_GPU_MEM_*) of Alibaba's
// gpushare-scheduler-extender, so that its device plugin runs unchanged.
//
// It wraps the C ABI of include/gpushare/c/gpushare.h (libgpushare_c.so)
// through cgo; build with CGO_ENABLED=1 and pkg-config finding
// gpushare_c.pc (PKG_CONFIG_PATH pointing at an installed lib/pkgconfig, or
// at a build tree's bindings/c/pkgconfig). The rules, and the error
// messages, are the C++ library's.
//
// # Model
//
// A Scheduler holds the cluster: nodes and their GPUs (AddNode, or v1.Node
// watch events through ApplyNodeEvent), and placements. A Pod is a request
// validated once (NewPod from a Request, or ParsePod from v1.Pod JSON), then
// asked about many times:
//
//	Fit / Filter   does it fit a node now, and if not why
//	FitAll         does it fit each node now, by position (NodeNames), in
//	               one call answered from a memo per shape of request
//	FitAfter       does it fit a node once given pods are removed and others
//	               added (kube-scheduler's preemption and nominated pods)
//	Rank           the policy's 0..10 rank of each node (-1: no fit)
//	Reserve        take GPUs on a node for the reservation TTL (NoExpiry: until settled)
//	Confirm        the pod is bound: the reservation becomes a placement
//	Forget         the bind failed: drop the reservation
//	ConfirmReservation, ForgetReservation
//	               the same, for one reservation (Placement.Token) only
//	Release        the pod ended: free its GPUs
//
// Reserve returns a Placement, a Go copy of the C object: the node, the GPU
// indices, the units per GPU and the JSON merge patch of the pod's bind
// annotations. ApplyPodEvent follows pods as a watch reports them: bound
// pods confirm their reservations, ended ones release their GPUs, and bound
// pods with bind annotations the scheduler does not hold (a restart) are
// restored.
//
// # Errors
//
// Every failing call returns an *Error: a Code (the canonical codes of
// gs_code, absl's) and the library's Message, which names the bad value.
// Test the code with errors.Is against the sentinels:
//
//	if errors.Is(err, gpushare.ErrResourceExhausted) { ... }   // does not fit
//	if errors.Is(err, gpushare.ErrNotFound) { ... }            // unknown node or id
//
// A failed call changes nothing.
//
// # Concurrency and memory
//
// A Scheduler and a Pod may be used by any number of goroutines at once:
// the C scheduler takes a shared lock for its reads (Fit, Filter, Rank,
// Placement, Snapshot, Check) and an exclusive one for changes, and pods
// are immutable. There is no package-level state.
//
// C objects are freed deterministically: Scheduler.Close and Pod.Close wait
// for the calls in progress, after which every call on the closed object
// returns ErrClosed instead of touching freed memory. A Pod that is never
// closed is freed by a cleanup when the garbage collector finds it
// unreachable; a Scheduler must be closed. Results (FitResult, Placement,
// snapshots) are Go copies, and the C objects behind them are freed before
// the call returns.
//
// Strings go to C without copies where the ABI takes (pointer, length):
// the bytes of a Go string hold no Go pointers, so C may read them during
// the call. Node lists travel as one buffer of names and one slice of
// lengths (gs_names).
package gpushare
