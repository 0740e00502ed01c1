package plugin

// Pods with DRA claims: GpuShare scores the nodes for a pod whose
// ResourceClaims ask for GPUs of gpushare-dra-driver (driver
// gpu.gpushare.dev), and does nothing else for it.
//
// kube-scheduler's DRA allocator (the DynamicResources plugin) owns such a
// pod's feasibility, its devices, their allocation and the bind: inside a
// node it takes the first devices, in the order the driver publishes them,
// whose memory left fits each request (first fit), and no default score
// plugin counts DRA devices. GpuShare's PreScore gives the library's policy
// (Args.DRAPolicy, "dra+<name>") each filtered node's GPUs as the
// allocator sees them, from the driver's ResourceSlices and the claims'
// allocations, and the pod's demand, from its claims' requests; the policy
// scores each node on the GPUs first fit will take there (dra+fgdpack, on
// Args.TargetWorkload or one whole GPU of memory: the node where the claim
// strands the fewest GPUs). GpuShare never
// filters, reserves or binds such a pod, and on any error it leaves the
// pod unscored (Skip), never unschedulable.
//
// The objects come from kube-scheduler's SharedDRAManager: the ResourceSlice
// and ResourceClaim informers of its SharedInformerFactory, the claims
// through the assume cache the allocator writes its allocations to, so a
// claim allocated in an earlier cycle counts before the API server's
// update comes back. The GPUs are a gpushare.Scheduler of their own
// (draState.sched), apart from the annotation-based state of the other GPU
// pods: one node per ResourceSlice pool of the driver, one GPU per device
// (its memory in GiB units), and each allocated claim's share of a device
// as a placement restored on that GPU. It is brought up to date, node by
// node, at each PreScore of such a pod.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"gpushare.dev/go/gpushare"
)

const (
	// DRADriver is gpushare-dra-driver's driver name (dra-driver/).
	DRADriver = "gpu.gpushare.dev"
	// DefaultDRADeviceClass is the DeviceClass of the driver's manifests,
	// the default of Args.DRADeviceClasses with DefaultDRAWholeGPUClass.
	DefaultDRADeviceClass = "gpushare.dev"
	// DefaultDRAWholeGPUClass is the chart's class of the driver's GPUs
	// that serves an extended resource (nvidia.com/gpu) in whole GPUs.
	DefaultDRAWholeGPUClass = "gpushare.dev-whole"
	// DefaultDRAPolicy is the default of Args.DRAPolicy: fgdpack on the
	// GPUs first fit takes, against Args.TargetWorkload or, unset, one
	// whole GPU of memory (the driver's claims ask memory only, which a
	// compute target never sees: TestDRAFGDPoliciesRankMemoryClaims). It
	// sends a claim where it strands the fewest GPUs: onto a GPU partly
	// used already rather than breaking into an idle one. In the simulator
	// (scripts/fgd_table.py, openb traces, against each trace's typical
	// tasks) dra+fgdpack leaves 2.88-9.83% of GPUs unallocated, dra+binpack
	// 5.10-14.03%, kube-scheduler alone (dra) 6.71-20.93%.
	DefaultDRAPolicy = "dra+fgdpack"
	// draPolicyPrefix: the policies that score a node on the GPUs DRA's
	// first fit takes there (src/policies/dra_policy.h).
	draPolicyPrefix = "dra+"
	// draMemory is the driver's consumable capacity, one device's memory.
	draMemory resourceapi.QualifiedName = "memory"
	// draMaxGPUs is the library's limit of GPUs per node.
	draMaxGPUs = 64
	// draNamespace is the namespace of the stand-in pods that hold the
	// claims' shares in draState.sched.
	draNamespace = "gpushare-dra"

	draStateKey fwk.StateKey = Name + "/dra"
)

var gib = resource.MustParse("1Gi")

// draSource is what the DRA state reads: kube-scheduler's SharedDRAManager
// in a scheduler (draManagerSource), fakes in tests.
type draSource interface {
	Slices() ([]*resourceapi.ResourceSlice, error)
	Claims() ([]*resourceapi.ResourceClaim, error)
	Claim(namespace, name string) (*resourceapi.ResourceClaim, error)
	// Pending returns the allocation the allocator made for a claim in a
	// scheduling cycle, before its binding cycle writes it, or nil.
	Pending(uid types.UID) *resourceapi.AllocationResult
}

