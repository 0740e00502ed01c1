package gpushare

/*
#include <stdlib.h>
#include <gpushare/c/gpushare.h>
*/
import "C"

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"
)

// The watch event types that ApplyNodeEvent and ApplyPodEvent take.
const (
	EventAdded    = "ADDED"
	EventModified = "MODIFIED"
	EventDeleted  = "DELETED"
)

// ABIVersion is the ABI of the loaded library (GS_ABI_VERSION of its
// header); New refuses a library older than the header this package was
// built with.
func ABIVersion() uint32 { return uint32(C.gs_abi_version()) }

// Version is the library's version ("0.1.0").
func Version() string { return C.GoString(C.gs_version()) }

// Policies lists the placement policies by name ("binpack", "spread", ...).
func Policies() []string {
	s := C.GoString(C.gs_policy_names())
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// Options configure a Scheduler. The zero value is the library's defaults.
type Options struct {
	// Policy is the placement policy ("binpack", "spread", "fgdpack", ...;
	// see Policies). Empty: "binpack".
	Policy string
	// ReservationTTL is how long a reservation (Reserve) holds its GPUs
	// before it is forgotten, unless confirmed. Zero: 60 s. NoExpiry:
	// reservations hold until confirmed, forgotten or released, for a host
	// that learns how every bind ends (a kube-scheduler plugin). It is
	// passed in milliseconds, a positive value below 1 ms rounded up to 1 ms.
	ReservationTTL time.Duration
	// Seed is the "random" policy's seed.
	Seed uint64
	// TargetWorkload is the workload whose fragmentation the policies fgd,
	// fgdcpu, fgdpack and their dra+ forms descend (the others ignore it),
	// as JSON in the form of gpushare-extender --target-workload:
	// {"resource": "memory", "tasks": [{"cpu": 4000, "gpu_share": 8,
	// "gpu_count": 1, "weight": 0.42}, ...]}. Empty: one whole-GPU task on
	// TargetResource, which counts only partly used GPUs as lost.
	TargetWorkload string
	// TargetResource is the resource of that default whole-GPU task:
	// TargetCompute (the zero value) or TargetMemory, which ranks requests
	// for GPU memory alone (against a compute target every node that fits
	// one scores the same). With TargetWorkload set its "resource" decides,
	// and TargetResource must be TargetCompute or agree with it.
	TargetResource TargetResource
}

// TargetResource is the resource a default target workload is measured in
// (gs_target_resource).
type TargetResource int32

const (
	// TargetCompute: GPU compute, thousandths of a GPU.
	TargetCompute TargetResource = C.GS_TARGET_COMPUTE
	// TargetMemory: GPU memory units.
	TargetMemory TargetResource = C.GS_TARGET_MEMORY
)

// NoExpiry as Options.ReservationTTL: reservations never expire.
const NoExpiry time.Duration = -1

// Scheduler is the cluster's GPU state and the placement rules: a handle on
// a gs_scheduler.
//
// A Scheduler is safe for concurrent use by any number of goroutines: the
// C scheduler takes a shared lock for reads (Fit, Filter, Rank, Placement,
// Snapshot, Check) and an exclusive one for changes. Close waits for the
// calls in progress; every call after it returns ErrClosed.
type Scheduler struct {
	// mu is held shared by every call and exclusively by Close, which is
	// what keeps gs_scheduler_destroy from racing a call.
	mu sync.RWMutex
	s  *C.gs_scheduler
}

// New makes an empty cluster under `o`. Errors: InvalidArgument for an
// unknown policy (the message lists the known ones), a negative TTL, a
// TargetWorkload that does not parse or holds a bad value (the message
// names it) or a TargetResource that is unknown or disagrees with it;
// FailedPrecondition when the loaded library's ABI is older than this
// package's.
func New(o Options) (*Scheduler, error) {
	if v := ABIVersion(); v < C.GS_ABI_VERSION {
		return nil, &Error{Code: FailedPrecondition, Message: "libgpushare_c has ABI " +
			strconv.FormatUint(uint64(v), 10) + ", this package needs " +
			strconv.Itoa(C.GS_ABI_VERSION) + " or newer"}
	}
	var a cargs
	defer a.release()
	var co C.gs_scheduler_options
	C.gs_scheduler_options_init(&co)
	if o.Policy != "" {
		p, err := a.str("policy", o.Policy)
		if err != nil {
			return nil, err
		}
		co.policy = p
	}
	if o.ReservationTTL == NoExpiry {
		co.reservation_ttl_ms = 0
	} else if o.ReservationTTL != 0 {
		ms := o.ReservationTTL.Milliseconds()
		if o.ReservationTTL > 0 && o.ReservationTTL%time.Millisecond != 0 {
			ms++
		}
		co.reservation_ttl_ms = C.int64_t(ms)
	}
	co.seed = C.uint64_t(o.Seed)
	if o.TargetWorkload != "" {
		w, err := a.str("target workload", o.TargetWorkload)
		if err != nil {
			return nil, err
		}
		co.target_workload = w
	}
	co.target_resource = C.int32_t(o.TargetResource)
	var h *C.gs_scheduler
	if err := statusError(C.gs_scheduler_create(&co, &h)); err != nil {
		return nil, err
	}
	return &Scheduler{s: h}, nil
}

// Close frees the scheduler once the calls in progress have returned.
// Later calls return ErrClosed; closing again does nothing.
func (s *Scheduler) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.s != nil {
		C.gs_scheduler_destroy(s.s)
		s.s = nil
	}
}

