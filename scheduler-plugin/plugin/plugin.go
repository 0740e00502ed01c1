// Package plugin is GpuShare, a kube-scheduler framework plugin that places
// GPU-sharing pods with gpushare's scheduler core (through the Go binding
// gpushare.dev/go/gpushare and libgpushare_c.so): the rules, scores and
// bind annotations of gpushare-extender, inside kube-scheduler instead of
// behind its HTTP extender interface.
//
// Extension points, for a pod that asks for aliyun.com/gpu-mem or
// nvidia.com/gpu (every other pod is skipped at PreFilter):
//
//	PreFilter   the pod is read once (its JSON through gpushare.ParsePod)
//	            and kept in the CycleState
//	Filter      gpushare's Fit on the node: Unschedulable with its reason
//	PreScore    one Rank call for all the filtered nodes
//	Score       the node's rank (0..10), NormalizeScore scales it to 0..100
//	Reserve     GPUs reserved on the chosen node, held as kube-scheduler
//	            holds an assumed pod: until Unreserve, the bind observed or
//	            the pod's deletion, never for a time-to-live; Unreserve
//	            forgets that reservation (its token) only, and after a bind
//	            of unknown outcome only once the pod is read back (settle.go)
//	Bind        the pod is bound with the placement's annotations on the
//	            Binding (ALIYUN_COM_GPU_MEM_IDX, ..., the extender's), which
//	            the API server writes on the pod and the device plugin reads;
//	            pods without a reservation go to the next bind plugin
//	PreBind     only where GpuShare is not the first bind plugin: the
//	            annotations are patched onto the pod before another binds it
//	PostBind    the reservation is confirmed; a failure is an Event on the
//	            pod and the metric gpushare_reservation_confirm_failures_total
//
// The cluster's state comes from the node and pod informers of kube-scheduler's
// SharedInformerFactory: every event is applied with ApplyNodeEvent and
// ApplyPodEvent (bound pods confirm or restore their placements, ended pods
// release them), and the informers' initial lists replay the cluster as
// ADDED events when the scheduler starts. That state is one per process:
// every profile naming GpuShare shares it (see sharedState), so two profiles
// cannot promise one GPU twice.
//
// A pod whose ResourceClaims ask for gpushare-dra-driver's GPUs (a device
// class of Args.DRADeviceClasses) and for no aliyun.com/gpu-mem or
// nvidia.com/gpu is only scored: PreScore ranks the nodes with the policy
// Args.DRAPolicy (dra+fgdpack) on the GPUs kube-scheduler's DRA allocator
// will take on each (first fit), from the driver's ResourceSlices and the
// claims' allocations, a state of its own (dra.go). Its feasibility,
// devices, allocation and bind are the DynamicResources plugin's.
//
// A pod asking nvidia.com/gpu (and no aliyun.com/gpu-mem) where a DeviceClass
// maps nvidia.com/gpu (spec.extendedResourceName) is DRA's on the nodes whose
// allocatable has no nvidia.com/gpu: there GpuShare admits the node, reserves
// and annotates nothing, and ranks it only with the DRA state (extended.go).
package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"gpushare.dev/go/gpushare"
)

// Name is the plugin's name in a KubeSchedulerConfiguration.
const Name = "GpuShare"

// Args are the plugin's arguments (pluginConfig[].args).
type Args struct {
	// Policy is gpushare's placement policy: binpack (the default),
	// spread, fgdpack, ... (gpushare.Policies()).
	Policy string `json:"policy,omitempty"`
	// ReservationTTLSeconds is ignored: a reservation holds until its bind
	// settles (see the package comment), as kube-scheduler holds an assumed
	// pod. Accepted, with a warning, so that older configurations load.
	ReservationTTLSeconds int64 `json:"reservationTTLSeconds,omitempty"`
	// SyncTimeoutSeconds is ignored: before the informers' initial lists
	// are applied a GPU pod is left unschedulable at once, and retried when
	// they are. Accepted, with a warning, so that older configurations load.
	SyncTimeoutSeconds int64 `json:"syncTimeoutSeconds,omitempty"`
	// DRADeviceClasses are the DeviceClasses whose devices are
	// gpushare-dra-driver's GPUs (driver gpu.gpushare.dev): a pod whose
	// ResourceClaims request one of them has its nodes scored (dra.go).
	// Unset: [gpushare.dev, gpushare.dev-whole], the chart's classes (the
	// second serves nvidia.com/gpu in whole GPUs); empty ([]): no pod is.
	DRADeviceClasses []string `json:"draDeviceClasses,omitempty"`
	// DRAPolicy scores the nodes for such pods on the GPUs DRA's allocator
	// will take there (first fit): "dra+<policy>" (gpushare.Policies()).
	// Unset: dra+fgdpack (see DefaultDRAPolicy).
	DRAPolicy string `json:"draPolicy,omitempty"`
	// TargetWorkload is the workload whose fragmentation the policies fgd,
	// fgdcpu, fgdpack and their dra+ forms descend, for Policy and
	// DRAPolicy alike: a JSON object inline (YAML in the configuration), in
	// the form of gpushare-extender --target-workload and `gpushare
	// typical-tasks`: {"resource": "memory", "tasks": [{"cpu": 4000,
	// "gpu_share": 8, "gpu_count": 1, "weight": 0.42}, ...]}. GpuShare's
	// pods ask GPU memory, so its resource should be "memory". Unset: one
	// whole-GPU task, which counts only partly used GPUs as lost, on GPU
	// memory for DRAPolicy and, as gpushare-extender has it, on GPU compute
	// for Policy.
	TargetWorkload json.RawMessage `json:"targetWorkload,omitempty"`
}

