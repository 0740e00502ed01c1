package plugin

import (
	"context"
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"gpushare.dev/go/gpushare"
)

// fakeClasses is kube-scheduler's DeviceClassResolver: the classes by the
// extended resource they map.
type fakeClasses map[v1.ResourceName]*resourceapi.DeviceClass

func (f fakeClasses) GetDeviceClass(r v1.ResourceName) *resourceapi.DeviceClass { return f[r] }

// wholeClass is the chart's class for nvidia.com/gpu through DRA.
func wholeClass() fakeClasses {
	name := string(WholeGPUResource)
	return fakeClasses{WholeGPUResource: {ObjectMeta: metav1.ObjectMeta{Name: "gpushare.dev-whole"},
		Spec: resourceapi.DeviceClassSpec{ExtendedResourceName: &name}}}
}

// wholePod asks n whole GPUs in its limits, as for a device plugin, and no
// claim.
func wholePod(name string, n int64) *v1.Pod {
	pod := gpuPod(name, 0)
	for _, list := range []v1.ResourceList{pod.Spec.Containers[0].Resources.Limits,
		pod.Spec.Containers[0].Resources.Requests} {
		list[WholeGPUResource] = *resource.NewQuantity(n, resource.DecimalSI)
	}
	return pod
}

// withDRANode adds "dra", a node without GPU resources in its allocatable
// (gpushare-dra-driver's node: no device plugin), and lets Reserve read the
// fixture's nodes as kube-scheduler's snapshot.
func (f *fixture) withDRANode() {
	f.nodes["dra"] = gpuNode("dra", 0, 0)
	f.p.nodeHandler().OnAdd(f.nodes["dra"], true)
	f.p.nodeInfo = func(name string) (fwk.NodeInfo, error) {
		n, ok := f.nodes[name]
		if !ok {
			return nil, errors.New("node " + name + " not found")
		}
		return nodeInfo(n), nil
	}
}

// recordBindings records the Bindings GpuShare creates.
func (f *fixture) recordBindings() *[]*v1.Binding {
	var bindings []*v1.Binding
	f.client.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "binding" {
			return false, nil, nil
		}
		b := action.(k8stesting.CreateAction).GetObject().(*v1.Binding)
		bindings = append(bindings, b)
		return true, b, nil
	})
	return &bindings
}

