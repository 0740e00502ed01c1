package gpushare_test

import (
	"encoding/json"
	"strings"
	"testing"

	"gpushare.dev/go/gpushare"
)

// A Node as a kubelet with gpushare-device-plugin reports it (the shape of
// tests/kube/harness.py's create_node): two GPUs of 16 units.
func nodeJSON(name string, unschedulable bool) []byte {
	node := map[string]any{
		"apiVersion": "v1", "kind": "Node",
		"metadata": map[string]any{
			"name": name,
			"labels": map[string]string{
				"gpushare": "true", "kubernetes.io/hostname": name,
				"nvidia.com/gpu.product": "Tesla-T4",
			},
			"annotations": map[string]string{"node.alpha.kubernetes.io/ttl": "0"},
		},
		"spec": map[string]any{"unschedulable": unschedulable},
		"status": map[string]any{
			"capacity": map[string]string{
				"cpu": "64", "memory": "256Gi", "pods": "110",
				"aliyun.com/gpu-mem": "32", "aliyun.com/gpu-count": "2", "nvidia.com/gpu": "2",
			},
			"allocatable": map[string]string{
				"cpu": "64", "memory": "256Gi", "pods": "110",
				"aliyun.com/gpu-mem": "32", "aliyun.com/gpu-count": "2", "nvidia.com/gpu": "2",
			},
			"addresses": []map[string]string{{"type": "InternalIP", "address": "10.0.0.7"}},
		},
	}
	b, err := json.Marshal(node)
	if err != nil {
		panic(err)
	}
	return b
}

// A Pod as users write it: limits aliyun.com/gpu-mem, the gpu-count label
// for several GPUs; `node` and `annotations` for a bound one.
func podJSON(name, uid string, gpuMem string, gpuCount string, node string, annotations map[string]string) []byte {
	labels := map[string]string{"app": "demo"}
	if gpuCount != "" {
		labels["aliyun.com/gpu-count"] = gpuCount
	}
	limits := map[string]string{"cpu": "1"}
	if gpuMem != "" {
		limits["aliyun.com/gpu-mem"] = gpuMem
	}
	spec := map[string]any{
		"containers": []any{map[string]any{
			"name": "main", "image": "registry.invalid/cuda:12",
			"resources": map[string]any{"limits": limits, "requests": limits},
		}},
		"schedulerName": "gpushare-scheduler",
	}
	status := map[string]any{"phase": "Pending"}
	if node != "" {
		spec["nodeName"] = node
		status["phase"] = "Running"
	}
	pod := map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{
			"name": name, "namespace": "default", "uid": uid,
			"labels": labels, "annotations": annotations,
			"creationTimestamp": "2026-01-01T00:00:00Z",
		},
		"spec": spec, "status": status,
	}
	b, err := json.Marshal(pod)
	if err != nil {
		panic(err)
	}
	return b
}

func TestParsePod(t *testing.T) {
	pod, err := gpushare.ParsePod(podJSON("p1", "uid-1", "8", "2", "", nil))
	if err != nil {
		t.Fatalf("ParsePod: %v", err)
	}
	defer pod.Close()
	if pod.ID() != "default/p1" || !pod.UsesGPUs() {
		t.Fatalf("pod %q uses GPUs %v", pod.ID(), pod.UsesGPUs())
	}
	plain, err := gpushare.ParsePod(podJSON("web", "uid-2", "", "", "", nil))
	if err != nil {
		t.Fatalf("ParsePod without GPUs: %v", err)
	}
	defer plain.Close()
	if plain.UsesGPUs() {
		t.Error("a pod without aliyun.com/gpu-mem uses GPUs")
	}

	_, err = gpushare.ParsePod(podJSON("bad", "uid-3", "lots", "", "", nil))
	wantErr(t, err, gpushare.ErrInvalidArgument, "aliyun.com/gpu-mem")
	_, err = gpushare.ParsePod(podJSON("bad", "uid-3", "4", "0", "", nil))
	wantErr(t, err, gpushare.ErrInvalidArgument, "aliyun.com/gpu-count")
	_, err = gpushare.ParsePod([]byte(`{"metadata":`))
	wantErr(t, err, gpushare.ErrInvalidArgument, "JSON")
	_, err = gpushare.ParsePod(nil)
	wantErr(t, err, gpushare.ErrInvalidArgument, "")

	// 8 units over 2 GPUs: 4 on each.
	s := newScheduler(t, gpushare.Options{})
	if _, err := s.ApplyNodeEvent(gpushare.EventAdded, nodeJSON("gpu-node-1", false)); err != nil {
		t.Fatal(err)
	}
	p, err := s.Reserve(pod, "gpu-node-1")
	if err != nil || len(p.GPUs) != 2 || p.MemoryPerGPU != 4 {
		t.Fatalf("Reserve = %+v, %v", p, err)
	}
}