// draClasses is DRADeviceClasses with its default.
func (a *Args) draClasses() []string {
	if a.DRADeviceClasses == nil {
		return []string{DefaultDRADeviceClass, DefaultDRAWholeGPUClass}
	}
	return a.DRADeviceClasses
}

// draPolicy is DRAPolicy with its default.
func (a *Args) draPolicy() string {
	if a.DRAPolicy == "" {
		return DefaultDRAPolicy
	}
	return a.DRAPolicy
}

// sharedState is the GPU state of one kube-scheduler: the scheduler core,
// the informer handlers that feed it and the binds still settling. Every
// profile's plugin uses the same one, found by the informer factory the
// profiles share.
type sharedState struct {
	sched     *gpushare.Scheduler
	args      Args
	podLister corelisters.PodLister
	gate      eventGate
	// bound and caughtUp serve catchUp (events.go): the bound GPU pods
	// applied, by node, and the generation of each node's snapshot that
	// gpushare last caught up with (node name -> int64).
	bound    boundPods
	caughtUp sync.Map
	logger   klog.Logger
	// synced reports whether both informers' initial lists have been applied.
	synced func() bool
	// ctx ends when the scheduler stops: settling binds give up then.
	ctx context.Context
	// parsed caches the pods AddPod reads (nominated pods, again and again).
	parsed parsedPods
	// index: the library's node positions by name, for FitAll's verdicts.
	index nodeIndex
	// dra: the GPUs of gpushare-dra-driver's devices, for scoring pods
	// with DRA claims (dra.go); nil when those are not scored.
	dra *draState
	// classes: the DeviceClasses that map extended resources, as
	// kube-scheduler's DRA reads them (extended.go); nil when DRA is off.
	classes fwk.DeviceClassResolver
}

// nodeIndex maps node names to the library's node positions
// (gpushare.Scheduler.NodeNames) of one generation of the node order; it is
// read again when PreFilter meets another generation (nodes added or
// removed). Filter reads it without a lock.
type nodeIndex struct {
	current atomic.Pointer[nodePositions]
}

type nodePositions struct {
	generation uint64
	byName     map[string]int
}

// at brings the index to `generation`; false when the library has moved on
// meanwhile (a node added or removed since).
func (x *nodeIndex) at(generation uint64, sched *gpushare.Scheduler) bool {
	if cur := x.current.Load(); cur != nil && cur.generation == generation {
		return true
	}
	names, got, err := sched.NodeNames()
	if err != nil || got != generation {
		return false
	}
	byName := make(map[string]int, len(names))
	for i, name := range names {
		byName[name] = i
	}
	x.current.Store(&nodePositions{generation: got, byName: byName})
	return true
}

// size is the number of nodes of the index's generation.
func (x *nodeIndex) size() int {
	if cur := x.current.Load(); cur != nil {
		return len(cur.byName)
	}
	return 0
}

// position returns the node's position in generation `generation`.
func (x *nodeIndex) position(name string, generation uint64) (int, bool) {
	cur := x.current.Load()
	if cur == nil || cur.generation != generation {
		return 0, false
	}
	i, ok := cur.byName[name]
	return i, ok
}

var (
	statesMu sync.Mutex
	states   = map[informers.SharedInformerFactory]*sharedState{}
)

// Plugin is the GpuShare plugin of one profile.
type Plugin struct {
	*sharedState
	client kubernetes.Interface
	// recorder records the Events of failed confirmations (nil: none).
	recorder events.EventRecorder
	// firstBinder reports whether GpuShare is the profile's first bind
	// plugin (so its Bind runs); else PreBind writes the annotations with a
	// patch. Decided once, at the first call: the profile's plugin lists
	// are complete only after every plugin is made.
	firstBinder func() bool
	// nodeInfo reads a node of the scheduling cycle's snapshot (Reserve,
	// for a pod DRA may serve: extended.go).
	nodeInfo func(name string) (fwk.NodeInfo, error)
}

var (
	_ fwk.PreFilterPlugin     = &Plugin{}
	_ fwk.FilterPlugin        = &Plugin{}
	_ fwk.PreScorePlugin      = &Plugin{}
	_ fwk.ScorePlugin         = &Plugin{}
	_ fwk.ScoreExtensions     = &Plugin{}
	_ fwk.ReservePlugin       = &Plugin{}
	_ fwk.PreBindPlugin       = &Plugin{}
	_ fwk.BindPlugin          = &Plugin{}
	_ fwk.PostBindPlugin      = &Plugin{}
	_ fwk.EnqueueExtensions   = &Plugin{}
	_ fwk.PreFilterExtensions = &Plugin{}
)

