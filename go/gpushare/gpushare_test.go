package gpushare_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gpushare.dev/go/gpushare"
)

func newScheduler(t *testing.T, o gpushare.Options) *gpushare.Scheduler {
	t.Helper()
	s, err := gpushare.New(o)
	if err != nil {
		t.Fatalf("New(%+v): %v", o, err)
	}
	t.Cleanup(s.Close)
	return s
}

func newPod(t *testing.T, r gpushare.Request) *gpushare.Pod {
	t.Helper()
	p, err := gpushare.NewPod(r)
	if err != nil {
		t.Fatalf("NewPod(%+v): %v", r, err)
	}
	t.Cleanup(p.Close)
	return p
}

func sharedNode(name string, gpus int, units int64) gpushare.Node {
	mem := make([]int64, gpus)
	for i := range mem {
		mem[i] = units
	}
	return gpushare.Node{Name: name, GPUMemory: mem, Labels: map[string]string{"gpushare": "true"}}
}

func mustAdd(t *testing.T, s *gpushare.Scheduler, n gpushare.Node) {
	t.Helper()
	if err := s.AddNode(n); err != nil {
		t.Fatalf("AddNode(%s): %v", n.Name, err)
	}
}

// wantErr checks the code (through errors.Is and errors.As) and that the
// message holds `fragment`.
func wantErr(t *testing.T, err error, sentinel *gpushare.Error, fragment string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v", sentinel.Code)
	}
	if !errors.Is(err, sentinel) {
		t.Fatalf("error %q: want code %v", err, sentinel.Code)
	}
	var ge *gpushare.Error
	if !errors.As(err, &ge) {
		t.Fatalf("error %q (%T) is not a *gpushare.Error", err, err)
	}
	if !strings.Contains(ge.Message, fragment) {
		t.Fatalf("message %q does not mention %q", ge.Message, fragment)
	}
	if !strings.HasPrefix(err.Error(), sentinel.Code.String()+": ") {
		t.Fatalf("Error() = %q, want the %s prefix", err.Error(), sentinel.Code)
	}
}

func TestVersion(t *testing.T) {
	if v := gpushare.ABIVersion(); v < 1 {
		t.Errorf("ABIVersion() = %d", v)
	}
	if gpushare.Version() == "" {
		t.Error("Version() is empty")
	}
	policies := gpushare.Policies()
	if len(policies) < 2 || policies[0] == "" {
		t.Fatalf("Policies() = %q", policies)
	}
	found := false
	for _, p := range policies {
		found = found || p == "binpack"
	}
	if !found {
		t.Errorf("Policies() = %q lacks binpack", policies)
	}
	for _, p := range policies {
		s, err := gpushare.New(gpushare.Options{Policy: p, ReservationTTL: time.Second})
		if err != nil {
			t.Errorf("New(policy %q): %v", p, err)
			continue
		}
		s.Close()
	}
}

func TestCodes(t *testing.T) {
	if gpushare.NotFound.String() != "NOT_FOUND" || gpushare.Code(99).String() != "CODE(99)" {
		t.Errorf("names: %v %v", gpushare.NotFound, gpushare.Code(99))
	}
	e := &gpushare.Error{Code: gpushare.NotFound, Message: "unknown node 'x'"}
	if !errors.Is(e, gpushare.ErrNotFound) || errors.Is(e, gpushare.ErrAlreadyExists) ||
		errors.Is(e, gpushare.ErrClosed) {
		t.Error("Is by code")
	}
	if !errors.Is(fmt.Errorf("wrapped: %w", e), gpushare.ErrNotFound) {
		t.Error("Is through a wrap")
	}
	if !errors.Is(gpushare.ErrClosed, gpushare.ErrFailedPrecondition) ||
		errors.Is(&gpushare.Error{Code: gpushare.FailedPrecondition, Message: "other"}, gpushare.ErrClosed) {
		t.Error("ErrClosed is a FailedPrecondition with its own message")
	}
}