// draManagerSource reads kube-scheduler's SharedDRAManager.
type draManagerSource struct{ m fwk.SharedDRAManager }

func (s draManagerSource) Slices() ([]*resourceapi.ResourceSlice, error) {
	return s.m.ResourceSlices().ListWithDeviceTaintRules()
}

func (s draManagerSource) Claims() ([]*resourceapi.ResourceClaim, error) {
	return s.m.ResourceClaims().List()
}

func (s draManagerSource) Claim(namespace, name string) (*resourceapi.ResourceClaim, error) {
	return s.m.ResourceClaims().Get(namespace, name)
}

// Pending: Kubernetes 1.36 and later tell a pending allocation; 1.35 only
// whether there is one (then the claim counts once its allocation is in
// the assume cache, a moment later).
func (s draManagerSource) Pending(uid types.UID) *resourceapi.AllocationResult {
	type pending interface {
		GetPendingAllocation(types.UID) *resourceapi.AllocationResult
	}
	if t, ok := s.m.ResourceClaims().(pending); ok {
		return t.GetPendingAllocation(uid)
	}
	return nil
}

// draState is the GPUs of the driver's devices, for scoring (see above).
type draState struct {
	source  draSource
	classes map[string]bool
	logger  klog.Logger

	mu sync.Mutex
	// sched holds applied: each node's GPUs and the claims' shares on them.
	sched   *gpushare.Scheduler
	applied map[string]*draNode
	// warned: invalid objects already logged, by object and version.
	warned map[string]bool
}

// draNode is one node's GPUs as the allocator sees them.
type draNode struct {
	gpus    []int64        // memory units (GiB) per device, in the allocator's order
	devices map[string]int // device name -> GPU index
	allocs  map[draShare]int64
}

// draShare is one claim's share of one GPU.
type draShare struct {
	claim string // the claim's UID (else namespace.name)
	gpu   int
}

// newDRAState's scheduler ranks with `policy` against `target` (JSON), or
// with none against one whole GPU of memory: claims ask memory only.
func newDRAState(source draSource, classes []string, policy, target string, logger klog.Logger) (*draState, error) {
	o := gpushare.Options{Policy: policy, ReservationTTL: gpushare.NoExpiry, TargetWorkload: target}
	if target == "" {
		o.TargetResource = gpushare.TargetMemory
	}
	s, err := gpushare.New(o)
	if err != nil {
		return nil, err
	}
	set := make(map[string]bool, len(classes))
	for _, c := range classes {
		set[c] = true
	}
	return &draState{source: source, classes: set, logger: logger, sched: s,
		applied: map[string]*draNode{}, warned: map[string]bool{}}, nil
}

func (d *draState) close() { d.sched.Close() }

// warn logs an invalid object once per version of it.
func (d *draState) warn(key string, err error, msg string, kv ...any) {
	if d.warned[key] {
		return
	}
	if len(d.warned) >= maxParsed {
		d.warned = map[string]bool{}
	}
	d.warned[key] = true
	d.logger.Error(err, msg, kv...)
}

// ---- The pod's demand ---------------------------------------------------------------

// errNoDRADemand: the pod asks nothing of the driver's classes that is not
// allocated already.
var errNoDRADemand = errors.New("no request for the driver's device classes left to allocate")

// draPart is one request: count devices of `units` GiB each (0: whole GPUs).
type draPart struct {
	units, count int64
}