// Name returns Name.
func (p *Plugin) Name() string { return Name }

// DecodeArgs reads the plugin's arguments and fills in the defaults.
func DecodeArgs(obj runtime.Object) (Args, error) {
	var args Args
	if err := frameworkruntime.DecodeInto(obj, &args); err != nil {
		return args, fmt.Errorf("%s args: %w", Name, err)
	}
	if args.ReservationTTLSeconds < 0 || args.SyncTimeoutSeconds < 0 {
		return args, fmt.Errorf("%s args: reservationTTLSeconds %d and syncTimeoutSeconds %d must not be negative",
			Name, args.ReservationTTLSeconds, args.SyncTimeoutSeconds)
	}
	if args.Policy != "" && !slices.Contains(gpushare.Policies(), args.Policy) {
		return args, fmt.Errorf("%s args: unknown policy %q; the policies are %s", Name, args.Policy,
			strings.Join(gpushare.Policies(), ", "))
	}
	if p := args.DRAPolicy; p != "" && (!strings.HasPrefix(p, draPolicyPrefix) || !slices.Contains(gpushare.Policies(), p)) {
		var known []string
		for _, name := range gpushare.Policies() {
			if strings.HasPrefix(name, draPolicyPrefix) {
				known = append(known, name)
			}
		}
		return args, fmt.Errorf("%s args: draPolicy %q is not a policy that scores nodes on the GPUs DRA's "+
			"allocator takes; those are %s", Name, p, strings.Join(known, ", "))
	}
	for _, c := range args.DRADeviceClasses {
		if c == "" {
			return args, fmt.Errorf("%s args: draDeviceClasses names an empty class", Name)
		}
	}
	if t := bytes.TrimSpace(args.TargetWorkload); len(t) == 0 || bytes.Equal(t, []byte("null")) {
		args.TargetWorkload = nil
	} else {
		if t[0] != '{' {
			return args, fmt.Errorf("%s args: targetWorkload must be an object, {\"resource\": \"memory\", "+
				"\"tasks\": [...]}, not %s", Name, t)
		}
		// The library's parser names a bad value; fgdpack reads every field.
		s, err := gpushare.New(gpushare.Options{Policy: "fgdpack", TargetWorkload: string(t)})
		if err != nil {
			msg := err.Error()
			var ge *gpushare.Error
			if errors.As(err, &ge) {
				msg = strings.TrimPrefix(ge.Message, "gs_scheduler_create: options->target_workload: ")
			}
			return args, fmt.Errorf("%s args: targetWorkload: %s", Name, msg)
		}
		s.Close()
	}
	return args, nil
}

// target is TargetWorkload as the binding takes it ("" when unset).
func (a *Args) target() string { return string(a.TargetWorkload) }

// New is the plugin's factory (app.WithPlugin(Name, New)). The first call
// of a scheduler (one per profile naming GpuShare) makes the shared GPU
// state and starts following the nodes and pods of handle's informers;
// later calls share it, and must give the same arguments. The state is
// closed when ctx ends.
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	args, err := DecodeArgs(obj)
	if err != nil {
		return nil, err
	}
	registerMetrics()
	logger := klog.FromContext(ctx).WithName(Name)
	st, err := sharedFor(ctx, args, h.SharedInformerFactory(), h.SharedDRAManager(), logger)
	if err != nil {
		return nil, err
	}
	p := &Plugin{sharedState: st, client: h.ClientSet(), recorder: h.EventRecorder()}
	p.nodeInfo = func(name string) (fwk.NodeInfo, error) {
		l := h.SnapshotSharedLister()
		if l == nil {
			return nil, errors.New("no snapshot of the nodes")
		}
		return l.NodeInfos().Get(name)
	}
	p.firstBinder = sync.OnceValue(func() bool {
		fw, ok := h.(framework.Framework)
		if !ok {
			return false
		}
		bind := fw.ListPlugins().Bind.Enabled
		first := len(bind) > 0 && bind[0].Name == Name
		if !first {
			logger.Info("GpuShare is not the first bind plugin: the GPU annotations are written "+
				"with a patch before the bind, one more API write per pod; enable GpuShare at "+
				"the bind extension point to bind with them in one write", "bind", bind)
		}
		return first
	})
	return p, nil
}