// handle read-locks s and returns the C handle; the caller unlocks with
// s.mu.RUnlock() when it returns no error.
func (s *Scheduler) handle() (*C.gs_scheduler, error) {
	if s == nil {
		return nil, &Error{Code: InvalidArgument, Message: "nil *gpushare.Scheduler"}
	}
	s.mu.RLock()
	if s.s == nil {
		s.mu.RUnlock()
		return nil, ErrClosed
	}
	return s.s, nil
}

// handles read-locks the scheduler and then the pod for one call into C;
// release(pod) unlocks both. The pod is not locked when an error returns.
func (s *Scheduler) handles(pod *Pod) (*C.gs_scheduler, *C.gs_pod, error) {
	h, err := s.handle()
	if err != nil {
		return nil, nil, err
	}
	p, err := pod.handle()
	if err != nil {
		s.mu.RUnlock()
		return nil, nil, err
	}
	return h, p, nil
}

// release undoes handles(pod).
func (s *Scheduler) release(pod *Pod) {
	pod.mu.RUnlock()
	s.mu.RUnlock()
}

// ---- Nodes ------------------------------------------------------------------

// Sharing says whether a node takes shared (fractional) GPU work.
type Sharing int8

const (
	// SharingByLabels decides by the node's labels, as the extender does
	// (the default).
	SharingByLabels Sharing = iota
	// SharingOff: the node takes only whole-GPU work.
	SharingOff
	// SharingOn: the node takes shared GPU work whatever its labels.
	SharingOn
)

// Node describes a node and its GPUs, for AddNode. Nodes of a Kubernetes
// cluster are rather fed as v1.Node JSON to ApplyNodeEvent.
type Node struct {
	Name       string            // required, unique
	GPUMemory  []int64           // each GPU's size in memory units (at most 64 GPUs)
	GPUUUIDs   []string          // nil, or one UUID per GPU
	GPUModel   string            // every GPU's model, or ""
	CPU        int64             // thousandths of a core; 0 = untracked
	HostMemory int64             // MiB; 0 = untracked
	Labels     map[string]string // matched by nodeSelector and node affinity
	Sharing    Sharing
	// Unschedulable: the node is cordoned (spec.unschedulable).
	Unschedulable bool
}