func TestNewErrors(t *testing.T) {
	_, err := gpushare.New(gpushare.Options{Policy: "no-such-policy"})
	wantErr(t, err, gpushare.ErrInvalidArgument, "no-such-policy")
	if !strings.Contains(err.Error(), "binpack") {
		t.Errorf("%q does not list the known policies", err)
	}
	_, err = gpushare.New(gpushare.Options{ReservationTTL: -time.Second})
	wantErr(t, err, gpushare.ErrInvalidArgument, "")
	_, err = gpushare.New(gpushare.Options{Policy: "bin\x00pack"})
	wantErr(t, err, gpushare.ErrInvalidArgument, "NUL")
	// A positive TTL under a millisecond is rounded up, not refused.
	s, err := gpushare.New(gpushare.Options{ReservationTTL: time.Microsecond})
	if err != nil {
		t.Fatalf("TTL 1 µs: %v", err)
	}
	s.Close()
}

// TargetWorkload and TargetResource reach the fgd policies. Node "full"
// holds 30 of GPU 0's 40 units; an 8-unit request goes to GPU 0 on either
// node under dra+fgdpack (first fit). Compute target (the default): a tie,
// memory never changes idle compute. One whole GPU on memory: "full" first,
// where the partly used GPU's lost units shrink. 10-unit tasks: "empty"
// first, since on "full" the 10 units that fit one would be cut to 2.
func TestTargetWorkload(t *testing.T) {
	rank := func(o gpushare.Options) []int64 {
		t.Helper()
		o.Policy, o.ReservationTTL = "dra+fgdpack", gpushare.NoExpiry
		s := newScheduler(t, o)
		mustAdd(t, s, sharedNode("full", 2, 40))
		mustAdd(t, s, sharedNode("empty", 2, 40))
		held := newPod(t, gpushare.Request{ID: "default/held", GPUMemory: 30})
		if p, err := s.Reserve(held, "full"); err != nil || !slices.Equal(p.GPUs, []int{0}) {
			t.Fatalf("Reserve: %+v, %v", p, err)
		}
		ranks, err := s.Rank(newPod(t, gpushare.Request{ID: "default/new", GPUMemory: 8}),
			[]string{"full", "empty"})
		if err != nil {
			t.Fatal(err)
		}
		return ranks
	}
	memWhole := `{"resource": "memory", "tasks": [{"gpu_count": 1, "weight": 1}]}`
	mem10 := `{"resource": "memory", "tasks": [{"gpu_share": 10, "gpu_count": 1, "weight": 1}]}`
	for _, tc := range []struct {
		name string
		o    gpushare.Options
		cmp  int // sign of rank(full) - rank(empty)
	}{
		{"default", gpushare.Options{}, 0},
		{"memory", gpushare.Options{TargetResource: gpushare.TargetMemory}, 1},
		{"memory JSON", gpushare.Options{TargetWorkload: memWhole}, 1},
		{"memory JSON and resource", gpushare.Options{TargetWorkload: memWhole, TargetResource: gpushare.TargetMemory}, 1},
		{"10-unit tasks", gpushare.Options{TargetWorkload: mem10}, -1},
	} {
		r := rank(tc.o)
		if r[0] < 0 || r[1] < 0 {
			t.Fatalf("%s: ranks %v", tc.name, r)
		}
		if got := int(r[0] - r[1]); (got > 0) != (tc.cmp > 0) || (got < 0) != (tc.cmp < 0) {
			t.Errorf("%s: ranks full %d, empty %d; want sign %d", tc.name, r[0], r[1], tc.cmp)
		}
	}

	for _, tc := range []struct {
		o    gpushare.Options
		want string
	}{
		{gpushare.Options{Policy: "fgdpack", TargetWorkload: `{"tasks": [`}, "options->target_workload: "},
		{gpushare.Options{TargetWorkload: `{"resource": "memory", "tasks": [{"gpu_share": 8, "gpu_count": 1, "weight": -1}]}`},
			"tasks[0].weight: -1 is not a positive number"},
		{gpushare.Options{TargetWorkload: `{"resource": "compute", "tasks": [{"weight": 1}]}`, TargetResource: gpushare.TargetMemory},
			"options->target_resource"},
		{gpushare.Options{TargetResource: 7}, "options->target_resource 7"},
		{gpushare.Options{TargetWorkload: "{\x00}"}, "NUL"},
	} {
		_, err := gpushare.New(tc.o)
		wantErr(t, err, gpushare.ErrInvalidArgument, tc.want)
	}
}