// sharedFor returns the state of the scheduler whose profiles share
// `informers`, made by the first call.
func sharedFor(ctx context.Context, args Args, informers informers.SharedInformerFactory,
	draManager fwk.SharedDRAManager, logger klog.Logger) (*sharedState, error) {
	statesMu.Lock()
	defer statesMu.Unlock()
	if st, ok := states[informers]; ok {
		if !reflect.DeepEqual(st.args, args) {
			return nil, fmt.Errorf("%s: every profile shares one GPU state, so its args must be the same "+
				"in every profile: %+v here, %+v in another", Name, args, st.args)
		}
		return st, nil
	}
	if args.ReservationTTLSeconds != 0 || args.SyncTimeoutSeconds != 0 {
		logger.Info("reservationTTLSeconds and syncTimeoutSeconds are ignored: reservations hold until "+
			"their binds settle, and GPU pods wait for the informers without blocking",
			"reservationTTLSeconds", args.ReservationTTLSeconds, "syncTimeoutSeconds", args.SyncTimeoutSeconds)
	}
	s, err := gpushare.New(gpushare.Options{Policy: args.Policy, ReservationTTL: gpushare.NoExpiry,
		TargetWorkload: args.target()})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	pods := informers.Core().V1().Pods()
	st := newSharedState(ctx, s, pods.Lister(), logger)
	st.args = args
	if draManager != nil {
		st.classes = draManager.DeviceClassResolver()
	}
	switch {
	case len(args.draClasses()) == 0:
	case draManager == nil:
		logger.Info("DynamicResourceAllocation is off in this kube-scheduler: pods with DRA claims are not scored")
	default:
		st.dra, err = newDRAState(draManagerSource{draManager}, args.draClasses(), args.draPolicy(),
			args.target(), logger.WithName("dra"))
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("%s: draPolicy: %w", Name, err)
		}
	}

	// Nodes first: a bound pod is restored only onto a node gpushare knows,
	// so the pod handler (whose registration replays every pod as ADDED)
	// is added once the nodes' initial list has been applied.
	nodeReg, err := informers.Core().V1().Nodes().Informer().AddEventHandler(st.nodeHandler())
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("%s: node event handler: %w", Name, err)
	}
	podInformer := pods.Informer() // Created now, so that the factory starts it.
	var podReg atomic.Pointer[cache.ResourceEventHandlerRegistration]
	st.synced = func() bool {
		r := podReg.Load()
		return nodeReg.HasSynced() && r != nil && (*r).HasSynced()
	}
	go func() {
		if !cache.WaitForCacheSync(ctx.Done(), nodeReg.HasSynced) {
			return
		}
		reg, err := podInformer.AddEventHandler(st.podHandler())
		if err != nil {
			logger.Error(err, "Cannot follow pods; GPU pods will not be scheduled")
			return
		}
		podReg.Store(&reg)
	}()
	states[informers] = st
	go func() {
		<-ctx.Done()
		statesMu.Lock()
		delete(states, informers)
		statesMu.Unlock()
		s.Close()
		if st.dra != nil {
			st.dra.close()
		}
	}()
	logger.Info("Plugin ready", "policy", args.Policy, "library", gpushare.Version(),
		"draDeviceClasses", args.draClasses(), "draPolicy", args.draPolicy(), "draScoring", st.dra != nil,
		"targetWorkload", targetLog(args.TargetWorkload))
	return st, nil
}

// targetLog is the target workload as logged: its JSON, or what stands in.
func targetLog(t json.RawMessage) string {
	if t == nil {
		return "default (one whole GPU)"
	}
	return string(t)
}

func newSharedState(ctx context.Context, s *gpushare.Scheduler, pods corelisters.PodLister,
	logger klog.Logger) *sharedState {
	return &sharedState{
		sched: s, podLister: pods, logger: logger, ctx: ctx,
		gate:   eventGate{last: map[string]gateEntry{}},
		synced: func() bool { return true },
	}
}

// newPlugin is a plugin over its own state, for tests.
func newPlugin(s *gpushare.Scheduler, client kubernetes.Interface, pods corelisters.PodLister,
	logger klog.Logger) *Plugin {
	return &Plugin{
		sharedState: newSharedState(context.Background(), s, pods, logger),
		client:      client,
		firstBinder: func() bool { return true },
	}
}

// ---- CycleState ---------------------------------------------------------------

const stateKey fwk.StateKey = Name

// cycleState is what one scheduling cycle knows of its pod.
type cycleState struct {
	pod *gpushare.Pod
	// verdicts: whether the pod fitted each node when PreFilter asked, by
	// the library's node position (gpushare.Scheduler.FitAll), positions
	// of node order `generation`; nil when not served. Read-only after
	// PreFilter.
	verdicts   []byte
	generation uint64
	// ranks by node name, from PreScore.
	ranks map[string]int64
	// extendedClass: the DeviceClass that maps the pod's nvidia.com/gpu,
	// so that DRA serves it on nodes without that resource (extended.go);
	// "" where none does. Read-only after PreFilter.
	extendedClass string
	// placement, from a successful Reserve; unsettled: its bind failed in
	// a way that may have bound the pod all the same, and reading it back
	// failed too (settle.go).
	mu        sync.Mutex
	placement *gpushare.Placement
	unsettled bool
	// handedOn: PreBind wrote the annotations and another plugin binds;
	// Unreserve then cannot know whether that bind applied (settle.go).
	handedOn bool
	// edits by node name: the pods kube-scheduler removed from the node
	// (preemption's victims) and added to it (pods nominated there) in this
	// state, through PreFilterExtensions. kube-scheduler clones the state
	// for each node it edits, so these are never shared between goroutines.
	edits map[string]*nodeEdits
}

