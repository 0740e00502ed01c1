package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"gpushare.dev/go/gpushare"
)

func TestDecodeArgs(t *testing.T) {
	args, err := DecodeArgs(nil)
	if err != nil || !reflect.DeepEqual(args, Args{}) {
		t.Fatalf("defaults: %+v, %v", args, err)
	}
	args, err = DecodeArgs(&runtime.Unknown{Raw: []byte(`{"policy":"spread","reservationTTLSeconds":5}`)})
	if err != nil || args.Policy != "spread" || args.ReservationTTLSeconds != 5 {
		t.Fatalf("JSON: %+v, %v", args, err)
	}
	args, err = DecodeArgs(&runtime.Unknown{Raw: []byte("policy: fgdpack\n"), ContentType: runtime.ContentTypeYAML})
	if err != nil || args.Policy != "fgdpack" {
		t.Fatalf("YAML: %+v, %v", args, err)
	}
	if _, err := DecodeArgs(&runtime.Unknown{Raw: []byte(`{"reservationTTLSeconds":-1}`)}); err == nil {
		t.Error("a negative TTL is accepted")
	}
	if _, err := DecodeArgs(&v1.Pod{}); err == nil {
		t.Error("args of another type are accepted")
	}
}

func TestNormalizeRanks(t *testing.T) {
	scores := fwk.NodeScoreList{{Name: "a", Score: -1}, {Name: "b", Score: 0},
		{Name: "c", Score: 5}, {Name: "d", Score: 10}, {Name: "e", Score: 12}}
	NormalizeRanks(scores)
	want := []int64{0, 0, 50, 100, 100}
	for i, s := range scores {
		if s.Score != want[i] {
			t.Errorf("%s: %d, want %d", s.Name, s.Score, want[i])
		}
	}
}

func TestEventGate(t *testing.T) {
	g := eventGate{last: map[string]gateEntry{}}
	ran := 0
	step := func(rv string, deleted, final bool) bool {
		return g.apply("pod/ns/p", rv, deleted, final, func() { ran++ })
	}
	steps := []struct {
		rv             string
		deleted, final bool
		want           bool
	}{
		{"10", false, false, true},  // ADDED
		{"10", false, false, false}, // the same event again (a hint applied it)
		{"12", false, false, true},  // newer
		{"11", false, false, false}, // older, still queued in the handler
		{"12", true, false, true},   // DELETED with the last state's version (a hint)
		{"12", false, false, false}, // a stale MODIFIED after it
		{"12", true, true, false},   // the handler's DELETED: a duplicate, and the end
		{"3", false, false, true},   // a new pod of that name starts afresh
		{"x", false, false, true},   // unparseable: always applied
	}
	for i, s := range steps {
		if got := step(s.rv, s.deleted, s.final); got != s.want {
			t.Errorf("step %d %+v: applied %v", i, s, got)
		}
	}
	if ran != 5 {
		t.Errorf("ran %d times, want 5", ran)
	}
}

// ---- Objects ----------------------------------------------------------------------

func gpuNode(name string, gpus, unitsPerGPU int64) *v1.Node {
	capacity := v1.ResourceList{
		v1.ResourceCPU:    resource.MustParse("64"),
		v1.ResourceMemory: resource.MustParse("256Gi"),
		v1.ResourcePods:   resource.MustParse("110"),
	}
	if gpus > 0 {
		capacity[GPUMemResource] = *resource.NewQuantity(gpus*unitsPerGPU, resource.DecimalSI)
		capacity[GPUCountResource] = *resource.NewQuantity(gpus, resource.DecimalSI)
		capacity[WholeGPUResource] = *resource.NewQuantity(gpus, resource.DecimalSI)
	}
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1",
			Labels: map[string]string{"gpushare": "true", "kubernetes.io/hostname": name}},
		Status: v1.NodeStatus{Capacity: capacity, Allocatable: capacity.DeepCopy()},
	}
}

func gpuPod(name string, units int64) *v1.Pod {
	limits := v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")}
	if units > 0 {
		limits[GPUMemResource] = *resource.NewQuantity(units, resource.DecimalSI)
	}
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name),
			ResourceVersion: "5"},
		Spec: v1.PodSpec{
			SchedulerName: "gpushare-scheduler",
			Containers: []v1.Container{{Name: "main", Image: "registry.invalid/cuda",
				Resources: v1.ResourceRequirements{Limits: limits, Requests: limits}}},
		},
		Status: v1.PodStatus{Phase: v1.PodPending},
	}
}

func nodeInfo(n *v1.Node) fwk.NodeInfo {
	ni := framework.NewNodeInfo()
	ni.SetNode(n)
	return ni
}

type fixture struct {
	p       *Plugin
	s       *gpushare.Scheduler
	client  *fake.Clientset
	indexer cache.Indexer
	nodes   map[string]*v1.Node
}