// request reads what the pod's claims ask of the driver's devices and are
// not allocated yet, as one gpushare request: per GPU the largest amount
// asked, over as many GPUs as the requests count; whole GPUs where any
// request asks one without an amount (the request policy's default, the
// whole device). Requests of other classes, admin-access requests and
// allocated claims count nothing. errNoDRADemand when nothing is left.
func (d *draState) request(ns, name string, claims []podClaim) (gpushare.Request, error) {
	r := gpushare.Request{ID: ns + "/" + name}
	var parts []draPart
	for _, pc := range claims {
		if pc.claimName == "" {
			return r, fmt.Errorf("resource claim %q: %s", pc.name, pc.why)
		}
		claim, err := d.source.Claim(ns, pc.claimName)
		if err != nil {
			return r, fmt.Errorf("resource claim %q (%s/%s): %w", pc.name, ns, pc.claimName, err)
		}
		if claim.Status.Allocation != nil || d.source.Pending(claim.UID) != nil {
			continue
		}
		got, err := d.claimParts(claim)
		if err != nil {
			return r, &invalidClaimError{fmt.Errorf("resource claim %s/%s: %w", ns, pc.claimName, err)}
		}
		parts = append(parts, got...)
	}
	if len(parts) == 0 {
		return r, errNoDRADemand
	}
	var units, count int64
	whole := false
	for _, p := range parts {
		count += p.count
		if p.units == 0 {
			whole = true
		}
		units = max(units, p.units)
	}
	if count > draMaxGPUs {
		return r, &invalidClaimError{fmt.Errorf("the claims ask %d devices; a node has at most %d GPUs", count, draMaxGPUs)}
	}
	if whole {
		r.WholeGPUs = count
	} else {
		r.GPUMemory, r.GPUCount = units*count, count
	}
	return r, nil
}

// claimParts reads a claim's requests for the driver's classes. A
// firstAvailable request is read as its first subrequest, the one the
// allocator tries first.
func (d *draState) claimParts(claim *resourceapi.ResourceClaim) ([]draPart, error) {
	var parts []draPart
	for _, r := range claim.Spec.Devices.Requests {
		var (
			class string
			mode  resourceapi.DeviceAllocationMode
			count int64
			capa  *resourceapi.CapacityRequirements
			admin *bool
		)
		switch {
		case r.Exactly != nil:
			e := r.Exactly
			class, mode, count, capa, admin = e.DeviceClassName, e.AllocationMode, e.Count, e.Capacity, e.AdminAccess
		case len(r.FirstAvailable) > 0:
			s := r.FirstAvailable[0]
			class, mode, count, capa = s.DeviceClassName, s.AllocationMode, s.Count, s.Capacity
		default:
			continue
		}
		if !d.classes[class] || (admin != nil && *admin) {
			continue
		}
		if mode == resourceapi.DeviceAllocationModeAll {
			return nil, fmt.Errorf("request %q asks all devices of class %s: not scored", r.Name, class)
		}
		if count <= 0 {
			count = 1
		}
		var units int64
		if capa != nil {
			if q, ok := capa.Requests[draMemory]; ok {
				if q.Sign() <= 0 {
					return nil, fmt.Errorf("request %q asks memory %s", r.Name, q.String())
				}
				units = ceilGiB(q)
			}
		}
		parts = append(parts, draPart{units: units, count: count})
	}
	return parts, nil
}

// invalidClaimError: a claim asks what gpushare cannot score (logged as an
// error), unlike a claim not created or not in the informer yet.
type invalidClaimError struct{ err error }

func (e *invalidClaimError) Error() string { return e.err.Error() }
func (e *invalidClaimError) Unwrap() error { return e.err }

// podClaim is one entry of pod.spec.resourceClaims with the name of its
// ResourceClaim ("" with `why` when it has none yet).
type podClaim struct {
	name, claimName, why string
}

// podClaims resolves the pod's resource claims to the names of their
// ResourceClaims: the one it names, or the one made from its template, which
// pod.status.resourceClaimStatuses names once kube-controller-manager made
// it (a copy of the template's spec; DynamicResources' PreFilter waits for
// it). An entry whose claim was intentionally not made is left out.
func podClaims(pod *v1.Pod) []podClaim {
	out := make([]podClaim, 0, len(pod.Spec.ResourceClaims))
	for _, pc := range pod.Spec.ResourceClaims {
		c := podClaim{name: pc.Name}
		switch {
		case pc.ResourceClaimName != nil:
			c.claimName = *pc.ResourceClaimName
		case pc.ResourceClaimTemplateName != nil:
			i := slices.IndexFunc(pod.Status.ResourceClaimStatuses,
				func(s v1.PodResourceClaimStatus) bool { return s.Name == pc.Name })
			switch {
			case i < 0:
				c.why = "its ResourceClaim is not made from template " + *pc.ResourceClaimTemplateName + " yet"
			case pod.Status.ResourceClaimStatuses[i].ResourceClaimName == nil:
				continue
			default:
				c.claimName = *pod.Status.ResourceClaimStatuses[i].ResourceClaimName
			}
		default:
			c.why = "names neither a ResourceClaim nor a template"
		}
		out = append(out, c)
	}
	return out
}