// nodeEdits are the pods kube-scheduler removed from a node and added to it.
type nodeEdits struct {
	removed []string        // Pod IDs ("namespace/name")
	added   []*gpushare.Pod // parsed, in the order added
}

func (e *nodeEdits) empty() bool { return len(e.removed) == 0 && len(e.added) == 0 }

// Clone shares the pod (immutable), the verdicts (read-only) and the ranks
// (written once, in PreScore, before any reader), and copies the node edits; the placement
// belongs to the binding cycle of the original state.
func (c *cycleState) Clone() fwk.StateData {
	out := &cycleState{pod: c.pod, ranks: c.ranks, verdicts: c.verdicts, generation: c.generation,
		extendedClass: c.extendedClass}
	if len(c.edits) > 0 {
		out.edits = make(map[string]*nodeEdits, len(c.edits))
		for node, e := range c.edits {
			out.edits[node] = &nodeEdits{removed: slices.Clone(e.removed), added: slices.Clone(e.added)}
		}
	}
	return out
}

// editsOf returns the edits of `node`, made on first use.
func (c *cycleState) editsOf(node string) *nodeEdits {
	if c.edits == nil {
		c.edits = map[string]*nodeEdits{}
	}
	e := c.edits[node]
	if e == nil {
		e = &nodeEdits{}
		c.edits[node] = e
	}
	return e
}

func readState(state fwk.CycleState) *cycleState {
	data, err := state.Read(stateKey)
	if err != nil {
		return nil
	}
	c, _ := data.(*cycleState)
	return c
}

// ---- Filter ---------------------------------------------------------------------

// PreFilter reads the pod once; a pod that asks for no GPU is skipped (its
// Filter and Score do not run).
func (p *Plugin) PreFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod,
	_ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	if !RequestsGPUs(pod) {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	if !p.synced() {
		// Before the lists, gpushare does not know which GPUs bound pods
		// hold. The pod waits, without holding the scheduling goroutine:
		// an error sends it to kube-scheduler's backoff queue (1 s, then
		// longer), to be tried again once the lists are likely applied.
		return nil, fwk.AsStatus(fmt.Errorf("%s is still loading the cluster's nodes and pods", Name))
	}
	gp, err := parsePod(pod)
	if err != nil {
		// A malformed request (say, gpu-count 0) stays wrong until the pod changes.
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
	}
	if !gp.UsesGPUs() {
		gp.Close()
		return nil, fwk.NewStatus(fwk.Skip)
	}
	c := &cycleState{pod: gp, extendedClass: p.extendedClass(pod)}
	p.verdictsFor(c)
	state.Write(stateKey, c)
	return nil, nil
}

// verdictsFor asks the library whether the pod fits each node, in one call
// (served for pods whose fit depends on the nodes' resources alone; from a
// memo per shape of request), so that Filter answers most nodes with a
// lookup. Without an answer Filter asks node by node.
func (p *sharedState) verdictsFor(c *cycleState) {
	// Room for the nodes the index knows, and a few more: one call.
	n := p.index.size()
	verdicts, generation, served, err := p.sched.FitAll(c.pod, make([]byte, 0, n+n/8+8))
	if err != nil || !served || !p.index.at(generation, p.sched) {
		return
	}
	c.verdicts, c.generation = verdicts, generation
}

// PreFilterExtensions returns the plugin: kube-scheduler's preemption
// removes its candidate victims from a node (RemovePod) and adds back those
// it spares (AddPod), and before each Filter it adds the pods nominated to
// the node with a priority at least the pod's (AddPod). Filter then judges
// the node as those edits leave it (gpushare.Scheduler.FitAfter), on the
// GPUs: a nominated pod is placed first, and where it does not fit yet (its
// victims still terminate) the node is refused, so no pod of lower priority
// takes the GPUs it waits for.
func (p *Plugin) PreFilterExtensions() fwk.PreFilterExtensions { return p }

// AddPod adds `toAdd` to the node in `state`: a victim spared (it was
// removed) or a nominated pod. Pods without GPUs change nothing.
func (p *Plugin) AddPod(ctx context.Context, state fwk.CycleState, _ *v1.Pod, toAdd fwk.PodInfo,
	nodeInfo fwk.NodeInfo) *fwk.Status {
	c, node, pod := editArgs(state, toAdd, nodeInfo)
	if c == nil {
		return nil
	}
	e := c.editsOf(node)
	id := pod.Namespace + "/" + pod.Name
	if i := slices.Index(e.removed, id); i >= 0 {
		e.removed = slices.Delete(e.removed, i, i+1)
		return nil
	}
	gp, err := p.parsed.get(pod)
	if err != nil {
		// A pod gpushare cannot read holds no GPUs it gives out.
		klog.FromContext(ctx).V(4).Info("A nominated pod's GPU request is malformed; not counted",
			"pod", klog.KObj(pod), "err", err)
		return nil
	}
	if gp.UsesGPUs() {
		e.added = append(e.added, gp)
	}
	return nil
}

