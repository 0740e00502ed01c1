package plugin

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"gpushare.dev/go/gpushare"
)

// ---- Objects as the driver and kube-scheduler's allocator write them ------------------

// fakeDRA is a draSource over objects held in memory.
type fakeDRA struct {
	slices  []*resourceapi.ResourceSlice
	claims  map[string]*resourceapi.ResourceClaim // "namespace/name"
	pending map[types.UID]*resourceapi.AllocationResult
	listErr error
}

func (f *fakeDRA) Slices() ([]*resourceapi.ResourceSlice, error) { return f.slices, f.listErr }

func (f *fakeDRA) Claims() ([]*resourceapi.ResourceClaim, error) {
	out := make([]*resourceapi.ResourceClaim, 0, len(f.claims))
	for _, c := range f.claims {
		out = append(out, c)
	}
	return out, f.listErr
}

func (f *fakeDRA) Claim(ns, name string) (*resourceapi.ResourceClaim, error) {
	if c, ok := f.claims[ns+"/"+name]; ok {
		return c, nil
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("resourceclaims"), name)
}

func (f *fakeDRA) Pending(uid types.UID) *resourceapi.AllocationResult { return f.pending[uid] }

func (f *fakeDRA) add(c *resourceapi.ResourceClaim) {
	if f.claims == nil {
		f.claims = map[string]*resourceapi.ResourceClaim{}
	}
	f.claims[c.Namespace+"/"+c.Name] = c
}

// draSlice is the slice gpushare-dra-driver publishes for a node: pool =
// node, one device gpu-<i> per GPU with consumable memory.
func draSlice(node string, memory ...string) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-gpu.gpushare.dev-x", ResourceVersion: "1"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: DRADriver, NodeName: &node,
			Pool: resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
		},
	}
	yes := true
	for i, m := range memory {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{
			Name:                     fmt.Sprintf("gpu-%d", i),
			AllowMultipleAllocations: &yes,
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				draMemory: {Value: resource.MustParse(m)},
			},
		})
	}
	return s
}

// draRequest is one request of a claim: count devices of `class` with
// `memory` each ("": none named, the whole device).
type draRequest struct {
	class, memory string
	count         int64
}

func draClaim(name string, requests ...draRequest) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default",
		UID: types.UID("claim-" + name), ResourceVersion: "1"}}
	for i, r := range requests {
		e := &resourceapi.ExactDeviceRequest{DeviceClassName: r.class, Count: r.count,
			AllocationMode: resourceapi.DeviceAllocationModeExactCount}
		if r.memory != "" {
			e.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
				draMemory: resource.MustParse(r.memory)}}
		}
		c.Spec.Devices.Requests = append(c.Spec.Devices.Requests,
			resourceapi.DeviceRequest{Name: fmt.Sprintf("r%d", i), Exactly: e})
	}
	return c
}

// draShareOf is one allocation result: `memory` consumed of `device` on
// `node` ("": no consumed capacity, the whole device).
type draShareOf struct {
	node, device, memory string
}

// allocated is claim `name` (one request of the driver's class) allocated
// as the allocator does it.
func allocated(name string, shares ...draShareOf) *resourceapi.ResourceClaim {
	c := draClaim(name, draRequest{class: DefaultDRADeviceClass, memory: "1Gi"})
	c.Status.Allocation = allocationOf(shares...)
	return c
}

func allocationOf(shares ...draShareOf) *resourceapi.AllocationResult {
	a := &resourceapi.AllocationResult{}
	for _, s := range shares {
		r := resourceapi.DeviceRequestAllocationResult{Request: "r0", Driver: DRADriver, Pool: s.node,
			Device: s.device}
		if s.memory != "" {
			id := types.UID("share-" + s.node + s.device + s.memory)
			r.ShareID = &id
			r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{draMemory: resource.MustParse(s.memory)}
		}
		a.Devices.Results = append(a.Devices.Results, r)
	}
	return a
}

// draPod uses claims by name.
func draPod(name string, claims ...string) *v1.Pod {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name),
			ResourceVersion: "5"},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "main", Image: "registry.invalid/cuda"}}},
	}
	for _, c := range claims {
		c := c
		pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, v1.PodResourceClaim{Name: "gpu-" + c,
			ResourceClaimName: &c})
		pod.Spec.Containers[0].Resources.Claims = append(pod.Spec.Containers[0].Resources.Claims,
			v1.ResourceClaim{Name: "gpu-" + c})
	}
	return pod
}

// logLines captures a logger's lines.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() klog.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, prefix+" "+args)
	}, funcr.Options{Verbosity: 4})
}