// ceilGiB is q in GiB, rounded up (the allocator rounds a request up to
// the driver's step, 1Gi).
func ceilGiB(q resource.Quantity) int64 {
	v := q.Value()
	g := gib.Value()
	return (v + g - 1) / g
}

// floorGiB is q in whole GiB (a device's capacity).
func floorGiB(q resource.Quantity) int64 { return q.Value() / gib.Value() }

// ---- The nodes' GPUs ------------------------------------------------------------------

// desired reads every node's GPUs and shares from the slices and claims.
// Invalid objects are logged (once per version) and left out: a device
// without memory, a share of a device that no slice lists.
func (d *draState) desired() (map[string]*draNode, error) {
	all, err := d.source.Slices()
	if err != nil {
		return nil, fmt.Errorf("listing ResourceSlices: %w", err)
	}
	// The driver's slices by pool, of each pool's newest generation.
	pools := map[string][]*resourceapi.ResourceSlice{}
	for _, s := range all {
		if s.Spec.Driver != DRADriver {
			continue
		}
		if s.Spec.NodeName == nil || *s.Spec.NodeName == "" {
			d.warn("slice/"+s.Name+"/"+s.ResourceVersion, errors.New("no spec.nodeName"),
				"A ResourceSlice of gpushare's DRA driver names no node; ignored", "resourceSlice", s.Name)
			continue
		}
		pool := s.Spec.Pool.Name
		if cur := pools[pool]; len(cur) > 0 && cur[0].Spec.Pool.Generation != s.Spec.Pool.Generation {
			if cur[0].Spec.Pool.Generation > s.Spec.Pool.Generation {
				continue
			}
			pools[pool] = nil
		}
		pools[pool] = append(pools[pool], s)
	}
	nodes := map[string]*draNode{}
	poolNode := map[string]string{}
	poolNames := make([]string, 0, len(pools))
	for pool := range pools {
		poolNames = append(poolNames, pool)
	}
	sort.Strings(poolNames)
	for _, pool := range poolNames {
		sl := pools[pool]
		sort.Slice(sl, func(i, j int) bool { return sl[i].Name < sl[j].Name })
		node := *sl[0].Spec.NodeName
		if _, dup := nodes[node]; dup {
			d.warn("pool/"+pool+"/"+node, errors.New("two pools on one node"),
				"Two ResourceSlice pools of gpushare's DRA driver name one node; the second is ignored",
				"pool", pool, "node", node)
			continue
		}
		n := &draNode{devices: map[string]int{}, allocs: map[draShare]int64{}}
		for _, s := range sl {
			for _, dev := range s.Spec.Devices {
				c, ok := dev.Capacity[draMemory]
				units := floorGiB(c.Value)
				if !ok || units <= 0 {
					d.warn("slice/"+s.Name+"/"+s.ResourceVersion+"/"+dev.Name,
						fmt.Errorf("device %s has memory %q", dev.Name, c.Value.String()),
						"A device of gpushare's DRA driver offers no memory (at least 1Gi); not counted",
						"resourceSlice", s.Name, "device", dev.Name)
					continue
				}
				if _, dup := n.devices[dev.Name]; dup {
					continue
				}
				n.devices[dev.Name] = len(n.gpus)
				n.gpus = append(n.gpus, units)
			}
		}
		if len(n.gpus) == 0 {
			continue
		}
		if len(n.gpus) > draMaxGPUs {
			d.warn("pool/"+pool+"/"+strconv.Itoa(len(n.gpus)), fmt.Errorf("%d devices", len(n.gpus)),
				"A node of gpushare's DRA driver has more GPUs than gpushare takes; not scored",
				"node", node, "max", draMaxGPUs)
			continue
		}
		nodes[node] = n
		poolNode[pool] = node
	}

	claims, err := d.source.Claims()
	if err != nil {
		return nil, fmt.Errorf("listing ResourceClaims: %w", err)
	}
	for _, claim := range claims {
		alloc := claim.Status.Allocation
		if alloc == nil {
			alloc = d.source.Pending(claim.UID)
		}
		if alloc == nil {
			continue
		}
		id := string(claim.UID)
		if id == "" {
			id = claim.Namespace + "." + claim.Name
		}
		for _, r := range alloc.Devices.Results {
			if r.Driver != DRADriver || (r.AdminAccess != nil && *r.AdminAccess) {
				continue
			}
			node, ok := poolNode[r.Pool]
			if !ok {
				continue // Its slice is gone, or not valid: nothing to score there.
			}
			n := nodes[node]
			gpu, ok := n.devices[r.Device]
			if !ok {
				d.warn("claim/"+id+"/"+claim.ResourceVersion+"/"+r.Device,
					fmt.Errorf("device %s is not in pool %s", r.Device, r.Pool),
					"A ResourceClaim's allocation names a device its pool does not list; not counted",
					"resourceClaim", klog.KObj(claim))
				continue
			}
			units := n.gpus[gpu] // No consumed capacity: the whole device.
			if q, ok := r.ConsumedCapacity[draMemory]; ok {
				units = ceilGiB(q)
				if units < 0 {
					d.warn("claim/"+id+"/"+claim.ResourceVersion+"/"+r.Device,
						fmt.Errorf("consumed memory %s", q.String()),
						"A ResourceClaim's allocation consumes negative memory; not counted",
						"resourceClaim", klog.KObj(claim))
					continue
				}
			}
			n.allocs[draShare{claim: id, gpu: gpu}] += units
		}
	}
	return nodes, nil
}