func TestNodeEvents(t *testing.T) {
	s := newScheduler(t, gpushare.Options{})
	r, err := s.ApplyNodeEvent(gpushare.EventAdded, nodeJSON("gpu-node-1", false))
	if err != nil || r.NodesAdded != 1 {
		t.Fatalf("ADDED: %+v, %v", r, err)
	}
	pod := newPod(t, gpushare.Request{ID: "default/p", GPUMemory: 10})
	if fits, why, err := s.Fit(pod, "gpu-node-1"); err != nil || !fits {
		t.Fatalf("Fit on the added node: %v %q %v", fits, why, err)
	}
	too := newPod(t, gpushare.Request{ID: "default/too", GPUMemory: 17})
	if fits, _, _ := s.Fit(too, "gpu-node-1"); fits {
		t.Error("17 units fit a GPU of 16")
	}
	snap, _ := s.Snapshot()
	if !strings.Contains(string(snap), "gpu-node-1") {
		t.Errorf("snapshot %s", snap)
	}

	r, err = s.ApplyNodeEvent(gpushare.EventModified, nodeJSON("gpu-node-1", true))
	if err != nil || r.NodesUpdated != 1 {
		t.Fatalf("MODIFIED (cordon): %+v, %v", r, err)
	}
	if fits, _, _ := s.Fit(pod, "gpu-node-1"); fits {
		t.Error("a cordoned node fits")
	}
	r, err = s.ApplyNodeEvent(gpushare.EventDeleted, nodeJSON("gpu-node-1", true))
	if err != nil || r.NodesRemoved != 1 {
		t.Fatalf("DELETED: %+v, %v", r, err)
	}
	if res, _ := s.Filter(pod, nil); len(res) != 0 {
		t.Errorf("nodes left: %+v", res)
	}

	_, err = s.ApplyNodeEvent("BOOKMARK", nodeJSON("gpu-node-1", false))
	wantErr(t, err, gpushare.ErrInvalidArgument, "BOOKMARK")
	_, err = s.ApplyNodeEvent(gpushare.EventAdded, []byte(`{"metadata":{}}`))
	wantErr(t, err, gpushare.ErrInvalidArgument, "name")
	bad := strings.Replace(string(nodeJSON("n2", false)), `"aliyun.com/gpu-count":"2"`, `"aliyun.com/gpu-count":"x"`, 2)
	_, err = s.ApplyNodeEvent(gpushare.EventAdded, []byte(bad))
	wantErr(t, err, gpushare.ErrInvalidArgument, "aliyun.com/gpu-count")
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}

// The life of a pod as a kube-scheduler plugin sees it: pending (ADDED),
// reserved, its bind annotations patched, bound (MODIFIED: confirmed),
// deleted (released). Then a restart: a fresh scheduler restores it from
// the annotations.
func TestPodEvents(t *testing.T) {
	s := newScheduler(t, gpushare.Options{})
	if _, err := s.ApplyNodeEvent(gpushare.EventAdded, nodeJSON("gpu-node-1", false)); err != nil {
		t.Fatal(err)
	}
	pending := podJSON("p1", "uid-1", "6", "", "", nil)
	if _, err := s.ApplyPodEvent(gpushare.EventAdded, pending); err != nil {
		t.Fatalf("pending ADDED: %v", err)
	}
	pod, err := gpushare.ParsePod(pending)
	if err != nil {
		t.Fatal(err)
	}
	defer pod.Close()
	p, err := s.Reserve(pod, "gpu-node-1")
	if err != nil {
		t.Fatal(err)
	}
	ann, err := p.Annotations()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := ann["scheduler.framework.gpushare.allocation"]; !ok || ann["ALIYUN_COM_GPU_MEM_POD"] != "6" {
		t.Fatalf("patch %s", p.Patch)
	}
	// The patch lands while the pod is still pending: nothing changes.
	if r, err := s.ApplyPodEvent(gpushare.EventModified, podJSON("p1", "uid-1", "6", "", "", ann)); err != nil ||
		r.Confirmed+r.Released != 0 {
		t.Fatalf("annotated, pending: %+v, %v", r, err)
	}
	bound := podJSON("p1", "uid-1", "6", "", "gpu-node-1", ann)
	if r, err := s.ApplyPodEvent(gpushare.EventModified, bound); err != nil || r.Confirmed != 1 {
		t.Fatalf("bound: %+v, %v", r, err)
	}
	// A late DELETED of an older pod of the same name changes nothing.
	if r, err := s.ApplyPodEvent(gpushare.EventDeleted, podJSON("p1", "uid-0", "6", "", "gpu-node-1", ann)); err != nil ||
		r.Released != 0 {
		t.Fatalf("older pod deleted: %+v, %v", r, err)
	}

	restarted := newScheduler(t, gpushare.Options{})
	if _, err := restarted.ApplyNodeEvent(gpushare.EventAdded, nodeJSON("gpu-node-1", false)); err != nil {
		t.Fatal(err)
	}
	if r, err := restarted.ApplyPodEvent(gpushare.EventAdded, bound); err != nil || r.Restored != 1 {
		t.Fatalf("restore: %+v, %v", r, err)
	}
	got, err := restarted.Placement("default/p1")
	if err != nil || got.Node != "gpu-node-1" || len(got.GPUs) != 1 || got.GPUs[0] != p.GPUs[0] {
		t.Fatalf("restored placement %+v, %v; want GPUs %v", got, err, p.GPUs)
	}

	if r, err := s.ApplyPodEvent(gpushare.EventDeleted, bound); err != nil || r.Released != 1 {
		t.Fatalf("deleted: %+v, %v", r, err)
	}
	_, err = s.Placement("default/p1")
	wantErr(t, err, gpushare.ErrNotFound, "default/p1")
	_, err = s.ApplyPodEvent(gpushare.EventAdded, []byte(`[]`))
	wantErr(t, err, gpushare.ErrInvalidArgument, "")
	for _, sc := range []*gpushare.Scheduler{s, restarted} {
		if err := sc.Check(); err != nil {
			t.Fatal(err)
		}
	}
}