// with returns the lines that contain every one of `words`.
func (l *logLines) with(words ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
next:
	for _, line := range l.lines {
		for _, w := range words {
			if !strings.Contains(line, w) {
				continue next
			}
		}
		out = append(out, line)
	}
	return out
}

// draFixture is a plugin whose DRA state reads `src`.
type draFixture struct {
	p   *Plugin
	src *fakeDRA
	log *logLines
}

func newDRAFixture(t *testing.T, policy string, src *fakeDRA) *draFixture {
	t.Helper()
	return newDRAFixtureTarget(t, policy, "", src)
}

// newDRAFixtureTarget: the DRA state ranks against `target` (JSON; "": the
// default, one whole GPU of memory).
func newDRAFixtureTarget(t *testing.T, policy, target string, src *fakeDRA) *draFixture {
	t.Helper()
	s, err := gpushare.New(gpushare.Options{ReservationTTL: gpushare.NoExpiry})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	log := &logLines{}
	p := newPlugin(s, nil, nil, log.logger())
	p.dra, err = newDRAState(src, []string{DefaultDRADeviceClass}, policy, target, log.logger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.dra.close)
	return &draFixture{p: p, src: src, log: log}
}

// scores runs a pod's scoring cycle as kube-scheduler does for a pod with
// claims: PreFilter (Skip), PreScore, Score on `nodes`. nil when PreScore
// skips.
func (f *draFixture) scores(t *testing.T, pod *v1.Pod, nodes ...string) map[string]int64 {
	t.Helper()
	ctx := klog.NewContext(context.Background(), f.log.logger())
	state := framework.NewCycleState()
	if _, st := f.p.PreFilter(ctx, state, pod, nil); !st.IsSkip() {
		t.Fatalf("PreFilter of a pod with DRA claims: %v, want Skip", st)
	}
	infos := make([]fwk.NodeInfo, len(nodes))
	for i, n := range nodes {
		infos[i] = nodeInfo(gpuNode(n, 0, 0))
	}
	st := f.p.PreScore(ctx, state, pod, infos)
	if st.IsSkip() {
		return nil
	}
	if !st.IsSuccess() {
		t.Fatalf("PreScore: %v", st)
	}
	out := map[string]int64{}
	for _, ni := range infos {
		score, st := f.p.Score(ctx, state, pod, ni)
		if !st.IsSuccess() || score < 0 || score > MaxRank {
			t.Fatalf("Score %s = %d, %v", ni.Node().Name, score, st)
		}
		out[ni.Node().Name] = score
	}
	return out
}

// ---- The pod's demand -------------------------------------------------------------------