// sync brings sched to `want`, node by node: a node whose GPUs changed is
// replaced (its shares released, removed, added again), other nodes get
// the shares that changed.
func (d *draState) sync(want map[string]*draNode) {
	for name, cur := range d.applied {
		if w := want[name]; w == nil || !slices.Equal(w.gpus, cur.gpus) {
			for s := range cur.allocs {
				d.release(s)
			}
			if err := d.sched.RemoveNode(name); err != nil && !errors.Is(err, gpushare.ErrNotFound) {
				d.logger.Error(err, "Removing a node of the DRA state", "node", name)
			}
			delete(d.applied, name)
		}
	}
	for name, w := range want {
		cur := d.applied[name]
		if cur == nil {
			err := d.sched.AddNode(gpushare.Node{Name: name, GPUMemory: w.gpus, Sharing: gpushare.SharingOn})
			if err != nil {
				d.warn("node/"+name+"/"+fmt.Sprint(w.gpus), err, "A node of gpushare's DRA driver cannot be added; not scored",
					"node", name)
				continue
			}
			cur = &draNode{gpus: w.gpus}
		}
		for s, units := range cur.allocs {
			if w.allocs[s] != units {
				d.release(s)
			}
		}
		for s, units := range w.allocs {
			if cur.allocs[s] != units {
				d.restore(name, s, units)
			}
		}
		d.applied[name] = w
	}
}

func shareName(s draShare) string { return s.claim + ".gpu" + strconv.Itoa(s.gpu) }

// restore holds a claim's share on its GPU: a stand-in pod, bound, asking
// the share's units, its GPU named by the bind annotation.
func (d *draState) restore(node string, s draShare, units int64) {
	if units <= 0 {
		return
	}
	pod := map[string]any{
		"metadata": map[string]any{
			"name": shareName(s), "namespace": draNamespace, "uid": shareName(s),
			"annotations": map[string]string{GPUIndexAnnotation: strconv.Itoa(s.gpu)},
		},
		"spec": map[string]any{
			"nodeName": node,
			"containers": []any{map[string]any{"name": "share", "resources": map[string]any{
				"limits": map[string]string{string(GPUMemResource): strconv.FormatInt(units, 10)}}}},
		},
		"status": map[string]any{"phase": "Running"},
	}
	body, err := json.Marshal(pod)
	if err == nil {
		var r gpushare.EventReport
		r, err = d.sched.ApplyPodEvent(gpushare.EventAdded, body)
		if err == nil && r.Restored == 0 {
			err = fmt.Errorf("not restored (%+v): more than the GPU's memory", r)
		}
	}
	if err != nil {
		d.warn("share/"+node+"/"+shareName(s)+"/"+strconv.FormatInt(units, 10), err,
			"A ResourceClaim's share of a GPU does not fit the GPU; not counted",
			"node", node, "claim", s.claim, "gpu", s.gpu, "units", units)
	}
}