func TestLifecycle(t *testing.T) {
	s := newScheduler(t, gpushare.Options{})
	mustAdd(t, s, sharedNode("n1", 2, 16))
	mustAdd(t, s, sharedNode("n2", 1, 8))
	pod := newPod(t, gpushare.Request{ID: "default/p1", GPUMemory: 12})
	if pod.ID() != "default/p1" || !pod.UsesGPUs() {
		t.Fatalf("pod %q uses GPUs %v", pod.ID(), pod.UsesGPUs())
	}

	if fits, why, err := s.Fit(pod, "n1"); err != nil || !fits || why != "" {
		t.Fatalf("Fit n1 = %v %q %v", fits, why, err)
	}
	if fits, why, err := s.Fit(pod, "n2"); err != nil || fits || why == "" {
		t.Fatalf("Fit n2 (8 units for 12) = %v %q %v", fits, why, err)
	}
	if fits, why, err := s.Fit(pod, "nope"); err != nil || fits || !strings.Contains(why, "nope") {
		t.Fatalf("Fit of an unknown node = %v %q %v", fits, why, err)
	}

	all, err := s.Filter(pod, nil)
	if err != nil || len(all) != 2 {
		t.Fatalf("Filter(nil) = %+v, %v", all, err)
	}
	some, err := s.Filter(pod, []string{"n2", "n1", "ghost"})
	if err != nil || len(some) != 3 {
		t.Fatalf("Filter = %+v, %v", some, err)
	}
	want := []struct {
		node string
		fits bool
	}{{"n2", false}, {"n1", true}, {"ghost", false}}
	for i, w := range want {
		if some[i].Node != w.node || some[i].Fits != w.fits || (some[i].Reason == "") == !w.fits {
			t.Errorf("Filter[%d] = %+v, want %s fits=%v", i, some[i], w.node, w.fits)
		}
	}
	if none, err := s.Filter(pod, []string{}); err != nil || len(none) != 0 {
		t.Errorf("Filter(empty) = %+v, %v", none, err)
	}

	ranks, err := s.Rank(pod, []string{"n1", "n2", "ghost", ""})
	if err != nil || len(ranks) != 4 {
		t.Fatalf("Rank = %v, %v", ranks, err)
	}
	if ranks[0] < 0 || ranks[0] > 10 || ranks[1] != -1 || ranks[2] != -1 || ranks[3] != -1 {
		t.Errorf("Rank = %v, want [0..10 -1 -1 -1]", ranks)
	}
	if r, err := s.Rank(pod, nil); err != nil || len(r) != 0 {
		t.Errorf("Rank(nil) = %v, %v", r, err)
	}

	p, err := s.Reserve(pod, "n1")
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	if p.RequestID != "default/p1" || p.Node != "n1" || len(p.GPUs) != 1 || p.MemoryPerGPU != 12 ||
		p.Exclusive || p.ComputePerGPU != 0 {
		t.Fatalf("placement %+v", p)
	}
	var patch struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(p.Patch, &patch); err != nil {
		t.Fatalf("patch %s: %v", p.Patch, err)
	}
	ann := patch.Metadata.Annotations
	if ann["ALIYUN_COM_GPU_MEM_IDX"] != fmt.Sprint(p.GPUs[0]) || ann["ALIYUN_COM_GPU_MEM_POD"] != "12" ||
		ann["ALIYUN_COM_GPU_MEM_DEV"] != "16" || ann["ALIYUN_COM_GPU_MEM_ASSIGNED"] != "false" {
		t.Errorf("annotations %v", ann)
	}
	// Reserving again on the same node: the same placement.
	again, err := s.Reserve(pod, "n1")
	if err != nil || again.Node != "n1" || fmt.Sprint(again.GPUs) != fmt.Sprint(p.GPUs) {
		t.Errorf("second Reserve = %+v, %v", again, err)
	}
	_, err = s.Reserve(pod, "n2")
	wantErr(t, err, gpushare.ErrAlreadyExists, "n1")
	got, err := s.Placement("default/p1")
	if err != nil || got.Node != "n1" {
		t.Fatalf("Placement = %+v, %v", got, err)
	}

	if err := s.Confirm("default/p1"); err != nil {
		t.Fatalf("Confirm: %v", err)
	}
	// Confirmed: Forget no longer applies.
	wantErr(t, s.Forget("default/p1"), gpushare.ErrFailedPrecondition, "default/p1")
	snap, err := s.Snapshot()
	if err != nil || !json.Valid(snap) || !strings.Contains(string(snap), "default/p1") {
		t.Fatalf("Snapshot = %s, %v", snap, err)
	}
	wantErr(t, s.RemoveNode("n1"), gpushare.ErrFailedPrecondition, "n1")
	if err := s.Release("default/p1"); err != nil {
		t.Fatalf("Release: %v", err)
	}
	_, err = s.Placement("default/p1")
	wantErr(t, err, gpushare.ErrNotFound, "default/p1")
	if err := s.RemoveNode("n1"); err != nil {
		t.Fatalf("RemoveNode: %v", err)
	}
	if err := s.Check(); err != nil {
		t.Fatalf("Check: %v", err)
	}
}