// AddNode adds a node. Errors: InvalidArgument naming the bad field;
// AlreadyExists.
func (s *Scheduler) AddNode(n Node) error {
	if n.GPUUUIDs != nil && len(n.GPUUUIDs) != len(n.GPUMemory) {
		return &Error{Code: InvalidArgument, Message: "node " + n.Name + ": " +
			strconv.Itoa(len(n.GPUUUIDs)) + " GPU UUIDs for " + strconv.Itoa(len(n.GPUMemory)) + " GPUs"}
	}
	if len(n.GPUMemory) > math.MaxInt32 {
		return &Error{Code: InvalidArgument, Message: "node " + n.Name + ": too many GPUs"}
	}
	var a cargs
	defer a.release()
	var cn C.gs_node
	C.gs_node_init(&cn)
	var err error
	if cn.name, err = a.str("node name", n.Name); err != nil {
		return err
	}
	cn.gpu_count = C.int32_t(len(n.GPUMemory))
	mem := append([]int64(nil), n.GPUMemory...)
	cn.gpu_memory = a.int64s(mem)
	if cn.gpu_uuids, err = a.strs("GPU UUID", n.GPUUUIDs); err != nil {
		return err
	}
	if n.GPUModel != "" {
		if cn.gpu_model, err = a.str("GPU model", n.GPUModel); err != nil {
			return err
		}
	}
	cn.cpu = C.int64_t(n.CPU)
	cn.host_memory = C.int64_t(n.HostMemory)
	if len(n.Labels) > 0 {
		keys := make([]string, 0, len(n.Labels))
		for k := range n.Labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		kv := make([]string, 0, 2*len(keys))
		for _, k := range keys {
			kv = append(kv, k, n.Labels[k])
		}
		if cn.labels, err = a.strs("label", kv); err != nil {
			return err
		}
		cn.label_count = C.size_t(len(keys))
	}
	switch n.Sharing {
	case SharingOff:
		cn.gpu_sharing = 0
	case SharingOn:
		cn.gpu_sharing = 1
	default:
		cn.gpu_sharing = -1
	}
	if n.Unschedulable {
		cn.schedulable = 0
	} else {
		cn.schedulable = 1
	}
	h, err := s.handle()
	if err != nil {
		return err
	}
	defer s.mu.RUnlock()
	return statusError(C.gs_scheduler_add_node(h, &cn))
}

// RemoveNode removes a node. Errors: NotFound; FailedPrecondition while it
// holds placements.
func (s *Scheduler) RemoveNode(name string) error {
	h, err := s.handle()
	if err != nil {
		return err
	}
	defer s.mu.RUnlock()
	p, l := strArg(name)
	return statusError(C.gs_scheduler_remove_node(h, p, l))
}

// SetNodeSchedulable cordons (false) or uncordons (true) a node.
func (s *Scheduler) SetNodeSchedulable(name string, schedulable bool) error {
	h, err := s.handle()
	if err != nil {
		return err
	}
	defer s.mu.RUnlock()
	p, l := strArg(name)
	return statusError(C.gs_scheduler_set_node_schedulable(h, p, l, cBool(schedulable)))
}

// SetGPUHealthy marks GPU `gpu` of a node healthy or not; an unhealthy GPU
// takes no new work.
func (s *Scheduler) SetGPUHealthy(node string, gpu int, healthy bool) error {
	if gpu < math.MinInt32 || gpu > math.MaxInt32 {
		return &Error{Code: InvalidArgument, Message: "GPU index " + strconv.Itoa(gpu) + " is out of range"}
	}
	h, err := s.handle()
	if err != nil {
		return err
	}
	defer s.mu.RUnlock()
	p, l := strArg(node)
	return statusError(C.gs_scheduler_set_gpu_healthy(h, p, l, C.int(gpu), cBool(healthy)))
}

func cBool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// ---- Kubernetes objects -----------------------------------------------------

// EventReport counts what one watch event changed.
type EventReport struct {
	NodesAdded, NodesUpdated, NodesRemoved int
	Confirmed, Released, Restored          int
	// Warnings is how many changes had to wait (a node to replace that
	// still holds placements, a conflicting placement to restore, ...).
	Warnings int
}

// ApplyNodeEvent applies a watch event (EventAdded, EventModified,
// EventDeleted) on a v1.Node given as JSON, under the extender's rules:
// unknown nodes are added, changed ones replaced once empty, cordons
// followed, deleted ones removed once empty. Nodes are read from
// status.capacity (aliyun.com/gpu-mem, aliyun.com/gpu-count,
// nvidia.com/gpu), their labels and the device plugin's annotations.
// Errors: InvalidArgument for another type or a malformed object; nothing
// changes then.
func (s *Scheduler) ApplyNodeEvent(eventType string, node []byte) (EventReport, error) {
	return s.applyEvent(eventType, node, true)
}