// A class maps nvidia.com/gpu: on a node without it in its allocatable DRA
// serves the pod, and GpuShare admits the node, reserves nothing, binds
// nothing and annotates nothing there; on a node whose device plugin offers
// nvidia.com/gpu the pod is GpuShare's, as before.
func TestDRAServesWholeGPUsWhereNoDevicePluginDoes(t *testing.T) {
	ctx := context.Background()
	pod := wholePod("whole", 1)
	f := newFixture(t, pod)
	f.withDRANode()
	f.p.classes = wholeClass()
	bindings := f.recordBindings()

	state := f.cycle(t, pod)
	if got := readState(state).extendedClass; got != "gpushare.dev-whole" {
		t.Fatalf("extendedClass = %q", got)
	}
	filtered := f.filter(t, state, pod)
	// "dra" and "cpu" have no nvidia.com/gpu: DRA's to judge (DynamicResources
	// refuses "cpu", which has no devices). "big" and "small" offer it.
	for name, st := range filtered {
		if !st.IsSuccess() {
			t.Errorf("Filter %s: %v, want Success", name, st)
		}
	}

	// Only the device plugin's nodes are ranked on the GPU state.
	infos := []fwk.NodeInfo{nodeInfo(f.nodes["dra"]), nodeInfo(f.nodes["big"])}
	if st := f.p.PreScore(ctx, state, pod, infos); !st.IsSuccess() {
		t.Fatalf("PreScore: %v", st)
	}
	ranks := readState(state).ranks
	if _, ok := ranks["dra"]; ok || len(ranks) != 1 {
		t.Errorf("ranks %v: want big's alone", ranks)
	}
	if score, st := f.p.Score(ctx, state, pod, infos[0]); !st.IsSuccess() || score != 0 {
		t.Errorf("Score dra = %d, %v; want 0", score, st)
	}
	// DRA's nodes alone: GpuShare has no score for the pod.
	onlyDRA := framework.NewCycleState()
	if _, st := f.p.PreFilter(ctx, onlyDRA, pod, nil); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := f.p.PreScore(ctx, onlyDRA, pod, infos[:1]); !st.IsSkip() {
		t.Errorf("PreScore on DRA's nodes alone: %v, want Skip", st)
	}

	// Chosen: the DRA node. Nothing reserved, nothing to patch, the next
	// bind plugin binds.
	if st := f.p.Reserve(ctx, state, pod, "dra"); !st.IsSuccess() {
		t.Fatalf("Reserve on the DRA node: %v", st)
	}
	if p := readState(state).reserved(); p != nil {
		t.Fatalf("reserved on the DRA node: %+v", p)
	}
	if _, err := f.s.Placement("default/whole"); !errors.Is(err, gpushare.ErrNotFound) {
		t.Fatalf("placement of a pod DRA serves: %v", err)
	}
	if st := f.p.preBindPreFlight(state); !st.IsSkip() {
		t.Errorf("PreBindPreFlight: %v, want Skip", st)
	}
	if st := f.p.PreBind(ctx, state, pod, "dra"); !st.IsSuccess() {
		t.Errorf("PreBind: %v", st)
	}
	if st := f.p.Bind(ctx, state, pod, "dra"); st.Code() != fwk.Skip {
		t.Fatalf("Bind: %v, want Skip (the next bind plugin binds)", st)
	}
	f.p.PostBind(ctx, state, pod, "dra")
	if len(*bindings) != 0 || len(f.client.Actions()) != 0 {
		t.Fatalf("API calls for a pod DRA serves: %v", f.client.Actions())
	}

	// Bound there (by DefaultBinder, without annotations): it holds none of
	// gpushare's GPUs, and the next pod is still DRA's there, while a pod
	// sharing GPU memory is still refused.
	bound := pod.DeepCopy()
	bound.Spec.NodeName, bound.ResourceVersion, bound.Status.Phase = "dra", "6", v1.PodRunning
	f.p.podHandler().OnUpdate(pod, bound)
	next := wholePod("next", 1)
	if st := f.p.Filter(ctx, f.cycle(t, next), next, nodeInfo(f.nodes["dra"])); !st.IsSuccess() {
		t.Errorf("Filter of the next whole-GPU pod on the DRA node: %v", st)
	}
	shared := gpuPod("shared", 4)
	if st := f.p.Filter(ctx, f.cycle(t, shared), shared, nodeInfo(f.nodes["dra"])); st.Code() != fwk.UnschedulableAndUnresolvable {
		t.Errorf("Filter of a gpu-mem pod on the DRA node: %v, want UnschedulableAndUnresolvable", st)
	}

	// The same pod on the device plugin's node: reserved and bound with the
	// annotations, as before.
	again := wholePod("again", 1)
	state2 := f.cycle(t, again)
	if st := f.p.Reserve(ctx, state2, again, "big"); !st.IsSuccess() {
		t.Fatalf("Reserve on big: %v", st)
	}
	if p := readState(state2).reserved(); p == nil || p.Node != "big" {
		t.Fatalf("reservation on big: %+v", p)
	}
	if st := f.p.Bind(ctx, state2, again, "big"); !st.IsSuccess() {
		t.Fatalf("Bind on big: %v", st)
	}
	if len(*bindings) != 1 || (*bindings)[0].Annotations[GPUIndexAnnotation] == "" {
		t.Fatalf("bindings: %+v", *bindings)
	}

	// A node Reserve cannot read: nothing reserved, the pod tried again.
	state3 := f.cycle(t, wholePod("lost", 1))
	if st := f.p.Reserve(ctx, state3, wholePod("lost", 1), "gone"); st.IsSuccess() {
		t.Fatalf("Reserve on a node not in the snapshot: %v", st)
	}
	if p := readState(state3).reserved(); p != nil {
		t.Fatalf("reserved on an unknown node: %+v", p)
	}
	if err := f.s.Check(); err != nil {
		t.Fatal(err)
	}
}