func (d *draState) release(s draShare) {
	err := d.sched.Release(draNamespace + "/" + shareName(s))
	if err != nil && !errors.Is(err, gpushare.ErrNotFound) {
		d.logger.Error(err, "Releasing a share of the DRA state", "claim", s.claim, "gpu", s.gpu)
	}
}

// rank brings the state up to date and ranks `pod` on `nodes` (0..10; -1
// where it does not fit or the node has no GPUs of the driver).
func (d *draState) rank(pod *gpushare.Pod, nodes []string) ([]int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	want, err := d.desired()
	if err != nil {
		return nil, err
	}
	d.sync(want)
	return d.sched.Rank(pod, nodes)
}

// ---- PreScore and Score ---------------------------------------------------------------

// draCycle is what PreScore knows of a pod with DRA claims.
type draCycle struct {
	ranks map[string]int64
}

func (c *draCycle) Clone() fwk.StateData { return c }

// draPreScore ranks the nodes for a pod whose claims ask the driver's
// devices (see the top of this file). Skip, so that Score does not run,
// for every other pod and on any error: GpuShare never makes a DRA pod
// unschedulable.
func (p *Plugin) draPreScore(ctx context.Context, state fwk.CycleState, pod *v1.Pod,
	nodes []fwk.NodeInfo) *fwk.Status {
	if p.dra == nil || len(pod.Spec.ResourceClaims) == 0 {
		return fwk.NewStatus(fwk.Skip)
	}
	logger := klog.FromContext(ctx)
	r, err := p.dra.request(pod.Namespace, pod.Name, podClaims(pod))
	var gp *gpushare.Pod
	if err == nil {
		if gp, err = gpushare.NewPod(r); err != nil {
			err = &invalidClaimError{err}
		}
	}
	var invalid *invalidClaimError
	switch {
	case errors.Is(err, errNoDRADemand):
		return fwk.NewStatus(fwk.Skip)
	case errors.As(err, &invalid):
		logger.Error(err, "A pod's DRA claims cannot be scored; GpuShare leaves its nodes unscored",
			"pod", klog.KObj(pod))
		return fwk.NewStatus(fwk.Skip)
	case err != nil:
		logger.V(4).Info("A pod's DRA claims are not readable yet; its nodes are not scored",
			"pod", klog.KObj(pod), "err", err)
		return fwk.NewStatus(fwk.Skip)
	}
	defer gp.Close()
	names := make([]string, 0, len(nodes))
	for _, n := range nodes {
		if node := n.Node(); node != nil {
			names = append(names, node.Name)
		}
	}
	ranks, err := p.dra.rank(gp, names)
	if err != nil {
		logger.Error(err, "Ranking the nodes for a pod's DRA claims; GpuShare leaves them unscored",
			"pod", klog.KObj(pod))
		return fwk.NewStatus(fwk.Skip)
	}
	c := &draCycle{ranks: make(map[string]int64, len(names))}
	for i, name := range names {
		c.ranks[name] = ranks[i]
	}
	state.Write(draStateKey, c)
	logger.V(4).Info("Nodes ranked for DRA claims", "pod", klog.KObj(pod), "ranks", c.ranks)
	return nil
}

// draScore is the node's rank from draPreScore (0..10); ok is false when
// the cycle has none.
func draScore(state fwk.CycleState, node string) (int64, bool) {
	data, err := state.Read(draStateKey)
	if err != nil {
		return 0, false
	}
	c, ok := data.(*draCycle)
	if !ok {
		return 0, false
	}
	return max(c.ranks[node], 0), true
}