// ApplyPodEvent applies a watch event on a v1.Pod given as JSON: a pod bound
// to the node of its reservation confirms it; one deleted, completed or
// bound elsewhere releases its placement; a bound pod with gpushare's bind
// annotations that the scheduler does not hold is restored. Pods are told
// apart by metadata.uid. Errors as ApplyNodeEvent.
func (s *Scheduler) ApplyPodEvent(eventType string, pod []byte) (EventReport, error) {
	return s.applyEvent(eventType, pod, false)
}

func (s *Scheduler) applyEvent(eventType string, object []byte, node bool) (EventReport, error) {
	h, err := s.handle()
	if err != nil {
		return EventReport{}, err
	}
	defer s.mu.RUnlock()
	t, free := eventTypeArg(eventType)
	defer free()
	j, l := bytesArg(object)
	var r C.gs_event_report
	r.size = C.sizeof_gs_event_report
	var st *C.gs_status
	if node {
		st = C.gs_scheduler_apply_node_event(h, t, j, l, &r)
	} else {
		st = C.gs_scheduler_apply_pod_event(h, t, j, l, &r)
	}
	if err := statusError(st); err != nil {
		return EventReport{}, err
	}
	return EventReport{
		NodesAdded: int(r.nodes_added), NodesUpdated: int(r.nodes_updated),
		NodesRemoved: int(r.nodes_removed), Confirmed: int(r.confirmed),
		Released: int(r.released), Restored: int(r.restored), Warnings: int(r.warnings),
	}, nil
}

// ---- Filter and score -------------------------------------------------------

// Fit reports whether `pod` fits `node` now, and if not why. A node unknown
// to the scheduler does not fit.
func (s *Scheduler) Fit(pod *Pod, node string) (fits bool, reason string, err error) {
	h, p, err := s.handles(pod)
	if err != nil {
		return false, "", err
	}
	defer s.release(pod)
	n, l := strArg(node)
	var feasible C.int
	var why *C.char
	if err := statusError(C.gs_scheduler_fit(h, p, n, l, &feasible, &why)); err != nil {
		return false, "", err
	}
	reason = takeString(why)
	return feasible != 0, reason, nil
}

// NodeFit is FitAfter's answer.
type NodeFit struct {
	Fits   bool
	Reason string // why not, when !Fits
	// Unresolvable: the pod does not fit and would not on the node holding
	// nothing (its affinity, a GPU model, too few or too small GPUs,
	// sharing off, cordoned): no preemption can make it fit. False for an
	// unknown node, which the host may not have applied yet.
	Unresolvable bool
}

// FitAfter is Fit on `node` as the node would be after kube-scheduler's
// edits, judged on a copy of its state (nothing changes): the placements of
// the requests `removed` names (Pod IDs, "namespace/name") freed, then the
// `added` pods placed there first, in order, on the GPUs the policy
// chooses. Preemption removes its victims so, and kube-scheduler adds the
// pods nominated to the node. IDs not placed on the node are ignored, and
// so are added pods placed already (counted where they are). An added pod
// that does not fit makes `pod` not fit, the reason naming it: the GPUs a
// nominated pod waits for are not offered to another. Without edits it
// costs what Fit does.
func (s *Scheduler) FitAfter(pod *Pod, node string, removed []string, added []*Pod) (NodeFit, error) {
	packed, err := packNames(removed)
	if err != nil {
		return NodeFit{}, err
	}
	handles := make([]*C.gs_pod, 0, len(added))
	defer func() {
		for _, a := range added[:len(handles)] {
			a.mu.RUnlock()
		}
	}()
	for _, a := range added {
		ah, err := a.handle()
		if err != nil {
			return NodeFit{}, err
		}
		handles = append(handles, ah)
	}
	h, p, err := s.handles(pod)
	if err != nil {
		return NodeFit{}, err
	}
	defer s.release(pod)
	var feasible, never C.int
	var why *C.char
	if err := statusError(fitAfterCall(h, p, node, &packed, handles, &feasible, &never, &why)); err != nil {
		return NodeFit{}, err
	}
	return NodeFit{Fits: feasible != 0, Reason: takeString(why), Unresolvable: never != 0}, nil
}