func TestPlaceForgetExpire(t *testing.T) {
	s := newScheduler(t, gpushare.Options{ReservationTTL: 500 * time.Millisecond})
	mustAdd(t, s, sharedNode("n1", 1, 16))
	a := newPod(t, gpushare.Request{ID: "ns/a", GPUMemory: 8})
	b := newPod(t, gpushare.Request{ID: "ns/b", GPUMemory: 8})
	c := newPod(t, gpushare.Request{ID: "ns/c", GPUMemory: 8})
	if p, err := s.Place(a); err != nil || p.Node != "n1" {
		t.Fatalf("Place = %+v, %v", p, err)
	}
	if _, err := s.Reserve(b, ""); err != nil {
		t.Fatalf("Reserve any node: %v", err)
	}
	_, err := s.Reserve(c, "")
	wantErr(t, err, gpushare.ErrResourceExhausted, "")
	if err := s.Forget("ns/b"); err != nil {
		t.Fatalf("Forget: %v", err)
	}
	if _, err := s.Reserve(c, "n1"); err != nil {
		t.Fatalf("Reserve after Forget: %v", err)
	}
	time.Sleep(1100 * time.Millisecond)
	if n, err := s.Expire(); err != nil || n != 1 {
		t.Fatalf("Expire = %d, %v; want 1", n, err)
	}
	wantErr(t, s.Confirm("ns/c"), gpushare.ErrFailedPrecondition, "ns/c")
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}

// With NoExpiry a reservation holds until settled, and a late call about
// an earlier reservation of the same request changes nothing.
func TestReservationTokens(t *testing.T) {
	s := newScheduler(t, gpushare.Options{ReservationTTL: gpushare.NoExpiry})
	mustAdd(t, s, sharedNode("n1", 1, 16))
	slow := newPod(t, gpushare.Request{ID: "ns/slow", GPUMemory: 10})
	other := newPod(t, gpushare.Request{ID: "ns/other", GPUMemory: 10})
	first, err := s.Reserve(slow, "n1")
	if err != nil || first.Token == 0 {
		t.Fatalf("Reserve = %+v, %v", first, err)
	}
	if n, err := s.Expire(); err != nil || n != 0 {
		t.Fatalf("Expire = %d, %v; want 0", n, err)
	}
	_, err = s.Reserve(other, "n1")
	wantErr(t, err, gpushare.ErrResourceExhausted, "")
	if err := s.ForgetReservation(first); err != nil {
		t.Fatal(err)
	}
	second, err := s.Reserve(slow, "n1")
	if err != nil || second.Token == first.Token {
		t.Fatalf("Reserve again = %+v, %v", second, err)
	}
	wantErr(t, s.ForgetReservation(first), gpushare.ErrFailedPrecondition, "reserved again")
	wantErr(t, s.ConfirmReservation(first), gpushare.ErrFailedPrecondition, "reserved again")
	if err := s.ConfirmReservation(second); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}