func TestDRARequestFromClaims(t *testing.T) {
	cls := DefaultDRADeviceClass
	src := &fakeDRA{}
	src.add(draClaim("eight", draRequest{class: cls, memory: "8Gi"}))
	src.add(draClaim("two-of-six", draRequest{class: cls, memory: "6Gi", count: 2}))
	src.add(draClaim("rounded", draRequest{class: cls, memory: "1536Mi"}))
	src.add(draClaim("whole", draRequest{class: cls}))
	src.add(draClaim("mixed", draRequest{class: cls, memory: "4Gi"}, draRequest{class: cls, memory: "10Gi"},
		draRequest{class: "nic.example.com"}))
	src.add(draClaim("nic", draRequest{class: "nic.example.com", count: 2}))
	src.add(allocated("shared", draShareOf{"a", "gpu-0", "8Gi"}))
	pendingClaim := draClaim("pending", draRequest{class: cls, memory: "8Gi"})
	src.add(pendingClaim)
	src.pending = map[types.UID]*resourceapi.AllocationResult{
		pendingClaim.UID: allocationOf(draShareOf{"a", "gpu-1", "8Gi"})}
	all := draClaim("all", draRequest{class: cls})
	all.Spec.Devices.Requests[0].Exactly.AllocationMode = resourceapi.DeviceAllocationModeAll
	src.add(all)
	negative := draClaim("negative", draRequest{class: cls, memory: "8Gi"})
	negative.Spec.Devices.Requests[0].Exactly.Capacity.Requests[draMemory] = resource.MustParse("-1Gi")
	src.add(negative)
	first := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "first", Namespace: "default", UID: "first"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{
				{Name: "big", DeviceClassName: cls, Capacity: &resourceapi.CapacityRequirements{
					Requests: map[resourceapi.QualifiedName]resource.Quantity{draMemory: resource.MustParse("20Gi")}}},
				{Name: "small", DeviceClassName: cls}}}}}}}
	src.add(first)
	// The claim kube-controller-manager made from a template (its spec is
	// the template's), named in the pod's status.
	src.add(draClaim("tmpl-pod-gpu-x7k2", draRequest{class: cls, memory: "12Gi", count: 3}))
	d, err := newDRAState(src, []string{cls}, DefaultDRAPolicy, "", klog.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()

	templated := draPod("tmpl-pod")
	tmpl := "gpu-template"
	generated := "tmpl-pod-gpu-x7k2"
	templated.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: &tmpl}}
	templated.Status.ResourceClaimStatuses = []v1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: &generated}}
	notYet := templated.DeepCopy()
	notYet.Status.ResourceClaimStatuses = nil

	for _, tc := range []struct {
		pod     *v1.Pod
		want    gpushare.Request
		wantErr error // errNoDRADemand; any invalidClaimError; else any other error
	}{
		{pod: draPod("p", "eight"), want: gpushare.Request{GPUMemory: 8, GPUCount: 1}},
		{pod: draPod("p", "two-of-six"), want: gpushare.Request{GPUMemory: 12, GPUCount: 2}},
		{pod: draPod("p", "rounded"), want: gpushare.Request{GPUMemory: 2, GPUCount: 1}},
		{pod: draPod("p", "whole"), want: gpushare.Request{WholeGPUs: 1}},
		{pod: draPod("p", "whole", "eight"), want: gpushare.Request{WholeGPUs: 2}},
		// Two amounts: each device scored as the larger; the NIC is not gpushare's.
		{pod: draPod("p", "mixed"), want: gpushare.Request{GPUMemory: 20, GPUCount: 2}},
		{pod: draPod("p", "eight", "shared"), want: gpushare.Request{GPUMemory: 8, GPUCount: 1}},
		{pod: draPod("p", "first"), want: gpushare.Request{GPUMemory: 20, GPUCount: 1}},
		{pod: templated, want: gpushare.Request{GPUMemory: 36, GPUCount: 3}},
		{pod: draPod("p", "nic"), wantErr: errNoDRADemand},
		{pod: draPod("p", "shared"), wantErr: errNoDRADemand},
		{pod: draPod("p", "pending"), wantErr: errNoDRADemand},
		{pod: draPod("p"), wantErr: errNoDRADemand},
		{pod: draPod("p", "all"), wantErr: &invalidClaimError{}},
		{pod: draPod("p", "negative"), wantErr: &invalidClaimError{}},
		{pod: draPod("p", "missing")},
		{pod: notYet},
	} {
		name := fmt.Sprintf("%s %v", tc.pod.Name, podClaims(tc.pod))
		got, err := d.request(tc.pod.Namespace, tc.pod.Name, podClaims(tc.pod))
		var invalid *invalidClaimError
		switch {
		case tc.wantErr == errNoDRADemand:
			if !errors.Is(err, errNoDRADemand) {
				t.Errorf("%s: %+v, %v; want no demand", name, got, err)
			}
		case tc.wantErr != nil:
			if !errors.As(err, &invalid) {
				t.Errorf("%s: %+v, %v; want an invalid claim", name, got, err)
			}
		case reflect.DeepEqual(tc.want, gpushare.Request{}):
			if err == nil || errors.As(err, &invalid) || errors.Is(err, errNoDRADemand) {
				t.Errorf("%s: %+v, %v; want a claim not readable yet", name, got, err)
			}
		default:
			tc.want.ID = tc.pod.Namespace + "/" + tc.pod.Name
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("%s: %+v, %v; want %+v", name, got, err, tc.want)
			}
		}
	}
}

// ---- The nodes' GPUs ------------------------------------------------------------------