// Without a class for nvidia.com/gpu, and for pods that share GPU memory,
// nothing changes: the DRA node has no GPUs of gpushare's.
func TestWithoutAClassOrWithGPUMemoryGpuShareJudgesEveryNode(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name    string
		classes fakeClasses
		pod     *v1.Pod
	}{
		{"no class", nil, wholePod("whole", 1)},
		{"a class of another resource", fakeClasses{"example.com/fpga": wholeClass()[WholeGPUResource]},
			wholePod("whole", 1)},
		{"gpu-mem", wholeClass(), gpuPod("shared", 4)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.pod)
			f.withDRANode()
			if tc.classes != nil {
				f.p.classes = tc.classes
			}
			state := f.cycle(t, tc.pod)
			if got := readState(state).extendedClass; got != "" {
				t.Fatalf("extendedClass = %q, want none", got)
			}
			st := f.p.Filter(ctx, state, tc.pod, nodeInfo(f.nodes["dra"]))
			if st.Code() != fwk.UnschedulableAndUnresolvable || st.Message() == "" {
				t.Fatalf("Filter dra: %v, want UnschedulableAndUnresolvable with gpushare's reason", st)
			}
			if st := f.p.Reserve(ctx, state, tc.pod, "dra"); st.IsSuccess() {
				t.Fatalf("Reserve on a node without GPUs: %v", st)
			}
			if st := f.p.Filter(ctx, state, tc.pod, nodeInfo(f.nodes["big"])); !st.IsSuccess() {
				t.Fatalf("Filter big: %v", st)
			}
			if st := f.p.Reserve(ctx, state, tc.pod, "big"); !st.IsSuccess() {
				t.Fatalf("Reserve big: %v", st)
			}
			if p := readState(state).reserved(); p == nil || p.Node != "big" {
				t.Fatalf("reservation: %+v", p)
			}
		})
	}
}

// A pod asking both GPU memory and whole GPUs is refused at PreFilter, a
// class or not, as before.
func TestAPodAskingMemoryAndWholeGPUsIsRefusedAsBefore(t *testing.T) {
	both := gpuPod("both", 4)
	both.Spec.Containers[0].Resources.Limits[WholeGPUResource] = resource.MustParse("1")
	f := newFixture(t, both)
	f.withDRANode()
	f.p.classes = wholeClass()
	if f.p.extendedClass(both) != "" {
		t.Errorf("extendedClass of a pod asking aliyun.com/gpu-mem: %q", f.p.extendedClass(both))
	}
	if _, st := f.p.PreFilter(context.Background(), framework.NewCycleState(), both, nil); st.Code() != fwk.UnschedulableAndUnresolvable {
		t.Fatalf("PreFilter: %v, want UnschedulableAndUnresolvable", st)
	}
}