// FitAll answers what Fit answers, node by node, by position; a pod bound
// to GPU models is not served; another node, another generation.
func TestFitAll(t *testing.T) {
	s := newScheduler(t, gpushare.Options{ReservationTTL: gpushare.NoExpiry})
	mustAdd(t, s, sharedNode("n1", 2, 16))
	mustAdd(t, s, sharedNode("n2", 1, 8))
	mustAdd(t, s, sharedNode("n3", 1, 16))
	pod := newPod(t, gpushare.Request{ID: "default/p", GPUMemory: 12})
	check := func(when string) uint64 {
		t.Helper()
		names, gen, err := s.NodeNames()
		if err != nil {
			t.Fatal(err)
		}
		verdicts, gen2, served, err := s.FitAll(pod, make([]byte, 0, 1)) // Too small: grown.
		if err != nil || !served || gen2 != gen || len(verdicts) != len(names) {
			t.Fatalf("%s: FitAll = %v %d %v %v; names %v (generation %d)", when, verdicts, gen2, served, err, names, gen)
		}
		for i, name := range names {
			fits, _, err := s.Fit(pod, name)
			if err != nil || fits != (verdicts[i] == 1) {
				t.Errorf("%s: node %s: FitAll %d, Fit %v %v", when, name, verdicts[i], fits, err)
			}
		}
		return gen
	}
	first := check("at first")
	if _, err := s.Place(newPod(t, gpushare.Request{ID: "default/fill", GPUMemory: 10})); err != nil {
		t.Fatal(err)
	}
	if check("after a place") != first {
		t.Error("a place changed the generation")
	}
	if err := s.SetNodeSchedulable("n3", false); err != nil {
		t.Fatal(err)
	}
	check("after a cordon")
	mustAdd(t, s, sharedNode("n4", 1, 16))
	if check("after a node was added") == first {
		t.Error("a node added kept the generation")
	}
	models := newPod(t, gpushare.Request{ID: "default/m", GPUMemory: 2, GPUModels: []string{"T4"}})
	if v, gen, served, err := s.FitAll(models, nil); err != nil || served || v != nil || gen != 0 {
		t.Errorf("FitAll of a pod bound to GPU models = %v %d %v %v, want not served", v, gen, served, err)
	}
}

// Rank's answer follows the names given, whatever their order, with
// repeats, unknown nodes and nodes where the pod does not fit among them.
func TestRankFollowsTheNamesGiven(t *testing.T) {
	s := newScheduler(t, gpushare.Options{ReservationTTL: gpushare.NoExpiry})
	for i, used := range []int64{0, 4, 8, 12, 15} {
		name := fmt.Sprintf("n%d", i)
		mustAdd(t, s, sharedNode(name, 1, 16))
		if used > 0 {
			fill := newPod(t, gpushare.Request{ID: "default/fill-" + name, GPUMemory: used})
			if _, err := s.Reserve(fill, name); err != nil {
				t.Fatal(err)
			}
		}
	}
	pod := newPod(t, gpushare.Request{ID: "default/p", GPUMemory: 2})
	names := []string{"n0", "n1", "ghost", "n2", "n3", "n4", "n1"}
	ranks, err := s.Rank(pod, names)
	if err != nil {
		t.Fatal(err)
	}
	if ranks[2] != -1 || ranks[6] != ranks[1] || ranks[0] < 0 || ranks[3] < 0 || ranks[4] < 0 {
		t.Fatalf("Rank(%v) = %v", names, ranks)
	}
	if ranks[5] != -1 { // n4 has 1 unit free of the 2 asked.
		t.Errorf("Rank of a node where the pod does not fit = %d", ranks[5])
	}
	reversed := slices.Clone(names)
	slices.Reverse(reversed)
	back, err := s.Rank(pod, reversed)
	if err != nil {
		t.Fatal(err)
	}
	slices.Reverse(back)
	if !slices.Equal(back, ranks) {
		t.Errorf("Rank of the names reversed, reversed back = %v, want %v", back, ranks)
	}
}