// FitResult is Fit's answer for one node.
type FitResult struct {
	Node   string
	Fits   bool
	Reason string // why not, when !Fits
}

// Filter runs Fit on each of `nodes`, in order. With nodes == nil it runs
// on every node of the cluster, in the cluster's order (an empty non-nil
// slice asks about no node).
func (s *Scheduler) Filter(pod *Pod, nodes []string) ([]FitResult, error) {
	var packed names
	if nodes != nil {
		var err error
		if packed, err = packNames(nodes); err != nil {
			return nil, err
		}
	}
	h, p, err := s.handles(pod)
	if err != nil {
		return nil, err
	}
	defer s.release(pod)
	var r *C.gs_fit_results
	if err := statusError(filterCall(h, p, &packed, nodes == nil, &r)); err != nil {
		return nil, err
	}
	defer C.gs_fit_results_free(r)
	n := int(C.gs_fit_results_count(r))
	out := make([]FitResult, n)
	for i := range out {
		ci := C.size_t(i)
		out[i].Node = C.GoString(C.gs_fit_results_node(r, ci))
		out[i].Fits = C.gs_fit_results_feasible(r, ci) != 0
		if !out[i].Fits {
			if why := C.gs_fit_results_reason(r, ci); why != nil {
				out[i].Reason = C.GoString(why)
			}
		}
	}
	return out, nil
}

// Rank returns the policy's rank of `pod` on each of `nodes` (0..10, 10
// best), or -1 where it does not fit or the node is unknown.
func (s *Scheduler) Rank(pod *Pod, nodes []string) ([]int64, error) {
	packed, err := packNames(nodes)
	if err != nil {
		return nil, err
	}
	h, p, err := s.handles(pod)
	if err != nil {
		return nil, err
	}
	defer s.release(pod)
	ranks := make([]int64, len(nodes))
	if len(nodes) == 0 {
		return ranks, nil
	}
	if err := statusError(rankCall(h, p, &packed, ranks)); err != nil {
		return nil, err
	}
	return ranks, nil
}

// FitAll says whether `pod` fits each node now, by the node's position
// (the order nodes were added; NodeNames), in one call: verdicts[i] is 1
// when Fit would say the pod fits node i, else 0. `generation` names that
// order: another generation means nodes were added or removed, so positions
// moved. The library keeps the answers per shape of request and judges
// again only the nodes that changed, so a burst of pods of a few shapes
// costs about a comparison per node. Served only for a pod whose fit
// depends on the nodes' resources alone (no node selector, GPU model,
// required topology or required node affinity): otherwise `served` is
// false and the caller asks Fit node by node. `buf`'s storage is used when
// it has room.
func (s *Scheduler) FitAll(pod *Pod, buf []byte) (verdicts []byte, generation uint64, served bool, err error) {
	h, p, err := s.handles(pod)
	if err != nil {
		return nil, 0, false, err
	}
	defer s.release(pod)
	raw := buf[:cap(buf)]
	for {
		var count C.size_t
		var gen C.uint64_t
		var ok C.int
		var ptr *C.uint8_t
		if len(raw) > 0 {
			ptr = (*C.uint8_t)(unsafe.Pointer(&raw[0]))
		}
		if err := statusError(C.gs_scheduler_fit_all(h, p, ptr, C.size_t(len(raw)), &count, &gen, &ok)); err != nil {
			return nil, 0, false, err
		}
		if ok == 0 {
			return nil, 0, false, nil
		}
		if int(count) <= len(raw) {
			return raw[:count], uint64(gen), true, nil
		}
		raw = make([]byte, int(count)+int(count)/8) // The nodes outgrew it: again, with room.
	}
}