func newFixture(t *testing.T, pods ...*v1.Pod) *fixture {
	t.Helper()
	s, err := gpushare.New(gpushare.Options{ReservationTTL: gpushare.NoExpiry})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	objs := make([]runtime.Object, len(pods))
	for i, p := range pods {
		objs[i] = p
	}
	client := fake.NewClientset(objs...)
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, p := range pods {
		if err := indexer.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	f := &fixture{
		p: newPlugin(s, client, corelisters.NewPodLister(indexer), klog.Background()),
		s: s, client: client, indexer: indexer,
		nodes: map[string]*v1.Node{
			"big":   gpuNode("big", 2, 16),
			"small": gpuNode("small", 1, 8),
			"cpu":   gpuNode("cpu", 0, 0),
		},
	}
	for _, n := range f.nodes {
		f.p.nodeHandler().OnAdd(n, true)
	}
	return f
}

func (f *fixture) filter(t *testing.T, state fwk.CycleState, pod *v1.Pod) map[string]*fwk.Status {
	t.Helper()
	out := map[string]*fwk.Status{}
	for name, n := range f.nodes {
		out[name] = f.p.Filter(context.Background(), state, pod, nodeInfo(n))
	}
	return out
}

// ---- A scheduling cycle -------------------------------------------------------

func TestSchedulingCycle(t *testing.T) {
	ctx := context.Background()
	pod := gpuPod("train", 12)
	f := newFixture(t, pod)

	// A pod without GPUs is skipped.
	web := gpuPod("web", 0)
	if _, st := f.p.PreFilter(ctx, framework.NewCycleState(), web, nil); !st.IsSkip() {
		t.Fatalf("PreFilter of a CPU pod: %v", st)
	}

	state := framework.NewCycleState()
	if _, st := f.p.PreFilter(ctx, state, pod, nil); !st.IsSuccess() {
		t.Fatalf("PreFilter: %v", st)
	}
	filtered := f.filter(t, state, pod)
	if !filtered["big"].IsSuccess() {
		t.Errorf("Filter big: %v", filtered["big"])
	}
	// 12 units on an 8-unit GPU: no preemption helps either.
	if st := filtered["small"]; st.Code() != fwk.UnschedulableAndUnresolvable || st.Message() == "" {
		t.Errorf("Filter small: %v, want UnschedulableAndUnresolvable with a reason", st)
	}
	// No preemption gives a node GPUs.
	if st := filtered["cpu"]; st.Code() != fwk.UnschedulableAndUnresolvable || st.Message() == "" {
		t.Errorf("Filter cpu: %v, want UnschedulableAndUnresolvable with a reason", st)
	}

	feasible := []fwk.NodeInfo{nodeInfo(f.nodes["big"])}
	if st := f.p.PreScore(ctx, state, pod, feasible); !st.IsSuccess() {
		t.Fatalf("PreScore: %v", st)
	}
	score, st := f.p.Score(ctx, state, pod, feasible[0])
	if !st.IsSuccess() || score < 0 || score > MaxRank {
		t.Fatalf("Score = %d, %v", score, st)
	}
	scores := fwk.NodeScoreList{{Name: "big", Score: score}}
	if st := f.p.ScoreExtensions().NormalizeScore(ctx, state, pod, scores); !st.IsSuccess() ||
		scores[0].Score != score*10 {
		t.Fatalf("NormalizeScore: %v, %v", scores, st)
	}

	if st := f.p.Reserve(ctx, state, pod, "big"); !st.IsSuccess() {
		t.Fatalf("Reserve: %v", st)
	}
	// Bind: one Binding that carries the annotations (the API server merges
	// them into the pod); a pod GpuShare did not reserve is left to the next
	// bind plugin.
	var bindings []*v1.Binding
	f.client.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "binding" {
			return false, nil, nil
		}
		b := action.(k8stesting.CreateAction).GetObject().(*v1.Binding)
		bindings = append(bindings, b)
		return true, b, nil
	})
	if st := f.p.Bind(ctx, framework.NewCycleState(), gpuPod("other", 1), "big"); st.Code() != fwk.Skip {
		t.Fatalf("Bind of a pod without a reservation: %v, want Skip", st)
	}
	if st := f.p.Bind(ctx, state, pod, "small"); st.IsSuccess() {
		t.Fatalf("Bind to another node than reserved: %v", st)
	}
	if st := f.p.Bind(ctx, state, pod, "big"); !st.IsSuccess() {
		t.Fatalf("Bind: %v", st)
	}
	if len(bindings) != 1 || bindings[0].Target.Name != "big" || bindings[0].Name != "train" ||
		bindings[0].UID != pod.UID {
		t.Fatalf("bindings: %+v", bindings)
	}
	ann := bindings[0].Annotations
	if ann[GPUIndexAnnotation] == "" || ann["ALIYUN_COM_GPU_MEM_POD"] != "12" || ann[AllocationAnnotation] == "" {
		t.Fatalf("annotations on the Binding: %v", ann)
	}
	patched, err := f.client.CoreV1().Pods("default").Get(ctx, "train", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	patched.Annotations = ann // What the API server does with the Binding's annotations.
	f.p.PostBind(ctx, state, pod, "big")
	held, err := f.s.Placement("default/train")
	if err != nil || held.Node != "big" {
		t.Fatalf("placement after PostBind: %+v, %v", held, err)
	}
	// Confirmed: an Unreserve now (idempotent, maybe without Reserve) keeps it.
	f.p.Unreserve(ctx, state, pod, "big")
	if _, err := f.s.Placement("default/train"); err != nil {
		t.Fatalf("Unreserve dropped a confirmed placement: %v", err)
	}

	// The same pod, bound, through the informer: nothing new. Then it ends.
	bound := patched.DeepCopy()
	bound.Spec.NodeName = "big"
	bound.ResourceVersion = "7"
	f.p.podHandler().OnUpdate(patched, bound)
	second := gpuPod("second", 12)
	state2 := framework.NewCycleState()
	if _, st := f.p.PreFilter(ctx, state2, second, nil); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := f.p.Filter(ctx, state2, second, nodeInfo(f.nodes["big"])); !st.IsSuccess() {
		t.Fatalf("the other GPU of big: %v", st)
	}
	if st := f.p.Reserve(ctx, state2, second, "big"); !st.IsSuccess() {
		t.Fatal(st)
	}
	third := gpuPod("third", 12)
	state3 := framework.NewCycleState()
	if _, st := f.p.PreFilter(ctx, state3, third, nil); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := f.p.Filter(ctx, state3, third, nodeInfo(f.nodes["big"])); st.Code() != fwk.Unschedulable {
		t.Fatalf("big is full: %v", st)
	}
	// The bind of `second` fails: Unreserve frees its GPU.
	f.p.Unreserve(ctx, state2, second, "big")
	if _, err := f.s.Placement("default/second"); !errors.Is(err, gpushare.ErrNotFound) {
		t.Fatalf("after Unreserve: %v", err)
	}
	if st := f.p.Filter(ctx, state3, third, nodeInfo(f.nodes["big"])); !st.IsSuccess() {
		t.Fatalf("after Unreserve: %v", st)
	}

	f.p.podHandler().OnDelete(bound)
	if _, err := f.s.Placement("default/train"); !errors.Is(err, gpushare.ErrNotFound) {
		t.Fatalf("after the pod's DELETED: %v", err)
	}
	if err := f.s.Check(); err != nil {
		t.Fatal(err)
	}
}