func TestFitAfter(t *testing.T) {
	s := newScheduler(t, gpushare.Options{ReservationTTL: gpushare.NoExpiry})
	mustAdd(t, s, sharedNode("n1", 2, 32))
	for _, r := range []gpushare.Request{{ID: "ns/v1", GPUMemory: 20}, {ID: "ns/v2", GPUMemory: 10},
		{ID: "ns/w", GPUMemory: 30}} {
		if _, err := s.Place(newPod(t, r)); err != nil {
			t.Fatal(err)
		}
	}
	big := newPod(t, gpushare.Request{ID: "ns/big", GPUMemory: 28})
	small := newPod(t, gpushare.Request{ID: "ns/small", GPUMemory: 2})
	for _, c := range []struct {
		pod     *gpushare.Pod
		removed []string
		added   []*gpushare.Pod
		fits    bool
		reason  string
	}{
		{big, nil, nil, false, "largest free 2"},
		{big, []string{"ns/v1"}, nil, false, "largest free 22"},
		{big, []string{"ns/v1", "ns/v2"}, nil, true, ""},
		{small, nil, []*gpushare.Pod{big}, false, "'ns/big', nominated to it"},
		{small, []string{"ns/v1", "ns/v2"}, []*gpushare.Pod{big}, true, ""},
	} {
		fit, err := s.FitAfter(c.pod, "n1", c.removed, c.added)
		if err != nil || fit.Fits != c.fits || !strings.Contains(fit.Reason, c.reason) || fit.Unresolvable {
			t.Errorf("FitAfter(%s, removed %v, %d added) = %+v, %v; want %v, %q", c.pod.ID(),
				c.removed, len(c.added), fit, err, c.fits, c.reason)
		}
	}
	huge := newPod(t, gpushare.Request{ID: "ns/huge", GPUMemory: 40})
	if fit, err := s.FitAfter(huge, "n1", nil, nil); err != nil || fit.Fits || !fit.Unresolvable {
		t.Errorf("FitAfter(40 units on 32-unit GPUs) = %+v, %v; want unresolvable", fit, err)
	}
	// Nothing changed.
	if fits, _, _ := s.Fit(big, "n1"); fits {
		t.Error("the dry run freed the victims for real")
	}
	closed := newPod(t, gpushare.Request{ID: "ns/closed", GPUMemory: 1})
	closed.Close()
	_, err := s.FitAfter(small, "n1", nil, []*gpushare.Pod{big, closed})
	wantErr(t, err, gpushare.ErrClosed, "")
	// The added pods' locks were given back: Close does not wait.
	big.Close()
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestNodes(t *testing.T) {
	s := newScheduler(t, gpushare.Options{})
	mustAdd(t, s, gpushare.Node{
		Name: "n1", GPUMemory: []int64{16, 16}, GPUUUIDs: []string{"GPU-a", "GPU-b"},
		GPUModel: "Tesla-T4", CPU: 8000, HostMemory: 32768, Sharing: gpushare.SharingOn,
	})
	wantErr(t, s.AddNode(sharedNode("n1", 1, 8)), gpushare.ErrAlreadyExists, "n1")
	wantErr(t, s.AddNode(gpushare.Node{Name: "n2", GPUMemory: []int64{8}, GPUUUIDs: []string{}}),
		gpushare.ErrInvalidArgument, "UUID")
	wantErr(t, s.AddNode(gpushare.Node{Name: "n\x002", GPUMemory: []int64{8}}),
		gpushare.ErrInvalidArgument, "NUL")
	wantErr(t, s.AddNode(gpushare.Node{Name: "", GPUMemory: []int64{8}}), gpushare.ErrInvalidArgument, "")
	wantErr(t, s.AddNode(gpushare.Node{Name: "big", GPUMemory: make([]int64, 65)}),
		gpushare.ErrInvalidArgument, "")
	wantErr(t, s.RemoveNode("ghost"), gpushare.ErrNotFound, "ghost")
	wantErr(t, s.SetNodeSchedulable("ghost", false), gpushare.ErrNotFound, "ghost")
	wantErr(t, s.SetGPUHealthy("n1", 7, false), gpushare.ErrInvalidArgument, "")

	pod := newPod(t, gpushare.Request{ID: "ns/p", GPUMemory: 10, GPUModels: []string{"Tesla-T4"}})
	other := newPod(t, gpushare.Request{ID: "ns/q", GPUMemory: 10, GPUModels: []string{"A100"}})
	if fits, why, _ := s.Fit(other, "n1"); fits || why == "" {
		t.Errorf("another model fits: %v %q", fits, why)
	}
	if err := s.SetNodeSchedulable("n1", false); err != nil {
		t.Fatal(err)
	}
	if fits, why, _ := s.Fit(pod, "n1"); fits || why == "" {
		t.Errorf("a cordoned node fits: %v %q", fits, why)
	}
	if err := s.SetNodeSchedulable("n1", true); err != nil {
		t.Fatal(err)
	}
	for g := 0; g < 2; g++ {
		if err := s.SetGPUHealthy("n1", g, false); err != nil {
			t.Fatal(err)
		}
	}
	if fits, _, _ := s.Fit(pod, "n1"); fits {
		t.Error("a node without a healthy GPU fits")
	}
	if err := s.SetGPUHealthy("n1", 1, true); err != nil {
		t.Fatal(err)
	}
	p, err := s.Reserve(pod, "n1")
	if err != nil || fmt.Sprint(p.GPUs) != "[1]" {
		t.Fatalf("Reserve = %+v, %v; want GPU 1, the healthy one", p, err)
	}
}

func TestRequests(t *testing.T) {
	_, err := gpushare.NewPod(gpushare.Request{GPUMemory: 4})
	wantErr(t, err, gpushare.ErrInvalidArgument, "")
	_, err = gpushare.NewPod(gpushare.Request{ID: "ns/p", GPUMemory: -4})
	wantErr(t, err, gpushare.ErrInvalidArgument, "")
	_, err = gpushare.NewPod(gpushare.Request{ID: "ns/p", GPUMemory: 4, GPUModels: []string{"a\x00"}})
	wantErr(t, err, gpushare.ErrInvalidArgument, "NUL")
	cpuOnly := newPod(t, gpushare.Request{ID: "ns/cpu", CPU: 500})
	if cpuOnly.UsesGPUs() {
		t.Error("a CPU-only request uses GPUs")
	}
	whole := newPod(t, gpushare.Request{ID: "ns/whole", WholeGPUs: 2})
	s := newScheduler(t, gpushare.Options{})
	mustAdd(t, s, sharedNode("n1", 2, 16))
	p, err := s.Reserve(whole, "n1")
	if err != nil || !p.Exclusive || len(p.GPUs) != 2 {
		t.Fatalf("whole GPUs: %+v, %v", p, err)
	}
	multi := newPod(t, gpushare.Request{ID: "ns/multi", GPUMemory: 8, GPUCount: 2})
	if fits, why, _ := s.Fit(multi, "n1"); fits || why == "" {
		t.Errorf("fits beside exclusive GPUs: %v %q", fits, why)
	}
}

func TestClosed(t *testing.T) {
	s, err := gpushare.New(gpushare.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mustAdd(t, s, sharedNode("n1", 1, 16))
	pod := newPod(t, gpushare.Request{ID: "ns/p", GPUMemory: 4})
	s.Close()
	s.Close() // Again: nothing.
	closed := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, gpushare.ErrClosed) || !errors.Is(err, gpushare.ErrFailedPrecondition) {
			t.Errorf("%s after Close: %v", what, err)
		}
	}
	closed("AddNode", s.AddNode(sharedNode("n2", 1, 16)))
	closed("RemoveNode", s.RemoveNode("n1"))
	closed("SetNodeSchedulable", s.SetNodeSchedulable("n1", false))
	closed("SetGPUHealthy", s.SetGPUHealthy("n1", 0, false))
	_, err = s.ApplyNodeEvent(gpushare.EventAdded, []byte(`{}`))
	closed("ApplyNodeEvent", err)
	_, err = s.ApplyPodEvent(gpushare.EventAdded, []byte(`{}`))
	closed("ApplyPodEvent", err)
	_, _, err = s.Fit(pod, "n1")
	closed("Fit", err)
	_, err = s.Filter(pod, nil)
	closed("Filter", err)
	_, err = s.Rank(pod, []string{"n1"})
	closed("Rank", err)
	_, err = s.Reserve(pod, "n1")
	closed("Reserve", err)
	_, err = s.Place(pod)
	closed("Place", err)
	closed("Confirm", s.Confirm("ns/p"))
	closed("Forget", s.Forget("ns/p"))
	closed("Release", s.Release("ns/p"))
	_, err = s.Expire()
	closed("Expire", err)
	_, err = s.Placement("ns/p")
	closed("Placement", err)
	_, err = s.Snapshot()
	closed("Snapshot", err)
	closed("Check", s.Check())

	s2 := newScheduler(t, gpushare.Options{})
	mustAdd(t, s2, sharedNode("n1", 1, 16))
	pod.Close()
	pod.Close()
	if pod.ID() != "ns/p" || !pod.UsesGPUs() {
		t.Error("ID and UsesGPUs after Close")
	}
	_, _, err = s2.Fit(pod, "n1")
	closed("Fit of a closed pod", err)
	_, err = s2.Reserve(pod, "n1")
	closed("Reserve of a closed pod", err)
	_, _, err = s2.Fit(nil, "n1")
	wantErr(t, err, gpushare.ErrInvalidArgument, "nil")
	var nilScheduler *gpushare.Scheduler
	wantErr(t, nilScheduler.Check(), gpushare.ErrInvalidArgument, "nil")
}