// NodeNames returns the nodes' names by position, as FitAll numbers them,
// and the generation of that order.
func (s *Scheduler) NodeNames() (names []string, generation uint64, err error) {
	h, err := s.handle()
	if err != nil {
		return nil, 0, err
	}
	defer s.mu.RUnlock()
	var out *C.gs_node_names
	if err := statusError(C.gs_scheduler_node_names(h, &out)); err != nil {
		return nil, 0, err
	}
	defer C.gs_node_names_free(out)
	var buffer *C.char
	var lengths *C.uint32_t
	var count C.size_t
	var gen C.uint64_t
	C.gs_node_names_data(out, &buffer, &lengths, &count, &gen)
	names = make([]string, int(count))
	if count > 0 {
		ls := unsafe.Slice(lengths, int(count))
		at := uintptr(0)
		for i := range names {
			names[i] = C.GoStringN((*C.char)(unsafe.Add(unsafe.Pointer(buffer), at)), C.int(ls[i]))
			at += uintptr(ls[i])
		}
	}
	return names, uint64(gen), nil
}

// ---- Placements -------------------------------------------------------------

// Placement is where a request went: a Go copy of a gs_placement.
type Placement struct {
	RequestID     string // "ns/name"
	Node          string
	GPUs          []int // ascending
	MemoryPerGPU  int64 // memory units on each GPU
	ComputePerGPU int64 // thousandths; 0 = untracked
	Exclusive     bool  // whole GPUs
	// Patch is the JSON merge patch {"metadata":{"annotations":{...}}} of
	// the bind: ALIYUN_COM_GPU_MEM_IDX, _POD, _DEV, _ASSIGNED, _ASSUME_TIME
	// and scheduler.framework.gpushare.allocation, as gpushare-extender
	// writes them, for the device plugin.
	Patch []byte
	// Token identifies the reservation Reserve made or found (0 for a
	// confirmed placement): ConfirmReservation and ForgetReservation act on
	// it alone.
	Token uint64
}

// Annotations are the pod annotations of Patch, for a host that writes them
// another way than a merge patch: on the v1.Binding itself, say, which the
// API server merges into the pod in the same update that binds it.
func (p *Placement) Annotations() (map[string]string, error) {
	var patch struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(p.Patch, &patch); err != nil {
		return nil, fmt.Errorf("gpushare: the bind patch of %s: %w", p.RequestID, err)
	}
	return patch.Metadata.Annotations, nil
}

// takePlacement copies a gs_placement and frees it.
func takePlacement(p *C.gs_placement) *Placement {
	defer C.gs_placement_free(p)
	out := &Placement{
		RequestID:     C.GoString(C.gs_placement_request_id(p)),
		Node:          C.GoString(C.gs_placement_node(p)),
		MemoryPerGPU:  int64(C.gs_placement_memory_per_gpu(p)),
		ComputePerGPU: int64(C.gs_placement_compute_per_gpu(p)),
		Exclusive:     C.gs_placement_exclusive(p) != 0,
		Patch:         goBytes(C.gs_placement_patch(p)),
		Token:         uint64(C.gs_placement_token(p)),
	}
	n := int(C.gs_placement_gpu_count(p))
	out.GPUs = make([]int, n)
	for i := range out.GPUs {
		out.GPUs[i] = int(C.gs_placement_gpu(p, C.size_t(i)))
	}
	return out
}

// Reserve reserves GPUs for `pod` on `node` ("" = any node, by the policy)
// until the reservation TTL runs out (never, with NoExpiry), unless Confirm
// or Forget comes first.
// Reserving again on the same node returns the same placement. A parsed pod
// (ParsePod) is reserved as gpushare-extender binds it: the placement is
// owned by its metadata.uid, so ApplyPodEvent confirms or releases it, and a
// placement its name holds for an older pod (another UID) is released
// first. Errors: ResourceExhausted saying why it does not fit; AlreadyExists
// if the pod is placed on another node; NotFound for an unknown node.
func (s *Scheduler) Reserve(pod *Pod, node string) (*Placement, error) {
	h, p, err := s.handles(pod)
	if err != nil {
		return nil, err
	}
	defer s.release(pod)
	n, l := strArg(node)
	var out *C.gs_placement
	if err := statusError(C.gs_scheduler_reserve(h, p, n, l, &out)); err != nil {
		return nil, err
	}
	return takePlacement(out), nil
}