// RemovePod removes `toRemove` from the node in `state`: a candidate victim,
// or a nominated pod added before.
func (p *Plugin) RemovePod(ctx context.Context, state fwk.CycleState, _ *v1.Pod, toRemove fwk.PodInfo,
	nodeInfo fwk.NodeInfo) *fwk.Status {
	c, node, pod := editArgs(state, toRemove, nodeInfo)
	if c == nil {
		return nil
	}
	e := c.editsOf(node)
	id := pod.Namespace + "/" + pod.Name
	if i := slices.IndexFunc(e.added, func(a *gpushare.Pod) bool { return a.ID() == id }); i >= 0 {
		e.added = slices.Delete(e.added, i, i+1)
		return nil
	}
	if !slices.Contains(e.removed, id) {
		e.removed = append(e.removed, id)
	}
	return nil
}

// editArgs unpacks AddPod's and RemovePod's arguments; c is nil where there
// is nothing to edit (no GPU pod in the cycle, no node, a pod without GPUs).
func editArgs(state fwk.CycleState, info fwk.PodInfo, nodeInfo fwk.NodeInfo) (*cycleState, string, *v1.Pod) {
	c := readState(state)
	if c == nil || info == nil || nodeInfo == nil || nodeInfo.Node() == nil {
		return nil, "", nil
	}
	pod := info.GetPod()
	if pod == nil || !RequestsGPUs(pod) {
		return nil, "", nil
	}
	return c, nodeInfo.Node().Name, pod
}

// Filter says whether the pod's GPUs fit the node now.
func (p *Plugin) Filter(ctx context.Context, state fwk.CycleState, pod *v1.Pod,
	nodeInfo fwk.NodeInfo) *fwk.Status {
	c := readState(state)
	if c == nil {
		return fwk.AsStatus(fmt.Errorf("%s: no state for pod %s/%s (PreFilter did not run)", Name, pod.Namespace, pod.Name))
	}
	node := nodeInfo.Node()
	if node == nil {
		return fwk.AsStatus(errors.New("node not found"))
	}
	if c.servedByDRA(nodeInfo) {
		// DRA serves the pod's GPUs here (extended.go): whether it fits is
		// DynamicResources' and NodeResourcesFit's to say.
		return nil
	}
	if c.fitsByVerdict(node.Name, &p.index) {
		return nil
	}
	applied := p.gate.appliedCount()
	fit, err := p.judge(c, node)
	if err == nil && !fit.Fits {
		if testHookAfterJudge != nil {
			testHookAfterJudge()
		}
		// gpushare may be behind kube-scheduler's snapshot of the node
		// (see catchUp). Judge it again if catchUp, or an informer handler
		// meanwhile, applied any event: the handler may have applied the
		// very event catchUp came for, leaving it nothing to do.
		p.catchUp(nodeInfo)
		if p.gate.appliedCount() != applied {
			fit, err = p.judge(c, node)
		}
	}
	if err != nil {
		return fwk.AsStatus(err)
	}
	if fit.Fits {
		return nil
	}
	if fit.Unresolvable || !offersGPUs(node) {
		// No preemption makes it fit (no GPUs, a GPU model, too small
		// GPUs, sharing off, ...), and no release of other pods does:
		// only a change of the node, which the node events retry.
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fit.Reason)
	}
	return fwk.NewStatus(fwk.Unschedulable, fit.Reason)
}

// fitsByVerdict reports whether PreFilter's verdicts say the pod fits
// `node` and the cycle has no edits of it (preemption's removals, nominated
// pods), which the verdicts do not know. False means "ask": a refusal has
// to be judged anyway, for its reason and for catching up with the
// snapshot. A verdict may be older than an event applied since; Reserve
// judges the chosen node again, under the library's lock.
func (c *cycleState) fitsByVerdict(node string, index *nodeIndex) bool {
	if c.verdicts == nil {
		return false
	}
	if e := c.edits[node]; e != nil && !e.empty() {
		return false
	}
	i, ok := index.position(node, c.generation)
	return ok && i < len(c.verdicts) && c.verdicts[i] == 1
}

// testHookAfterJudge, when set (by tests), runs in Filter between a refusal
// and the catch-up that follows it.
var testHookAfterJudge func()

// judge fits the cycle's pod on a node, as the cycle's edits leave it.
func (p *Plugin) judge(c *cycleState, node *v1.Node) (gpushare.NodeFit, error) {
	if e := c.edits[node.Name]; e != nil && !e.empty() {
		return p.sched.FitAfter(c.pod, node.Name, e.removed, e.added)
	}
	// The common case, once per node and pod: Fit is the library's fastest
	// answer. Only a refusal asks whether preemption could help.
	var fit gpushare.NodeFit
	var err error
	fit.Fits, fit.Reason, err = p.sched.Fit(c.pod, node.Name)
	if err == nil && !fit.Fits && offersGPUs(node) {
		fit, err = p.sched.FitAfter(c.pod, node.Name, nil, nil)
	}
	return fit, err
}

// ---- Score ----------------------------------------------------------------------