// Where another plugin binds (GpuShare is not the first bind plugin), PreBind
// patches the annotations onto the pod before the bind.
func TestPreBindPatchesWhenAnotherPluginBinds(t *testing.T) {
	ctx := context.Background()
	pod := gpuPod("infer", 4)
	f := newFixture(t, pod)
	state := framework.NewCycleState()
	if _, st := f.p.PreFilter(ctx, state, pod, nil); !st.IsSuccess() {
		t.Fatalf("PreFilter: %v", st)
	}
	// First binder: PreBind has nothing to do.
	if st := f.p.preBindPreFlight(state); !st.IsSkip() {
		t.Fatalf("PreBindPreFlight before Reserve: %v, want Skip", st)
	}
	if st := f.p.Reserve(ctx, state, pod, "big"); !st.IsSuccess() {
		t.Fatalf("Reserve: %v", st)
	}
	if st := f.p.preBindPreFlight(state); !st.IsSkip() {
		t.Fatalf("PreBindPreFlight as the first binder: %v, want Skip", st)
	}
	f.p.firstBinder = func() bool { return false }
	if st := f.p.preBindPreFlight(state); !st.IsSuccess() {
		t.Fatalf("PreBindPreFlight behind another binder: %v", st)
	}
	if st := f.p.PreBind(ctx, state, pod, "big"); !st.IsSuccess() {
		t.Fatalf("PreBind: %v", st)
	}
	patched, err := f.client.CoreV1().Pods("default").Get(ctx, "infer", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ann := patched.Annotations; ann[GPUIndexAnnotation] == "" || ann["ALIYUN_COM_GPU_MEM_POD"] != "4" {
		t.Fatalf("annotations after PreBind: %v", ann)
	}
}

func TestBadPod(t *testing.T) {
	pod := gpuPod("bad", 4)
	pod.Labels = map[string]string{string(GPUCountResource): "0"}
	f := newFixture(t, pod)
	_, st := f.p.PreFilter(context.Background(), framework.NewCycleState(), pod, nil)
	if st.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(st.Message(), "gpu-count") {
		t.Fatalf("PreFilter: %v", st)
	}
}

// Before the informers' lists are applied a GPU pod waits without holding
// the scheduling goroutine: an error, which kube-scheduler retries after
// its backoff.
func TestBeforeTheListsAPodWaitsWithoutBlocking(t *testing.T) {
	f := newFixture(t)
	f.p.synced = func() bool { return false }
	start := time.Now()
	_, st := f.p.PreFilter(context.Background(), framework.NewCycleState(), gpuPod("p", 4), nil)
	if st.Code() != fwk.Error || !strings.Contains(st.Message(), "loading") {
		t.Fatalf("PreFilter before the informers synced: %v", st)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("PreFilter waited %v", d)
	}
	f.p.synced = func() bool { return true }
	if _, st := f.p.PreFilter(context.Background(), framework.NewCycleState(), gpuPod("p", 4), nil); !st.IsSuccess() {
		t.Fatalf("PreFilter once synced: %v", st)
	}
}

// A bind that fails after the API server may have applied it: the pod is
// read back before anything is freed.
func TestABindOfUnknownOutcomeIsReadBack(t *testing.T) {
	ctx := context.Background()
	timeout := apierrors.NewServerTimeout(v1.Resource("pods"), "create", 1)
	for _, tc := range []struct {
		name      string
		applied   bool // The API server bound the pod before the error.
		bindErr   error
		wantBound bool
		wantHeld  bool // After Unreserve (when the bind failed).
	}{
		{name: "applied", applied: true, bindErr: timeout, wantBound: true, wantHeld: true},
		{name: "not-applied", bindErr: timeout, wantHeld: false},
		{name: "conflict-bound-by-an-earlier-try", applied: true,
			bindErr: apierrors.NewConflict(v1.Resource("pods"), "p", errors.New("bound")), wantBound: true, wantHeld: true},
		{name: "refused", applied: true, /* never happens; the refusal is believed */
			bindErr: apierrors.NewForbidden(v1.Resource("pods"), "p", errors.New("no")), wantHeld: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := gpuPod("p", 8)
			f := newFixture(t, pod)
			state := f.cycle(t, pod)
			if st := f.p.Reserve(ctx, state, pod, "small"); !st.IsSuccess() {
				t.Fatal(st)
			}
			f.client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if a.GetSubresource() != "binding" {
					return false, nil, nil
				}
				if tc.applied {
					bound := pod.DeepCopy()
					bound.Spec.NodeName = "small"
					if err := f.client.Tracker().Update(v1.SchemeGroupVersion.WithResource("pods"), bound, "default"); err != nil {
						t.Fatal(err)
					}
				}
				return true, nil, tc.bindErr
			})
			st := f.p.Bind(ctx, state, pod, "small")
			if st.IsSuccess() != tc.wantBound {
				t.Fatalf("Bind: %v, want success %v", st, tc.wantBound)
			}
			if st.IsSuccess() {
				f.p.PostBind(ctx, state, pod, "small")
			} else {
				f.p.Unreserve(ctx, state, pod, "small")
			}
			_, err := f.s.Placement("default/p")
			if held := err == nil; held != tc.wantHeld {
				t.Fatalf("placement held %v (%v), want %v", held, err, tc.wantHeld)
			}
		})
	}
}