// A pod deleted and recreated under its name before the DELETED event
// arrives: the new pod's Reserve releases the old pod's placement (another
// UID) first, as gpushare-extender's bind does.
func TestRecreatedPod(t *testing.T) {
	s := newScheduler(t, gpushare.Options{})
	if _, err := s.ApplyNodeEvent(gpushare.EventAdded, nodeJSON("gpu-node-1", false)); err != nil {
		t.Fatal(err)
	}
	old, err := gpushare.ParsePod(podJSON("p1", "uid-1", "16", "2", "", nil))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if _, err := s.Reserve(old, "gpu-node-1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Confirm("default/p1"); err != nil {
		t.Fatal(err)
	}
	recreated, err := gpushare.ParsePod(podJSON("p1", "uid-2", "16", "2", "", nil))
	if err != nil {
		t.Fatal(err)
	}
	defer recreated.Close()
	p, err := s.Reserve(recreated, "gpu-node-1")
	if err != nil || len(p.GPUs) != 2 {
		t.Fatalf("Reserve of the recreated pod: %+v, %v", p, err)
	}
	// The old pod's late DELETED leaves the new pod's placement alone.
	if r, err := s.ApplyPodEvent(gpushare.EventDeleted, podJSON("p1", "uid-1", "16", "2", "gpu-node-1", nil)); err != nil ||
		r.Released != 0 {
		t.Fatalf("late DELETED of the old pod: %+v, %v", r, err)
	}
	if _, err := s.Placement("default/p1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}

// A GPU pod bound without gpushare's annotations (another scheduler's) holds
// its node: Fit refuses it, naming the pod, until the pod is gone.
func TestPodOfAnotherSchedulerHoldsItsNode(t *testing.T) {
	s := newScheduler(t, gpushare.Options{})
	if _, err := s.ApplyNodeEvent(gpushare.EventAdded, nodeJSON("gpu-node-1", false)); err != nil {
		t.Fatal(err)
	}
	other := podJSON("other", "uid-o", "4", "", "gpu-node-1", nil)
	if r, err := s.ApplyPodEvent(gpushare.EventAdded, other); err != nil || r.NodesUpdated != 1 {
		t.Fatalf("other scheduler's pod: %+v, %v", r, err)
	}
	pod, err := gpushare.ParsePod(podJSON("p1", "uid-1", "2", "", "", nil))
	if err != nil {
		t.Fatal(err)
	}
	defer pod.Close()
	fits, reason, err := s.Fit(pod, "gpu-node-1")
	if err != nil || fits || !strings.Contains(reason, "default/other: no bind annotations") {
		t.Fatalf("Fit on a held node: %v %q %v", fits, reason, err)
	}
	fit, err := s.FitAfter(pod, "gpu-node-1", nil, nil)
	if err != nil || fit.Fits || !fit.Unresolvable || !strings.Contains(fit.Reason, "did not place") {
		t.Fatalf("FitAfter on a held node: %+v %v", fit, err)
	}
	if _, err := s.ApplyPodEvent(gpushare.EventDeleted, other); err != nil {
		t.Fatal(err)
	}
	if fits, reason, err := s.Fit(pod, "gpu-node-1"); err != nil || !fits {
		t.Fatalf("Fit once the pod is gone: %v %q %v", fits, reason, err)
	}
}