// PreScore ranks every filtered node in one call: for a GPU pod, with the
// GPU state; for a pod whose claims ask gpushare-dra-driver's devices, with
// the DRA state (draPreScore); other pods skip Score.
func (p *Plugin) PreScore(ctx context.Context, state fwk.CycleState, pod *v1.Pod,
	nodes []fwk.NodeInfo) *fwk.Status {
	c := readState(state)
	if c == nil {
		return p.draPreScore(ctx, state, pod, nodes)
	}
	// Nodes where DRA serves the pod (extended.go) are not ranked on the
	// GPU state, which holds no GPU of theirs.
	names := make([]string, 0, len(nodes))
	var draNames []string
	for _, n := range nodes {
		node := n.Node()
		switch {
		case node == nil:
		case c.servedByDRA(n):
			draNames = append(draNames, node.Name)
		default:
			names = append(names, node.Name)
		}
	}
	draRanks := p.extendedDRARanks(ctx, pod, c, draNames)
	if len(names) == 0 && len(draNames) > 0 && draRanks == nil {
		return fwk.NewStatus(fwk.Skip) // DRA serves it on every node: no score of GpuShare's.
	}
	c.ranks = make(map[string]int64, len(names)+len(draRanks))
	if len(names) > 0 || len(draNames) == 0 {
		ranks, err := p.sched.Rank(c.pod, names)
		if err != nil {
			return fwk.AsStatus(err)
		}
		for i, name := range names {
			c.ranks[name] = ranks[i]
		}
	}
	for i, rank := range draRanks {
		c.ranks[draNames[i]] = rank
	}
	return nil
}

// Score is the node's rank from PreScore: 0..10, 10 best (0 where the pod no
// longer fits).
func (p *Plugin) Score(ctx context.Context, state fwk.CycleState, pod *v1.Pod,
	nodeInfo fwk.NodeInfo) (int64, *fwk.Status) {
	c := readState(state)
	node := nodeInfo.Node()
	if c == nil && node != nil {
		if rank, ok := draScore(state, node.Name); ok {
			return rank, nil
		}
	}
	if c == nil || c.ranks == nil {
		return 0, fwk.AsStatus(fmt.Errorf("%s: no ranks for pod %s/%s (PreScore did not run)", Name, pod.Namespace, pod.Name))
	}
	if node == nil {
		return 0, fwk.AsStatus(errors.New("node not found"))
	}
	return max(c.ranks[node.Name], 0), nil
}

// ScoreExtensions returns the plugin, for NormalizeScore.
func (p *Plugin) ScoreExtensions() fwk.ScoreExtensions { return p }

// MaxRank is the best rank gpushare gives.
const MaxRank = 10

// NormalizeScore scales the ranks 0..10 to the framework's 0..100.
func (p *Plugin) NormalizeScore(_ context.Context, _ fwk.CycleState, _ *v1.Pod,
	scores fwk.NodeScoreList) *fwk.Status {
	NormalizeRanks(scores)
	return nil
}

// NormalizeRanks maps ranks 0..MaxRank to 0..fwk.MaxNodeScore in place
// (values outside are clamped first).
func NormalizeRanks(scores fwk.NodeScoreList) {
	for i := range scores {
		r := min(max(scores[i].Score, 0), MaxRank)
		scores[i].Score = r * fwk.MaxNodeScore / MaxRank
	}
}

// ---- Reserve and bind -------------------------------------------------------------

// Reserve reserves the pod's GPUs on the chosen node.
func (p *Plugin) Reserve(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	c := readState(state)
	if c == nil {
		return nil
	}
	if dra, err := p.servedByDRAOn(c, nodeName); err != nil {
		// Not knowing which of DRA or the device plugin serves the pod
		// there, reserve nothing: the pod is tried again.
		return fwk.AsStatus(fmt.Errorf("%s: pod %s/%s on node %s: %w", Name, pod.Namespace, pod.Name, nodeName, err))
	} else if dra {
		klog.FromContext(ctx).V(4).Info("GPUs left to DRA", "pod", klog.KObj(pod), "node", nodeName,
			"deviceClass", c.extendedClass)
		return nil
	}
	placement, err := p.sched.Reserve(c.pod, nodeName)
	if err != nil {
		if errors.Is(err, gpushare.ErrResourceExhausted) || errors.Is(err, gpushare.ErrAlreadyExists) {
			// The state changed since Filter (an event, a concurrent bind).
			return fwk.NewStatus(fwk.Unschedulable, err.Error())
		}
		return fwk.AsStatus(err)
	}
	c.mu.Lock()
	c.placement = placement
	c.mu.Unlock()
	klog.FromContext(ctx).V(4).Info("GPUs reserved", "pod", klog.KObj(pod), "node", nodeName,
		"gpus", placement.GPUs, "unitsPerGPU", placement.MemoryPerGPU)
	return nil
}