// Goroutines reserve, confirm and release on a small cluster while others
// read it and one closes and drops pods; every placement must stay within
// the GPUs and the state consistent.
func TestConcurrent(t *testing.T) {
	s := newScheduler(t, gpushare.Options{ReservationTTL: time.Minute})
	nodes := []string{"n0", "n1", "n2", "n3"}
	for _, n := range nodes {
		mustAdd(t, s, sharedNode(n, 4, 16))
	}
	const workers, rounds = 8, 150
	var wg sync.WaitGroup
	errs := make(chan error, workers*2)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				pod, err := gpushare.NewPod(gpushare.Request{
					ID: fmt.Sprintf("ns/w%d-%d", w, i), GPUMemory: int64(1 + (w+i)%12),
				})
				if err != nil {
					errs <- err
					return
				}
				node := ""
				if i%3 == 0 {
					node = nodes[(w+i)%len(nodes)]
				}
				p, err := s.Reserve(pod, node)
				switch {
				case errors.Is(err, gpushare.ErrResourceExhausted):
					pod.Close()
					continue
				case err != nil:
					errs <- fmt.Errorf("Reserve %s: %w", pod.ID(), err)
					return
				}
				if i%4 == 0 {
					err = s.Forget(p.RequestID)
				} else if err = s.Confirm(p.RequestID); err == nil && i%2 == 0 {
					err = s.Release(p.RequestID)
				}
				if err != nil {
					errs <- fmt.Errorf("%s: %w", p.RequestID, err)
					return
				}
				if i%5 == 0 {
					pod.Close() // The others are left to the cleanup.
				}
			}
		}(w)
	}
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pod, err := gpushare.NewPod(gpushare.Request{ID: "ns/reader", GPUMemory: 6})
			if err != nil {
				errs <- err
				return
			}
			defer pod.Close()
			for i := 0; i < rounds; i++ {
				if _, err := s.Filter(pod, nodes); err != nil {
					errs <- err
					return
				}
				ranks, err := s.Rank(pod, nodes)
				if err != nil || len(ranks) != len(nodes) {
					errs <- fmt.Errorf("Rank = %v, %v", ranks, err)
					return
				}
				if err := s.Check(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := s.Check(); err != nil {
		t.Fatalf("Check: %v", err)
	}
}

// Close waits for calls in progress; calls after it fail cleanly.
func TestCloseWhileBusy(t *testing.T) {
	s, err := gpushare.New(gpushare.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mustAdd(t, s, sharedNode("n1", 2, 16))
	pod := newPod(t, gpushare.Request{ID: "ns/p", GPUMemory: 4})
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if _, _, err := s.Fit(pod, "n1"); err != nil {
					if !errors.Is(err, gpushare.ErrClosed) {
						t.Errorf("Fit: %v", err)
					}
					return
				}
			}
		}()
	}
	time.Sleep(20 * time.Millisecond)
	s.Close()
	wg.Wait()
}