// Place places `pod` for good (no TTL), on the node the policy picks: for
// a simulator or a batch host.
func (s *Scheduler) Place(pod *Pod) (*Placement, error) {
	h, p, err := s.handles(pod)
	if err != nil {
		return nil, err
	}
	defer s.release(pod)
	var out *C.gs_placement
	if err := statusError(C.gs_scheduler_place(h, p, &out)); err != nil {
		return nil, err
	}
	return takePlacement(out), nil
}

type idCall func(*C.gs_scheduler, *C.char, C.size_t) *C.gs_status

func (s *Scheduler) byID(id string, call idCall) error {
	h, err := s.handle()
	if err != nil {
		return err
	}
	defer s.mu.RUnlock()
	p, l := strArg(id)
	return statusError(call(h, p, l))
}

// Confirm makes the reservation of request `id` ("ns/name") permanent: the
// pod is bound.
func (s *Scheduler) Confirm(id string) error {
	return s.byID(id, func(h *C.gs_scheduler, p *C.char, l C.size_t) *C.gs_status {
		return C.gs_scheduler_confirm(h, p, l)
	})
}

// Forget drops the reservation of request `id`: its bind failed.
func (s *Scheduler) Forget(id string) error {
	return s.byID(id, func(h *C.gs_scheduler, p *C.char, l C.size_t) *C.gs_status {
		return C.gs_scheduler_forget(h, p, l)
	})
}

// ConfirmReservation is Confirm for one reservation, p's (p.Token): when
// the request is reserved again under another token (a newer attempt, or
// another pod of the same name) it changes nothing and returns
// FailedPrecondition. A confirmed placement is nil.
func (s *Scheduler) ConfirmReservation(p *Placement) error {
	return s.byID(p.RequestID, func(h *C.gs_scheduler, id *C.char, l C.size_t) *C.gs_status {
		return C.gs_scheduler_confirm_reservation(h, id, l, C.uint64_t(p.Token))
	})
}

// ForgetReservation is Forget for one reservation, p's (p.Token): when the
// request is reserved again under another token it changes nothing and
// returns FailedPrecondition.
func (s *Scheduler) ForgetReservation(p *Placement) error {
	return s.byID(p.RequestID, func(h *C.gs_scheduler, id *C.char, l C.size_t) *C.gs_status {
		return C.gs_scheduler_forget_reservation(h, id, l, C.uint64_t(p.Token))
	})
}

// Release frees the placement of request `id`: its pod ended.
func (s *Scheduler) Release(id string) error {
	return s.byID(id, func(h *C.gs_scheduler, p *C.char, l C.size_t) *C.gs_status {
		return C.gs_scheduler_release(h, p, l)
	})
}

// Expire forgets the reservations past their TTL and returns how many.
// Every change expires them too; a host calls Expire from a timer so that
// reads (Fit, Filter, Rank) do not see stale reservations.
func (s *Scheduler) Expire() (int, error) {
	h, err := s.handle()
	if err != nil {
		return 0, err
	}
	defer s.mu.RUnlock()
	return int(C.gs_scheduler_expire(h)), nil
}

// Placement returns the placement held (reserved or confirmed) for request
// `id`. Errors: NotFound if none.
func (s *Scheduler) Placement(id string) (*Placement, error) {
	h, err := s.handle()
	if err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	p, l := strArg(id)
	var out *C.gs_placement
	if err := statusError(C.gs_scheduler_placement(h, p, l, &out)); err != nil {
		return nil, err
	}
	return takePlacement(out), nil
}

// ---- Snapshot ---------------------------------------------------------------

// Snapshot returns the whole state (nodes, GPU health, placements) as JSON.
func (s *Scheduler) Snapshot() ([]byte, error) {
	h, err := s.handle()
	if err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	var j *C.char
	if err := statusError(C.gs_scheduler_snapshot(h, &j)); err != nil {
		return nil, err
	}
	defer C.gs_string_free(j)
	return goBytes(j), nil
}

// Check verifies the cluster's invariants and the reservations. Errors:
// Internal saying what is broken.
func (s *Scheduler) Check() error {
	h, err := s.handle()
	if err != nil {
		return err
	}
	defer s.mu.RUnlock()
	return statusError(C.gs_scheduler_check(h))
}