// A bind of unknown outcome whose pod cannot be read back either keeps its
// GPUs reserved until the pod answers.
func TestAnUnreadableBindStaysReservedUntilThePodAnswers(t *testing.T) {
	ctx := context.Background()
	pod := gpuPod("p", 8)
	f := newFixture(t, pod)
	state := f.cycle(t, pod)
	if st := f.p.Reserve(ctx, state, pod, "small"); !st.IsSuccess() {
		t.Fatal(st)
	}
	var readable atomic.Bool
	f.client.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if readable.Load() {
			return false, nil, nil
		}
		return true, nil, errors.New("connection refused")
	})
	f.client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "binding" {
			return false, nil, nil
		}
		bound := pod.DeepCopy()
		bound.Spec.NodeName = "small"
		if err := f.client.Tracker().Update(v1.SchemeGroupVersion.WithResource("pods"), bound, "default"); err != nil {
			t.Fatal(err)
		}
		return true, nil, errors.New("http2: client connection lost")
	})
	if st := f.p.Bind(ctx, state, pod, "small"); st.IsSuccess() {
		t.Fatal("Bind succeeded")
	}
	f.p.Unreserve(ctx, state, pod, "small")
	// Still held: another pod asking the GPU does not fit.
	other := gpuPod("other", 8)
	if st := f.p.Filter(ctx, f.cycle(t, other), other, nodeInfo(f.nodes["small"])); st.Code() != fwk.Unschedulable {
		t.Fatalf("the unsettled bind's GPU: %v", st)
	}
	registerMetrics()
	bound := func() float64 {
		v, err := testutil.GetCounterMetricValue(settledBinds.WithLabelValues("bound"))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	before := bound()
	readable.Store(true)
	// Read back as bound (1 s after the first try): confirmed, still held.
	deadline := time.Now().Add(10 * time.Second)
	for bound() == before {
		if time.Now().After(deadline) {
			t.Fatal("the unsettled bind was not read back")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := f.s.Forget("default/p"); !errors.Is(err, gpushare.ErrFailedPrecondition) {
		t.Fatalf("after settling the reservation is not confirmed: %v", err)
	}
	if st := f.p.Filter(ctx, f.cycle(t, other), other, nodeInfo(f.nodes["small"])); st.Code() != fwk.Unschedulable {
		t.Fatalf("after settling: %v", st)
	}
	if err := f.s.Check(); err != nil {
		t.Fatal(err)
	}
}

// A late Unreserve of an older pod of the same name frees nothing of the
// newer pod's reservation.
func TestALateUnreserveKeepsANamesakesReservation(t *testing.T) {
	ctx := context.Background()
	old := gpuPod("p", 8)
	f := newFixture(t, old)
	oldState := f.cycle(t, old)
	if st := f.p.Reserve(ctx, oldState, old, "small"); !st.IsSuccess() {
		t.Fatal(st)
	}
	// The old pod is deleted (its reservation released), a new one of the
	// same name reserved.
	f.p.podHandler().OnDelete(old)
	fresh := gpuPod("p", 8)
	fresh.UID = "uid-p-2"
	newState := f.cycle(t, fresh)
	if st := f.p.Reserve(ctx, newState, fresh, "small"); !st.IsSuccess() {
		t.Fatal(st)
	}
	f.p.Unreserve(ctx, oldState, old, "small")
	if _, err := f.s.Placement("default/p"); err != nil {
		t.Fatalf("the late Unreserve freed the new pod's GPUs: %v", err)
	}
	other := gpuPod("other", 8)
	if st := f.p.Filter(ctx, f.cycle(t, other), other, nodeInfo(f.nodes["small"])); st.Code() != fwk.Unschedulable {
		t.Fatalf("small after the late Unreserve: %v", st)
	}
}

// Every profile of one scheduler shares one GPU state; different args are
// refused.
func TestProfilesShareOneState(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory := informers.NewSharedInformerFactory(fake.NewClientset(), 0)
	a, err := sharedFor(ctx, Args{Policy: "binpack"}, factory, nil, klog.Background())
	if err != nil {
		t.Fatal(err)
	}
	b, err := sharedFor(ctx, Args{Policy: "binpack"}, factory, nil, klog.Background())
	if err != nil || a != b {
		t.Fatalf("second profile: %p %p, %v", a, b, err)
	}
	if _, err := sharedFor(ctx, Args{Policy: "spread"}, factory, nil, klog.Background()); err == nil ||
		!strings.Contains(err.Error(), "same") {
		t.Fatalf("different args: %v", err)
	}
	other := informers.NewSharedInformerFactory(fake.NewClientset(), 0)
	c, err := sharedFor(ctx, Args{}, other, nil, klog.Background())
	if err != nil || c == a {
		t.Fatalf("another scheduler: %p %p, %v", c, a, err)
	}
}

// A restart: bound pods with bind annotations are restored from the pod
// informer's replay, once the nodes are known.
func TestRestore(t *testing.T) {
	f := newFixture(t)
	state := framework.NewCycleState()
	pod := gpuPod("old", 8)
	if _, st := f.p.PreFilter(context.Background(), state, pod, nil); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := f.p.Reserve(context.Background(), state, pod, "small"); !st.IsSuccess() {
		t.Fatal(st)
	}
	placement := readState(state).reserved()
	var patch struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	if err := json.Unmarshal(placement.Patch, &patch); err != nil {
		t.Fatal(err)
	}
	bound := pod.DeepCopy()
	bound.Annotations = patch.Metadata.Annotations
	bound.Spec.NodeName = "small"
	bound.Status.Phase = v1.PodRunning

	restarted := newFixture(t, bound)
	restarted.p.podHandler().OnAdd(bound, true)
	got, err := restarted.s.Placement("default/old")
	if err != nil || got.Node != "small" {
		t.Fatalf("restored: %+v, %v", got, err)
	}
}

func TestHints(t *testing.T) {
	gone := gpuPod("gone", 8)
	alive := gpuPod("alive", 8)
	f := newFixture(t, alive)
	ctx := context.Background()
	events, err := f.p.EventsToRegister(ctx)
	if err != nil || len(events) != 3 {
		t.Fatalf("EventsToRegister: %v, %v", events, err)
	}
	logger := klog.Background()
	pending := gpuPod("pending", 16)

	if h, _ := f.p.nodeHint(logger, pending, nil, gpuNode("new", 1, 16)); h != fwk.Queue {
		t.Errorf("a GPU node added: %v", h)
	}
	if _, err := f.s.Placement("x"); !errors.Is(err, gpushare.ErrNotFound) {
		t.Fatal(err)
	}
	if fits, _, _ := f.s.Fit(mustParse(t, pending), "new"); !fits {
		t.Error("the hint did not add the node")
	}
	if h, _ := f.p.nodeHint(logger, pending, nil, gpuNode("cpu2", 0, 0)); h != fwk.QueueSkip {
		t.Errorf("a node without GPUs added: %v", h)
	}

	// Two pods hold GPUs; one is deleted for real, the other only unassumed.
	for _, pod := range []*v1.Pod{gone, alive} {
		state := framework.NewCycleState()
		if _, st := f.p.PreFilter(ctx, state, pod, nil); !st.IsSuccess() {
			t.Fatal(st)
		}
		if st := f.p.Reserve(ctx, state, pod, "big"); !st.IsSuccess() {
			t.Fatal(st)
		}
		f.p.PostBind(ctx, state, pod, "big")
	}
	goneBound := gone.DeepCopy()
	goneBound.Spec.NodeName = "big"
	goneBound.ResourceVersion = "9"
	if h, _ := f.p.podDeletedHint(logger, pending, goneBound, nil); h != fwk.Queue {
		t.Errorf("a GPU pod deleted: %v", h)
	}
	if _, err := f.s.Placement("default/gone"); !errors.Is(err, gpushare.ErrNotFound) {
		t.Errorf("the hint did not release the deleted pod: %v", err)
	}
	aliveBound := alive.DeepCopy()
	aliveBound.Spec.NodeName = "big"
	if h, _ := f.p.podDeletedHint(logger, pending, aliveBound, nil); h != fwk.Queue {
		t.Errorf("a GPU pod unassumed: %v", h)
	}
	if _, err := f.s.Placement("default/alive"); err != nil {
		t.Errorf("the hint released a pod that still exists: %v", err)
	}
	if h, _ := f.p.podDeletedHint(logger, pending, gpuPod("web", 0), nil); h != fwk.QueueSkip {
		t.Errorf("a CPU pod deleted: %v", h)
	}
	// The handler's own (late, older) events of the deleted pod change nothing.
	f.p.podHandler().OnUpdate(gone, goneBound)
	if _, err := f.s.Placement("default/gone"); !errors.Is(err, gpushare.ErrNotFound) {
		t.Errorf("a stale event restored the deleted pod: %v", err)
	}

	if h, _ := selfUpdatedHint(logger, pending, pending, pending); h != fwk.Queue {
		t.Errorf("the pod's own update: %v", h)
	}
	if h, _ := selfUpdatedHint(logger, pending, alive, alive); h != fwk.QueueSkip {
		t.Errorf("another pod's update: %v", h)
	}
}

func mustParse(t *testing.T, pod *v1.Pod) *gpushare.Pod {
	t.Helper()
	b, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	p, err := gpushare.ParsePod(b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func TestPredicates(t *testing.T) {
	if RequestsGPUs(gpuPod("web", 0)) || !RequestsGPUs(gpuPod("p", 1)) {
		t.Error("RequestsGPUs")
	}
	whole := gpuPod("whole", 0)
	whole.Spec.Containers[0].Resources.Limits[WholeGPUResource] = resource.MustParse("1")
	if !RequestsGPUs(whole) {
		t.Error("RequestsGPUs: whole GPUs")
	}
	annotated := gpuPod("a", 0)
	annotated.Annotations = map[string]string{GPUIndexAnnotation: "0"}
	if !MayHoldGPUs(annotated) || MayHoldGPUs(gpuPod("web", 0)) {
		t.Error("MayHoldGPUs")
	}
	if !offersGPUs(gpuNode("g", 1, 8)) || offersGPUs(gpuNode("c", 0, 0)) {
		t.Error("offersGPUs")
	}
}

// cycle runs PreFilter for a pod: the start of its scheduling cycle.
func (f *fixture) cycle(t *testing.T, pod *v1.Pod) fwk.CycleState {
	t.Helper()
	state := framework.NewCycleState()
	if _, st := f.p.PreFilter(context.Background(), state, pod, nil); !st.IsSuccess() {
		t.Fatalf("PreFilter %s: %v", pod.Name, st)
	}
	return state
}

// bindOn reserves a pod's GPUs on a node in a scheduling cycle and returns
// the pod as the informer then reports it: bound, with the annotations.
func (f *fixture) bindOn(t *testing.T, pod *v1.Pod, node string) *v1.Pod {
	t.Helper()
	ctx := context.Background()
	state := f.cycle(t, pod)
	if st := f.p.Reserve(ctx, state, pod, node); !st.IsSuccess() {
		t.Fatal(st)
	}
	var patch struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	if err := json.Unmarshal(readState(state).reserved().Patch, &patch); err != nil {
		t.Fatal(err)
	}
	f.p.PostBind(ctx, state, pod, node)
	bound := pod.DeepCopy()
	bound.Annotations = patch.Metadata.Annotations
	bound.Spec.NodeName = node
	bound.Status.Phase = v1.PodRunning
	bound.ResourceVersion = "6"
	if err := f.indexer.Add(bound); err != nil {
		t.Fatal(err)
	}
	f.p.podHandler().OnUpdate(pod, bound)
	return bound
}

// snapshot is kube-scheduler's NodeInfo of a node with these pods.
func snapshot(t *testing.T, n *v1.Node, pods ...*v1.Pod) fwk.NodeInfo {
	t.Helper()
	ni := framework.NewNodeInfo()
	ni.SetNode(n)
	for _, pod := range pods {
		ni.AddPod(pod)
	}
	return ni
}

// kube-scheduler retries a pod rejected by another plugin (NodeResourcesFit)
// after an event without asking GpuShare's hint, possibly before the
// plugin's handler applied the event. Filter then catches up with the
// snapshot it is given, which has the event, instead of refusing on the old
// state.
func TestFilterCatchesUpWithTheSnapshot(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)

	// A node in kube-scheduler's snapshot whose ADDED gpushare has not
	// applied yet.
	twelve := gpuPod("twelve", 12)
	fresh := gpuNode("fresh", 1, 16)
	if st := f.p.Filter(ctx, f.cycle(t, twelve), twelve, snapshot(t, fresh)); !st.IsSuccess() {
		t.Fatalf("a node only the snapshot knows: %v", st)
	}

	// small is full with `hold`. While the snapshot still lists it, or the
	// informer's store still has it, small stays full.
	hold := f.bindOn(t, gpuPod("hold", 8), "small")
	waiting := gpuPod("waiting", 8)
	small := f.nodes["small"]
	for _, ni := range []fwk.NodeInfo{snapshot(t, small, hold), snapshot(t, small)} {
		if st := f.p.Filter(ctx, f.cycle(t, waiting), waiting, ni); st.Code() != fwk.Unschedulable {
			t.Fatalf("small is full: %v", st)
		}
	}
	// Deleted: gone from the store and the snapshot, the handler not called
	// yet. Filter releases its GPUs and admits the pod.
	if err := f.indexer.Delete(hold); err != nil {
		t.Fatal(err)
	}
	if st := f.p.Filter(ctx, f.cycle(t, waiting), waiting, snapshot(t, small)); !st.IsSuccess() {
		t.Fatalf("small, its pod deleted: %v", st)
	}
	// The handler's late DELETED changes nothing more.
	f.p.podHandler().OnDelete(hold)
	if _, err := f.s.Placement("default/hold"); !errors.Is(err, gpushare.ErrNotFound) {
		t.Fatalf("hold: %v", err)
	}

	// Ended (Succeeded) in the store: released the same way.
	done := f.bindOn(t, gpuPod("done", 16), "fresh")
	ended := done.DeepCopy()
	ended.Status.Phase = v1.PodSucceeded
	ended.ResourceVersion = "7"
	if err := f.indexer.Update(ended); err != nil {
		t.Fatal(err)
	}
	sixteen := gpuPod("sixteen", 16)
	if st := f.p.Filter(ctx, f.cycle(t, sixteen), sixteen, snapshot(t, fresh)); !st.IsSuccess() {
		t.Fatalf("fresh, its pod ended: %v", st)
	}
	if err := f.s.Check(); err != nil {
		t.Fatal(err)
	}
}

// The informer's handler may apply an event between Filter's first judgement
// and its catch-up: the catch-up then finds nothing left to apply, yet the
// first refusal is stale. Filter judges again whenever any event was applied
// meanwhile.
func TestFilterJudgesAgainWhenTheHandlerAppliesDuringItsCatchUp(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	hold := f.bindOn(t, gpuPod("hold", 8), "small")
	waiting := gpuPod("waiting", 8)
	small := f.nodes["small"]
	if err := f.indexer.Delete(hold); err != nil {
		t.Fatal(err)
	}
	calls := 0
	testHookAfterJudge = func() {
		calls++
		f.p.podHandler().OnDelete(hold) // The handler's DELETED, just now.
	}
	t.Cleanup(func() { testHookAfterJudge = nil })
	if st := f.p.Filter(ctx, f.cycle(t, waiting), waiting, snapshot(t, small)); !st.IsSuccess() {
		t.Fatalf("small, its pod deleted while Filter judged it: %v", st)
	}
	if calls != 1 {
		t.Fatalf("the hook ran %d times, want 1", calls)
	}
	if err := f.s.Check(); err != nil {
		t.Fatal(err)
	}
}

// PreFilter's verdicts (gpushare.Scheduler.FitAll) answer Filter as the
// library's Fit does, node by node: the same nodes admitted and refused,
// with and without the verdicts, as the cluster changes. A pod they do not
// serve (a node selector) is judged node by node; a node added after
// PreFilter is judged node by node.
func TestFilterVerdictsAgreeWithFit(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.nodes["half"] = gpuNode("half", 2, 16)
	f.p.nodeHandler().OnAdd(f.nodes["half"], true)
	f.bindOn(t, gpuPod("eight", 8), "half")
	compare := func(when string, pod *v1.Pod) {
		t.Helper()
		state := f.cycle(t, pod)
		c := readState(state)
		if c.verdicts == nil {
			t.Fatalf("%s: no verdicts for %s", when, pod.Name)
		}
		fast := f.filter(t, state, pod)
		c.verdicts = nil
		slow := f.filter(t, state, pod)
		for node := range f.nodes {
			if fast[node].Code() != slow[node].Code() {
				t.Errorf("%s: %s on %s: with verdicts %v, without %v", when, pod.Name, node, fast[node], slow[node])
			}
		}
	}
	for _, units := range []int64{4, 8, 12, 16, 20} {
		compare("at first", gpuPod(fmt.Sprintf("p%d", units), units))
	}
	f.bindOn(t, gpuPod("more", 6), "big")
	if err := f.s.SetNodeSchedulable("small", false); err != nil {
		t.Fatal(err)
	}
	for _, units := range []int64{4, 8, 12, 16, 20} {
		compare("after a bind and a cordon", gpuPod(fmt.Sprintf("q%d", units), units))
	}

	selected := gpuPod("selected", 4)
	selected.Spec.NodeSelector = map[string]string{"zone": "a"}
	if c := readState(f.cycle(t, selected)); c.verdicts != nil {
		t.Errorf("verdicts for a pod with a node selector: %v", c.verdicts)
	}

	pod := gpuPod("late", 4)
	state := f.cycle(t, pod)
	late := gpuNode("late-node", 1, 16)
	f.p.nodeHandler().OnAdd(late, true)
	if st := f.p.Filter(ctx, state, pod, nodeInfo(late)); !st.IsSuccess() {
		t.Errorf("a node added after PreFilter: %v", st)
	}
	full := gpuNode("full-node", 1, 2)
	f.p.nodeHandler().OnAdd(full, true)
	if st := f.p.Filter(ctx, state, pod, nodeInfo(full)); st.IsSuccess() {
		t.Error("a node added after PreFilter, too small: admitted")
	}
}

// ---- Preemption -------------------------------------------------------------------

// podInfo is what kube-scheduler passes AddPod and RemovePod.
func podInfo(t *testing.T, pod *v1.Pod) fwk.PodInfo {
	t.Helper()
	pi, err := framework.NewPodInfo(pod)
	if err != nil {
		t.Fatal(err)
	}
	return pi
}

// kube-scheduler's preemption removes candidate victims from a node and adds
// back those it spares, on a clone of the cycle state per node; before each
// Filter it adds the pods nominated to the node. Filter judges the GPUs as
// those edits leave them, and the original state is untouched.
func TestPreemptionEditsAreJudgedOnTheGPUs(t *testing.T) {
	ctx := context.Background()
	v1p, v2p, w := gpuPod("v1", 10), gpuPod("v2", 4), gpuPod("w", 14)
	high, low := gpuPod("high", 12), gpuPod("low", 2)
	f := newFixture(t, v1p, v2p, w, high, low)
	delete(f.nodes, "small")
	delete(f.nodes, "cpu")
	big := nodeInfo(f.nodes["big"])
	// GPU 0: v1 10 + v2 4; GPU 1: w 14 (binpack); 2 units free on each.
	for _, pod := range []*v1.Pod{v1p, v2p, w} {
		state := f.cycle(t, pod)
		if st := f.p.Reserve(ctx, state, pod, "big"); !st.IsSuccess() {
			t.Fatalf("Reserve %s: %v", pod.Name, st)
		}
		f.p.PostBind(ctx, state, pod, "big")
	}

	state := f.cycle(t, high)
	if st := f.p.Filter(ctx, state, high, big); st.Code() != fwk.Unschedulable {
		t.Fatalf("Filter before preemption: %v", st)
	}
	// SelectVictimsOnNode: every lower-priority pod removed, then spared
	// one by one while the pod still fits.
	dry := state.Clone()
	for _, pod := range []*v1.Pod{v1p, v2p, w} {
		if st := f.p.RemovePod(ctx, dry, high, podInfo(t, pod), big); !st.IsSuccess() {
			t.Fatalf("RemovePod %s: %v", pod.Name, st)
		}
	}
	if st := f.p.Filter(ctx, dry, high, big); !st.IsSuccess() {
		t.Fatalf("Filter with every victim removed: %v", st)
	}
	for _, c := range []struct {
		pod  *v1.Pod
		fits bool
	}{{w, true}, {v2p, true}, {v1p, false}} {
		if st := f.p.AddPod(ctx, dry, high, podInfo(t, c.pod), big); !st.IsSuccess() {
			t.Fatalf("AddPod %s: %v", c.pod.Name, st)
		}
		if st := f.p.Filter(ctx, dry, high, big); st.IsSuccess() != c.fits {
			t.Errorf("Filter with %s spared: %v, want fits %v", c.pod.Name, st, c.fits)
		}
		if !c.fits {
			f.p.RemovePod(ctx, dry, high, podInfo(t, c.pod), big) // v1 is the victim.
		}
	}
	if st := f.p.Filter(ctx, dry, high, big); !st.IsSuccess() {
		t.Errorf("Filter with v1 the only victim: %v", st)
	}
	// The cycle's own state never saw the edits, nor did the cluster.
	if st := f.p.Filter(ctx, state, high, big); st.Code() != fwk.Unschedulable {
		t.Errorf("Filter on the original state: %v", st)
	}

	// high is nominated to big while v1 terminates: a pod of lower priority
	// that fits now (2 units) does not get the node, since high does not
	// fit there yet.
	lowState := f.cycle(t, low)
	if st := f.p.Filter(ctx, lowState, low, big); !st.IsSuccess() {
		t.Fatalf("low alone: %v", st)
	}
	nominated := lowState.Clone()
	f.p.AddPod(ctx, nominated, low, podInfo(t, high), big)
	st := f.p.Filter(ctx, nominated, low, big)
	if st.Code() != fwk.Unschedulable || !strings.Contains(st.Message(), "'default/high', nominated") {
		t.Errorf("low beside nominated high, v1 still there: %v", st)
	}
	// v1 is gone: high takes 12 units of GPU 0, low fits on GPU 1 beside it.
	if err := f.s.Release("default/v1"); err != nil {
		t.Fatal(err)
	}
	if st := f.p.Filter(ctx, nominated, low, big); !st.IsSuccess() {
		t.Errorf("low beside nominated high, v1 gone: %v", st)
	}
	// A nominated pod removed again (RemovePod of an added pod) counts no more.
	f.p.RemovePod(ctx, nominated, low, podInfo(t, high), big)
	if c := readState(nominated); len(c.edits["big"].added) != 0 {
		t.Errorf("edits after removing the nominated pod: %+v", c.edits["big"])
	}
	// Pods without GPUs change nothing.
	f.p.AddPod(ctx, nominated, low, podInfo(t, gpuPod("web", 0)), big)
	if c := readState(nominated); !c.edits["big"].empty() {
		t.Errorf("edits after adding a pod without GPUs: %+v", c.edits["big"])
	}
}