// Unreserve forgets the reservation made by Reserve, if any: that one
// reservation (its token), so a late call cannot free a newer attempt's or
// another pod's of the same name. After a bind of unknown outcome it is
// left to settle (settle.go), which reads the pod back first. The cycle's
// pod is freed.
func (p *Plugin) Unreserve(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) {
	c := readState(state)
	if c == nil {
		return
	}
	c.mu.Lock()
	placement, unsettled := c.placement, c.unsettled || c.handedOn
	c.placement, c.unsettled, c.handedOn = nil, false, false
	c.mu.Unlock()
	switch {
	case placement == nil:
	case unsettled:
		go p.settle(pod, placement)
	default:
		// FailedPrecondition: confirmed (the pod is bound after all) or
		// reserved again; NotFound: released meanwhile. Nothing to undo then.
		// kube-scheduler then reports the un-assumed pod as deleted, and
		// the pods its GPUs may let fit are retried through the hints.
		err := p.sched.ForgetReservation(placement)
		if err != nil && !errors.Is(err, gpushare.ErrFailedPrecondition) && !errors.Is(err, gpushare.ErrNotFound) {
			klog.FromContext(ctx).Error(err, "Forgetting a reservation", "pod", klog.KObj(pod))
		}
	}
	c.pod.Close()
}

func (c *cycleState) reserved() *gpushare.Placement {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.placement
}

// preBindPreFlight is PreBindPreFlight's answer (preflight.go: its
// signature differs between Kubernetes releases): skip PreBind unless the
// pod has a reservation and GpuShare's Bind will not run first.
func (p *Plugin) preBindPreFlight(state fwk.CycleState) *fwk.Status {
	if c := readState(state); c != nil && c.reserved() != nil && !p.firstBinder() {
		return nil
	}
	return fwk.NewStatus(fwk.Skip)
}

// PreBind writes the placement's annotations on the pod with a JSON merge
// patch when another plugin binds (GpuShare is not the first bind plugin):
// the annotations must be on the pod before it is bound, for the device
// plugin.
func (p *Plugin) PreBind(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	c := readState(state)
	if c == nil || p.firstBinder() {
		return nil
	}
	placement := c.reserved()
	if placement == nil {
		return nil
	}
	if placement.Node != nodeName {
		return fwk.AsStatus(fmt.Errorf("%s: pod %s/%s reserved on node %s, bound to %s", Name,
			pod.Namespace, pod.Name, placement.Node, nodeName))
	}
	_, err := p.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType,
		placement.Patch, metav1.PatchOptions{})
	if err != nil {
		return fwk.AsStatus(fmt.Errorf("patching pod %s/%s with its GPU annotations: %w", pod.Namespace, pod.Name, err))
	}
	c.mu.Lock()
	c.handedOn = true
	c.mu.Unlock()
	return nil
}

// Bind binds a pod that GpuShare reserved GPUs for, with the placement's
// annotations (ALIYUN_COM_GPU_MEM_IDX, ..., what gpushare-extender writes)
// on the v1.Binding: the API server merges them into the pod in the same
// update that sets spec.nodeName. One write instead of a patch and a
// binding, and no moment when the pod is bound without them or annotated
// but not bound. Other pods are left to the next bind plugin (Skip), so
// GpuShare must come before DefaultBinder at the bind extension point (see
// deploy/scheduler-plugin/scheduler-config.yaml).
func (p *Plugin) Bind(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	c := readState(state)
	if c == nil {
		return fwk.NewStatus(fwk.Skip)
	}
	placement := c.reserved()
	if placement == nil {
		return fwk.NewStatus(fwk.Skip)
	}
	if placement.Node != nodeName {
		return fwk.AsStatus(fmt.Errorf("%s: pod %s/%s reserved on node %s, bound to %s", Name,
			pod.Namespace, pod.Name, placement.Node, nodeName))
	}
	annotations, err := placement.Annotations()
	if err != nil {
		return fwk.AsStatus(err)
	}
	binding := &v1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
			Annotations: annotations},
		Target: v1.ObjectReference{Kind: "Node", Name: nodeName},
	}
	err = p.client.CoreV1().Pods(pod.Namespace).Bind(ctx, binding, metav1.CreateOptions{})
	if err == nil {
		return nil
	}
	err = fmt.Errorf("binding pod %s/%s with its GPU annotations: %w", pod.Namespace, pod.Name, err)
	if !mayHaveApplied(err) {
		return fwk.AsStatus(err)
	}
	// The API server may have bound the pod all the same: what it holds decides.
	switch p.readBack(pod, nodeName) {
	case boundHere:
		klog.FromContext(ctx).Info("The bind reported an error, but the pod is bound", "pod",
			klog.KObj(pod), "node", nodeName, "err", err)
		return nil
	case outcomeUnknown:
		c.mu.Lock()
		c.unsettled = true
		c.mu.Unlock()
	}
	return fwk.AsStatus(err)
}

// PostBind confirms the reservation: the pod is bound. (The pod's informer
// event would confirm it too; this does not wait for it.) A confirmation
// that fails (the reservation was taken from the pod while it bound: it
// should never happen) is an Event on the pod and a metric, and the
// informer's event of the bound pod restores its placement if it can.
func (p *Plugin) PostBind(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) {
	c := readState(state)
	if c == nil {
		return
	}
	if placement := c.reserved(); placement != nil {
		if err := p.sched.ConfirmReservation(placement); err != nil {
			p.confirmFailed(ctx, pod, nodeName, err)
		}
	}
	c.pod.Close()
}