// held returns the units a claim's share holds on each GPU of the DRA state.
func held(t *testing.T, d *draState, claim string, gpu int) (node string, gpus []int, units int64) {
	t.Helper()
	p, err := d.sched.Placement(draNamespace + "/" + shareName(draShare{claim: "claim-" + claim, gpu: gpu}))
	if errors.Is(err, gpushare.ErrNotFound) {
		return "", nil, 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return p.Node, p.GPUs, p.MemoryPerGPU
}

func TestDRANodeStateFromSlicesAndClaims(t *testing.T) {
	src := &fakeDRA{slices: []*resourceapi.ResourceSlice{
		draSlice("a", "40Gi", "40Gi"), draSlice("b", "80Gi"),
		// Another driver's slice on the node: not gpushare's GPUs.
		func() *resourceapi.ResourceSlice {
			s := draSlice("a", "10Gi")
			s.Name, s.Spec.Driver = "nic", "nic.example.com"
			return s
		}(),
	}}
	src.add(allocated("c30", draShareOf{"a", "gpu-0", "30Gi"}))
	src.add(allocated("whole", draShareOf{"a", "gpu-1", ""}))
	src.add(allocated("two", draShareOf{"b", "gpu-0", "8Gi"}, draShareOf{"b", "gpu-0", "1536Mi"}))
	pendingClaim := draClaim("pending", draRequest{class: DefaultDRADeviceClass, memory: "4Gi"})
	src.add(pendingClaim)
	src.pending = map[types.UID]*resourceapi.AllocationResult{
		pendingClaim.UID: allocationOf(draShareOf{"b", "gpu-0", "4Gi"})}
	d, err := newDRAState(src, []string{DefaultDRADeviceClass}, "dra+binpack", "", klog.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()

	want, err := d.desired()
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != 2 || !reflect.DeepEqual(want["a"].gpus, []int64{40, 40}) ||
		!reflect.DeepEqual(want["b"].gpus, []int64{80}) {
		t.Fatalf("nodes: %+v", want)
	}
	wantShares := map[string]map[draShare]int64{
		"a": {{"claim-c30", 0}: 30, {"claim-whole", 1}: 40},
		"b": {{"claim-two", 0}: 10, {"claim-pending", 0}: 4},
	}
	for node, shares := range wantShares {
		if !reflect.DeepEqual(want[node].allocs, shares) {
			t.Errorf("shares on %s: %v, want %v", node, want[node].allocs, shares)
		}
	}

	d.sync(want)
	for _, c := range []struct {
		claim string
		gpu   int
		node  string
		units int64
	}{{"c30", 0, "a", 30}, {"whole", 1, "a", 40}, {"two", 0, "b", 10}, {"pending", 0, "b", 4}} {
		node, gpus, units := held(t, d, c.claim, c.gpu)
		if node != c.node || !reflect.DeepEqual(gpus, []int{c.gpu}) || units != c.units {
			t.Errorf("%s: %s %v %d, want %s [%d] %d", c.claim, node, gpus, units, c.node, c.gpu, c.units)
		}
	}
	if err := d.sched.Check(); err != nil {
		t.Fatal(err)
	}

	// Changes: a claim deallocated, one allocated, and node b's slice
	// replaced by one of two GPUs (a new generation): its shares are held
	// again on the new node.
	delete(src.claims, "default/c30")
	src.add(allocated("late", draShareOf{"a", "gpu-0", "2Gi"}))
	src.pending = nil
	src.add(allocated("pending", draShareOf{"b", "gpu-0", "4Gi"}))
	b2 := draSlice("b", "80Gi", "80Gi")
	b2.Name, b2.Spec.Pool.Generation = "b-2", 2
	src.slices = append(src.slices, b2)
	want, err = d.desired()
	if err != nil {
		t.Fatal(err)
	}
	d.sync(want)
	if node, _, _ := held(t, d, "c30", 0); node != "" {
		t.Errorf("the deallocated claim is still held on %s", node)
	}
	for _, c := range []struct {
		claim string
		node  string
		units int64
	}{{"late", "a", 2}, {"two", "b", 10}, {"pending", "b", 4}, {"whole", "a", 40}} {
		if node, _, units := held(t, d, c.claim, 0+map[bool]int{true: 1}[c.claim == "whole"]); node != c.node || units != c.units {
			t.Errorf("after the changes, %s: %s %d, want %s %d", c.claim, node, units, c.node, c.units)
		}
	}
	if !reflect.DeepEqual(d.applied["b"].gpus, []int64{80, 80}) {
		t.Errorf("node b after its new slice: %v", d.applied["b"].gpus)
	}
	// The slices gone: the nodes go.
	src.slices = nil
	want, _ = d.desired()
	d.sync(want)
	if names, _, _ := d.sched.NodeNames(); len(names) != 0 {
		t.Errorf("nodes without slices: %v", names)
	}
	if err := d.sched.Check(); err != nil {
		t.Fatal(err)
	}
}

// ---- Ranking ------------------------------------------------------------------------------

// One node holds a 30 GiB claim on its first GPU, the other nothing: an 8
// GiB claim fits either. fgdpack (the default) and binpack prefer the
// fuller node (its partly used GPU, which first fit takes there too),
// spread the emptier one: the ranking follows the policy, and one the
// wrong way round is caught.
func TestDRARankingFollowsThePolicy(t *testing.T) {
	for _, tc := range []struct {
		policy, best string
	}{{DefaultDRAPolicy, "full"}, {"dra+binpack", "full"}, {"dra+spread", "empty"}} {
		t.Run(tc.policy, func(t *testing.T) {
			src := &fakeDRA{slices: []*resourceapi.ResourceSlice{
				draSlice("full", "40Gi", "40Gi"), draSlice("empty", "40Gi", "40Gi")}}
			src.add(allocated("held", draShareOf{"full", "gpu-0", "30Gi"}))
			src.add(draClaim("new", draRequest{class: DefaultDRADeviceClass, memory: "8Gi"}))
			f := newDRAFixture(t, tc.policy, src)
			scores := f.scores(t, draPod("new", "new"), "full", "empty", "no-gpus")
			if scores == nil {
				t.Fatalf("not scored; log: %v", f.log.lines)
			}
			other := map[string]string{"full": "empty", "empty": "full"}[tc.best]
			if scores[tc.best] <= scores[other] {
				t.Errorf("scores %v: %s should rank above %s", scores, tc.best, other)
			}
			if scores["no-gpus"] != 0 {
				t.Errorf("a node without the driver's GPUs scored %d", scores["no-gpus"])
			}
		})
	}
}

// The FGD policies rank memory claims by the target workload: memory
// claims never change idle compute, so against a compute target every node
// that fits one ranks the same, which is why the DRA state's default target
// is one whole GPU of memory. Node "full" holds 30 GiB of GPU 0, "empty"
// nothing; first fit puts an 8 GiB claim on GPU 0 of either.
//   - default (whole GPU, memory): "full", where the claim strands fewer GPU
//     units: GPU 0 was partly used already, its lost 10 GiB become 2, where
//     on "empty" an idle GPU would be broken into, 32 GiB lost;
//   - 10 GiB tasks (targetWorkload): "empty", since on "full" the 10 GiB
//     that fit one task would be cut to 2 (on "empty" 32 GiB still fit 3);
//   - one whole GPU of compute, the library's own default: a tie.
//
// With the target ignored the first two would tie as well.
func TestDRAFGDPoliciesRankMemoryClaims(t *testing.T) {
	const (
		mem10   = `{"resource": "memory", "tasks": [{"gpu_share": 10, "gpu_count": 1, "weight": 1}]}`
		compute = `{"resource": "compute", "tasks": [{"gpu_share": 1000, "gpu_count": 1, "weight": 1}]}`
	)
	for _, policy := range []string{"dra+fgd", "dra+fgdcpu", "dra+fgdpack"} {
		for _, tc := range []struct {
			target string
			cmp    int // sign of score(full) - score(empty)
		}{{"", 1}, {mem10, -1}, {compute, 0}} {
			src := &fakeDRA{slices: []*resourceapi.ResourceSlice{
				draSlice("full", "40Gi", "40Gi"), draSlice("empty", "40Gi", "40Gi")}}
			src.add(allocated("held", draShareOf{"full", "gpu-0", "30Gi"}))
			src.add(draClaim("new", draRequest{class: DefaultDRADeviceClass, memory: "8Gi"}))
			f := newDRAFixtureTarget(t, policy, tc.target, src)
			scores := f.scores(t, draPod("new", "new"), "full", "empty")
			if scores == nil {
				t.Fatalf("%s, target %q: not scored; log: %v", policy, tc.target, f.log.lines)
			}
			d := scores["full"] - scores["empty"]
			if (d > 0) != (tc.cmp > 0) || (d < 0) != (tc.cmp < 0) {
				t.Errorf("%s, target %q: scores %v, want sign(full - empty) %d", policy, tc.target, scores, tc.cmp)
			}
		}
	}
}

// Where the default and dra+binpack part: node "small" has one idle 16 GiB
// GPU, node "half" one 80 GiB GPU holding 40 GiB. binpack takes the
// tightest fit, the small GPU (8 GiB left against 32), and breaks a whole
// GPU into; the default (dra+fgdpack, one whole GPU of memory) keeps it
// whole and puts the 8 GiB claim on the GPU partly used already.
func TestDRADefaultKeepsIdleGPUsWhole(t *testing.T) {
	for _, tc := range []struct{ policy, best string }{{DefaultDRAPolicy, "half"}, {"dra+binpack", "small"}} {
		src := &fakeDRA{slices: []*resourceapi.ResourceSlice{draSlice("small", "16Gi"), draSlice("half", "80Gi")}}
		src.add(allocated("held", draShareOf{"half", "gpu-0", "40Gi"}))
		src.add(draClaim("new", draRequest{class: DefaultDRADeviceClass, memory: "8Gi"}))
		f := newDRAFixture(t, tc.policy, src)
		scores := f.scores(t, draPod("new", "new"), "small", "half")
		other := map[string]string{"small": "half", "half": "small"}[tc.best]
		if scores == nil || scores[tc.best] <= scores[other] {
			t.Errorf("%s: scores %v, want %s above %s", tc.policy, scores, tc.best, other)
		}
	}
}

// The node is scored on the GPUs DRA's first fit takes there, not on the
// GPUs the policy itself would choose. Node a: GPU 0 idle, GPU 1 with 10 GiB
// left; node b: GPU 0 with 20 GiB left. binpack on its own GPUs would take
// a's GPU 1 (the tightest fit); first fit takes a's idle GPU 0, so
// dra+binpack prefers b.
func TestDRAScoresTheGPUsFirstFitTakes(t *testing.T) {
	src := &fakeDRA{slices: []*resourceapi.ResourceSlice{
		draSlice("a", "40Gi", "40Gi"), draSlice("b", "40Gi", "40Gi")}}
	src.add(allocated("a1", draShareOf{"a", "gpu-1", "30Gi"}))
	src.add(allocated("b0", draShareOf{"b", "gpu-0", "20Gi"}))
	src.add(draClaim("new", draRequest{class: DefaultDRADeviceClass, memory: "8Gi"}))
	for _, tc := range []struct{ policy, best string }{{"dra+binpack", "b"}, {"binpack", "a"}} {
		f := newDRAFixture(t, tc.policy, src)
		scores := f.scores(t, draPod("new", "new"), "a", "b")
		other := map[string]string{"a": "b", "b": "a"}[tc.best]
		if scores == nil || scores[tc.best] <= scores[other] {
			t.Errorf("%s: scores %v, want %s above %s", tc.policy, scores, tc.best, other)
		}
	}
}

// ---- Never a filter, a reservation or a bind ------------------------------------------

func TestDRAPodsAreOnlyScored(t *testing.T) {
	ctx := context.Background()
	src := &fakeDRA{slices: []*resourceapi.ResourceSlice{draSlice("a", "40Gi")}}
	src.add(allocated("held", draShareOf{"a", "gpu-0", "36Gi"}))
	src.add(draClaim("big", draRequest{class: DefaultDRADeviceClass, memory: "8Gi"}))
	f := newDRAFixture(t, DefaultDRAPolicy, src)
	pod := draPod("big", "big")
	state := framework.NewCycleState()
	if _, st := f.p.PreFilter(ctx, state, pod, nil); !st.IsSkip() {
		t.Fatalf("PreFilter: %v, want Skip (no Filter)", st)
	}
	// Fits no node: every node scores 0, none is refused.
	a := nodeInfo(gpuNode("a", 0, 0))
	if st := f.p.PreScore(ctx, state, pod, []fwk.NodeInfo{a}); !st.IsSuccess() {
		t.Fatalf("PreScore: %v", st)
	}
	if score, st := f.p.Score(ctx, state, pod, a); !st.IsSuccess() || score != 0 {
		t.Fatalf("Score of a node the pod does not fit: %d, %v", score, st)
	}
	if st := f.p.Reserve(ctx, state, pod, "a"); !st.IsSuccess() {
		t.Fatalf("Reserve: %v", st)
	}
	if st := f.p.preBindPreFlight(state); !st.IsSkip() {
		t.Fatalf("PreBindPreFlight: %v, want Skip", st)
	}
	if st := f.p.Bind(ctx, state, pod, "a"); !st.IsSkip() {
		t.Fatalf("Bind: %v, want Skip (DefaultBinder binds)", st)
	}
	f.p.PostBind(ctx, state, pod, "a")
	f.p.Unreserve(ctx, state, pod, "a")
	if names, _, _ := f.p.sched.NodeNames(); len(names) != 0 {
		t.Errorf("the GPU state learnt DRA nodes: %v", names)
	}

	// A pod with claims of other drivers only, and one without claims:
	// PreScore skips them.
	src.add(draClaim("nic", draRequest{class: "nic.example.com"}))
	for _, p := range []*v1.Pod{draPod("nic", "nic"), draPod("plain")} {
		if got := f.scores(t, p, "a"); got != nil {
			t.Errorf("%s scored: %v", p.Name, got)
		}
	}
	// Scoring off (draDeviceClasses: []): skipped as well.
	f.p.dra = nil
	if got := f.scores(t, pod, "a"); got != nil {
		t.Errorf("scored with DRA scoring off: %v", got)
	}
}

// Invalid objects are logged, once, naming them, and left out; nothing
// fails a pod.
func TestDRAInvalidObjects(t *testing.T) {
	noNode := draSlice("x", "40Gi")
	noNode.Name, noNode.Spec.NodeName = "no-node", nil
	noMemory := draSlice("b", "40Gi", "40Gi")
	delete(noMemory.Spec.Devices[0].Capacity, draMemory)
	noMemory.Spec.Devices[1].Capacity[draMemory] = resourceapi.DeviceCapacity{Value: resource.MustParse("512Mi")}
	src := &fakeDRA{slices: []*resourceapi.ResourceSlice{draSlice("a", "40Gi", "40Gi"), noNode, noMemory}}
	src.add(allocated("ghost", draShareOf{"a", "gpu-7", "8Gi"}))
	src.add(allocated("too-big", draShareOf{"a", "gpu-0", "50Gi"}))
	src.add(allocated("ok", draShareOf{"a", "gpu-1", "30Gi"}))
	all := draClaim("all", draRequest{class: DefaultDRADeviceClass})
	all.Spec.Devices.Requests[0].Exactly.AllocationMode = resourceapi.DeviceAllocationModeAll
	src.add(all)
	src.add(draClaim("new", draRequest{class: DefaultDRADeviceClass, memory: "8Gi"}))
	f := newDRAFixture(t, DefaultDRAPolicy, src)

	for range 2 {
		scores := f.scores(t, draPod("new", "new"), "a", "b")
		if scores == nil || scores["b"] != 0 {
			t.Fatalf("scores: %v", scores)
		}
	}
	for _, want := range [][]string{
		{"names no node", "no-node"},
		{"offers no memory", "gpu-0", `"resourceSlice"="b-gpu.gpushare.dev-x"`},
		{"offers no memory", "gpu-1", "512Mi"},
		{"does not list", "ghost", "gpu-7"},
		{"does not fit the GPU", "claim-too-big", "50"},
	} {
		if got := f.log.with(want...); len(got) != 1 {
			t.Errorf("log lines with %q: %d, want 1 (once, though scored twice): %v", want, len(got), got)
		}
	}
	if node, _, units := held(t, f.p.dra, "ok", 1); node != "a" || units != 30 {
		t.Errorf("a valid claim beside invalid ones: %s %d", node, units)
	}

	// A claim gpushare cannot score: logged as an error, the pod not scored.
	if got := f.scores(t, draPod("p", "all"), "a"); got != nil {
		t.Errorf("AllocationMode All scored: %v", got)
	}
	if got := f.log.with("cannot be scored", "all devices"); len(got) != 1 {
		t.Errorf("log of an unscorable claim: %v", got)
	}
	// A claim not in the informer yet: not scored, no error.
	if got := f.scores(t, draPod("p", "missing"), "a"); got != nil {
		t.Errorf("a missing claim scored: %v", got)
	}
	// The lists fail: not scored, logged.
	f.src.listErr = errors.New("informer gone")
	if got := f.scores(t, draPod("new", "new"), "a"); got != nil {
		t.Errorf("scored without lists: %v", got)
	}
	if got := f.log.with("Ranking the nodes", "informer gone"); len(got) != 1 {
		t.Errorf("log of a failed list: %v", got)
	}
}

func TestDRAArgs(t *testing.T) {
	args, err := DecodeArgs(nil)
	if err != nil || args.draPolicy() != "dra+fgdpack" || args.TargetWorkload != nil ||
		!reflect.DeepEqual(args.draClasses(), []string{"gpushare.dev", "gpushare.dev-whole"}) {
		t.Fatalf("defaults: %+v %q %v, %v", args, args.draPolicy(), args.draClasses(), err)
	}
	args, err = DecodeArgs(&runtime.Unknown{Raw: []byte(`{"draPolicy":"dra+spread","draDeviceClasses":[]}`)})
	if err != nil || args.draPolicy() != "dra+spread" || args.draClasses() == nil || len(args.draClasses()) != 0 {
		t.Fatalf("scoring off: %+v, %v", args, err)
	}
	args, err = DecodeArgs(&runtime.Unknown{Raw: []byte("draDeviceClasses: [gpushare.dev, big-gpus]\n"),
		ContentType: runtime.ContentTypeYAML})
	if err != nil || !reflect.DeepEqual(args.draClasses(), []string{"gpushare.dev", "big-gpus"}) {
		t.Fatalf("YAML: %+v, %v", args, err)
	}
	for _, bad := range []string{`{"draPolicy":"fgdpack"}`, `{"draPolicy":"dra"}`, `{"draPolicy":"dra+nope"}`,
		`{"draDeviceClasses":[""]}`} {
		if _, err := DecodeArgs(&runtime.Unknown{Raw: []byte(bad)}); err == nil {
			t.Errorf("%s accepted", bad)
		} else if strings.Contains(bad, "Policy") && !strings.Contains(err.Error(), "dra+fgdpack") {
			t.Errorf("%s: %v does not name the policies", bad, err)
		}
	}
}

func TestTargetWorkloadArgs(t *testing.T) {
	yaml := "targetWorkload:\n  resource: memory\n  tasks:\n  - {cpu: 4000, gpu_share: 8, gpu_count: 1, weight: 0.4}\n" +
		"  - {gpu_count: 1, weight: 0.6}\n"
	args, err := DecodeArgs(&runtime.Unknown{Raw: []byte(yaml), ContentType: runtime.ContentTypeYAML})
	if err != nil || !strings.Contains(args.target(), `"gpu_share":8`) {
		t.Fatalf("YAML: %q, %v", args.target(), err)
	}
	args, err = DecodeArgs(&runtime.Unknown{Raw: []byte(`{"targetWorkload": null}`)})
	if err != nil || args.TargetWorkload != nil || args.target() != "" {
		t.Fatalf("null: %q, %v", args.target(), err)
	}
	for bad, want := range map[string]string{
		`{"targetWorkload": "target.json"}`: `targetWorkload must be an object`,
		`{"targetWorkload": {"resource": "memory", "tasks": [{"gpu_share": 8, "gpu_count": 1, "weight": -1}]}}`: `GpuShare args: ` +
			`targetWorkload: tasks[0].weight: -1 is not a positive number`,
		`{"targetWorkload": {"resource": "memory", "tasks": [{"gpu_shares": 8, "weight": 1}]}}`: `gpu_shares`,
		`{"targetWorkload": {"resource": "memory", "tasks": []}}`:                               `task`,
	} {
		if _, err := DecodeArgs(&runtime.Unknown{Raw: []byte(bad)}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", bad, err, want)
		}
	}
}

// stubDRAManager stands in for kube-scheduler's SharedDRAManager where only
// its presence counts (the test sets the DRA state's source), and its
// DeviceClassResolver (classes; none when nil).
type stubDRAManager struct {
	fwk.SharedDRAManager
	classes fwk.DeviceClassResolver
}

func (m stubDRAManager) DeviceClassResolver() fwk.DeviceClassResolver { return m.classes }

// Args.TargetWorkload reaches both schedulers. Against 10 GiB tasks an
// 8 GiB request goes where it cuts no 10 GiB hole: to the idle GPU, not
// the one with 10 GiB left; against the defaults (a whole GPU of compute
// for annotation pods) the annotation pods' scheduler would tie, and the
// DRA state (a whole GPU of memory) would prefer the partly used GPU.
func TestTargetWorkloadReachesBothSchedulers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	args, err := DecodeArgs(&runtime.Unknown{Raw: []byte(`{"policy": "fgdpack", "targetWorkload": ` +
		`{"resource": "memory", "tasks": [{"gpu_share": 10, "gpu_count": 1, "weight": 1}]}}`)})
	if err != nil {
		t.Fatal(err)
	}
	factory := informers.NewSharedInformerFactory(fake.NewClientset(), 0)
	st, err := sharedFor(ctx, args, factory, stubDRAManager{}, klog.Background())
	if err != nil || st.dra == nil {
		t.Fatalf("sharedFor: %v (DRA state %v)", err, st != nil && st.dra != nil)
	}

	// Annotation pods.
	for _, n := range []string{"holey", "idle"} {
		if err := st.sched.AddNode(gpushare.Node{Name: n, GPUMemory: []int64{40}, Sharing: gpushare.SharingOn}); err != nil {
			t.Fatal(err)
		}
	}
	held, err := gpushare.NewPod(gpushare.Request{ID: "default/held", GPUMemory: 30})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if _, err := st.sched.Reserve(held, "holey"); err != nil {
		t.Fatal(err)
	}
	pod, err := gpushare.NewPod(gpushare.Request{ID: "default/new", GPUMemory: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer pod.Close()
	ranks, err := st.sched.Rank(pod, []string{"holey", "idle"})
	if err != nil || ranks[1] <= ranks[0] || ranks[0] < 0 {
		t.Errorf("annotation pods: ranks holey, idle %v (%v); want idle above holey", ranks, err)
	}

	// DRA claims.
	src := &fakeDRA{slices: []*resourceapi.ResourceSlice{draSlice("holey", "40Gi"), draSlice("idle", "40Gi")}}
	src.add(allocated("held", draShareOf{"holey", "gpu-0", "30Gi"}))
	src.add(draClaim("new", draRequest{class: DefaultDRADeviceClass, memory: "8Gi"}))
	st.dra.source = src
	f := &draFixture{p: &Plugin{sharedState: st, firstBinder: func() bool { return true }}, src: src, log: &logLines{}}
	if scores := f.scores(t, draPod("new", "new"), "holey", "idle"); scores == nil || scores["idle"] <= scores["holey"] {
		t.Errorf("DRA claims: scores %v; want idle above holey", scores)
	}
}