// Where the class is one of the driver's (draDeviceClasses), the nodes DRA
// serves are ranked with the DRA state, on N whole GPUs; the device
// plugin's nodes on the GPU state.
func TestDRAServedNodesAreRankedOnTheDRAState(t *testing.T) {
	ctx := context.Background()
	src := &fakeDRA{slices: []*resourceapi.ResourceSlice{
		draSlice("a", "40Gi", "40Gi"), draSlice("b", "40Gi")}}
	// a: one GPU partly used, one idle; b: its only GPU partly used, so no
	// whole GPU is left there.
	src.add(allocated("held-a", draShareOf{"a", "gpu-0", "8Gi"}))
	src.add(allocated("held-b", draShareOf{"b", "gpu-0", "8Gi"}))
	d := newDRAFixture(t, DefaultDRAPolicy, src)
	p := d.p
	p.dra.classes["gpushare.dev-whole"] = true
	p.classes = wholeClass()
	for _, n := range []*v1.Node{gpuNode("a", 0, 0), gpuNode("b", 0, 0), gpuNode("big", 2, 16)} {
		p.nodeHandler().OnAdd(n, true)
	}
	pod := wholePod("whole", 1)
	state := framework.NewCycleState()
	if _, st := p.PreFilter(ctx, state, pod, nil); !st.IsSuccess() {
		t.Fatalf("PreFilter: %v", st)
	}
	infos := []fwk.NodeInfo{nodeInfo(gpuNode("a", 0, 0)), nodeInfo(gpuNode("b", 0, 0)),
		nodeInfo(gpuNode("big", 2, 16))}
	if st := p.PreScore(ctx, state, pod, infos); !st.IsSuccess() {
		t.Fatalf("PreScore: %v", st)
	}
	scores := map[string]int64{}
	for _, ni := range infos {
		s, st := p.Score(ctx, state, pod, ni)
		if !st.IsSuccess() {
			t.Fatalf("Score %s: %v", ni.Node().Name, st)
		}
		scores[ni.Node().Name] = s
	}
	if scores["a"] <= 0 || scores["b"] != 0 || scores["big"] <= 0 {
		t.Fatalf("scores %v: want a > 0 (an idle GPU), b 0 (no whole GPU), big ranked on the GPU state", scores)
	}

	// Two whole GPUs: a has one idle GPU only.
	two := wholePod("two", 2)
	state2 := framework.NewCycleState()
	if _, st := p.PreFilter(ctx, state2, two, nil); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := p.PreScore(ctx, state2, two, infos[:2]); !st.IsSuccess() {
		t.Fatalf("PreScore: %v", st)
	}
	if r := readState(state2).ranks; r["a"] > 0 || r["b"] > 0 {
		t.Fatalf("ranks for two whole GPUs: %v, want none above 0", r)
	}

	// A class that is not the driver's: DRA's nodes are not ranked.
	delete(p.dra.classes, "gpushare.dev-whole")
	state3 := framework.NewCycleState()
	if _, st := p.PreFilter(ctx, state3, pod, nil); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := p.PreScore(ctx, state3, pod, infos[:2]); !st.IsSkip() {
		t.Fatalf("PreScore with a class not the driver's: %v, want Skip", st)
	}
}

// The scheduler's state reads the classes through kube-scheduler's
// SharedDRAManager, the resolver NodeResourcesFit and DynamicResources read.
func TestTheClassesComeFromTheDRAManager(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory := informers.NewSharedInformerFactory(fake.NewClientset(), 0)
	st, err := sharedFor(ctx, Args{}, factory, stubDRAManager{classes: wholeClass()}, klog.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := st.extendedClass(wholePod("p", 1)); got != "gpushare.dev-whole" {
		t.Fatalf("extendedClass = %q", got)
	}
	// DRA off in the scheduler (no manager): no class.
	factory2 := informers.NewSharedInformerFactory(fake.NewClientset(), 0)
	st2, err := sharedFor(ctx, Args{}, factory2, nil, klog.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := st2.extendedClass(wholePod("p", 1)); got != "" {
		t.Fatalf("extendedClass without DRA = %q", got)
	}
}

func TestWholeGPUsAsked(t *testing.T) {
	pod := wholePod("p", 2)
	pod.Spec.Containers = append(pod.Spec.Containers, wholePod("q", 1).Spec.Containers[0])
	if got := wholeGPUsAsked(pod); got != 3 {
		t.Errorf("two containers: %d, want 3", got)
	}
	pod.Spec.InitContainers = []v1.Container{wholePod("i", 4).Spec.Containers[0]}
	if got := wholeGPUsAsked(pod); got != 4 {
		t.Errorf("an init container of 4: %d, want 4", got)
	}
}
