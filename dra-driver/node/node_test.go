package node

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"gpushare.dev/dra-driver/devices"
)

var inv = devices.Inventory{MemoryUnit: "GiB", DriverVersion: "550.54.15", GPUs: []devices.GPU{
	{Index: 0, UUID: "GPU-a", Units: 40}, {Index: 1, UUID: "GPU-b", Units: 40}}}

// claim is an allocated claim of uid on node n1: one result per device
// (name → memory; "" = none recorded, the whole GPU).
func claim(uid string, devs ...[2]string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c-" + uid, UID: types.UID(uid)}}
	var rs []resourceapi.DeviceRequestAllocationResult
	for _, d := range devs {
		r := resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: devices.DriverName, Pool: "n1", Device: d[0]}
		if d[1] != "" {
			r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{devices.MemoryCapacity: resource.MustParse(d[1])}
		}
		rs = append(rs, r)
	}
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: rs}}
	return c
}

func prepareAll(t *testing.T, d *Driver, claims ...*resourceapi.ResourceClaim) map[types.UID]kubeletplugin.PrepareResult {
	t.Helper()
	out, err := d.PrepareResourceClaims(context.Background(), claims)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(claims) {
		t.Fatalf("%d results for %d claims", len(out), len(claims))
	}
	return out
}

func TestAPreparedClaimIsACDISpecWithItsEnvironment(t *testing.T) {
	dir := t.TempDir()
	d := New("n1", dir, inv)
	res := prepareAll(t, d, claim("u1", [2]string{"gpu-1", "8Gi"}, [2]string{"gpu-0", "8Gi"}))["u1"]
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	// One CDI device for the claim, on its first device, for all requests.
	if len(res.Devices) != 2 || len(res.Devices[0].CDIDeviceIDs) != 1 || res.Devices[0].Requests != nil ||
		len(res.Devices[1].CDIDeviceIDs) != 0 || res.Devices[1].Requests[0] != "gpu" {
		t.Fatalf("devices %+v", res.Devices)
	}
	if id := res.Devices[0].CDIDeviceIDs[0]; id != "gpu.gpushare.dev/claim=u1" {
		t.Fatalf("CDI id %q", id)
	}
	data, err := os.ReadFile(filepath.Join(dir, "gpu.gpushare.dev-claim_u1.json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec cdispec.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	env := strings.Join(spec.Devices[0].ContainerEdits.Env, " ")
	for _, want := range []string{"NVIDIA_VISIBLE_DEVICES=GPU-a,GPU-b", "ALIYUN_COM_GPU_MEM_IDX=0-1", "ALIYUN_COM_GPU_MEM_POD=16"} {
		if !strings.Contains(env, want) {
			t.Errorf("env %q lacks %s", env, want)
		}
	}
	held, err := ReadPrepared(dir)
	if err != nil || held["u1"].Units[0] != 8 || held["u1"].Units[1] != 8 || held["u1"].Claim != "ns/c-u1" {
		t.Fatalf("prepared %+v %v", held, err)
	}
	// Unprepare removes it; twice is no error, nor an unknown claim.
	for i := 0; i < 2; i++ {
		out, err := d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: "u1"}, {UID: "nope"}})
		if err != nil || out["u1"] != nil || out["nope"] != nil || len(out) != 2 {
			t.Fatalf("unprepare %v %v", out, err)
		}
	}
	if held, _ := ReadPrepared(dir); len(held) != 0 {
		t.Fatalf("still prepared: %+v", held)
	}
}

func TestNoGpuIsPreparedBeyondItsMemoryWhateverTheAllocationSays(t *testing.T) {
	dir := t.TempDir()
	d := New("n1", dir, inv)
	out := prepareAll(t, d, claim("a", [2]string{"gpu-0", "30Gi"}), claim("b", [2]string{"gpu-0", "10Gi"}),
		claim("c", [2]string{"gpu-0", "1Gi"}), claim("whole", [2]string{"gpu-1", ""}), claim("d", [2]string{"gpu-1", "1Gi"}))
	for uid, ok := range map[types.UID]bool{"a": true, "b": true, "c": false, "whole": true, "d": false} {
		if (out[uid].Err == nil) != ok {
			t.Errorf("claim %s: err %v, want prepared=%v", uid, out[uid].Err, ok)
		}
	}
	if err := out["c"].Err; err == nil || !strings.Contains(err.Error(), "GPU 0 would hold 41 units") {
		t.Errorf("c: %v", err)
	}
	// A second driver (a restart) reads the same ledger from the files.
	d2 := New("n1", dir, inv)
	if err := prepareAll(t, d2, claim("e", [2]string{"gpu-0", "1Gi"}))["e"].Err; err == nil {
		t.Fatal("a restarted driver overcommitted GPU 0")
	}
	// Preparing a claim again (the kubelet restarted) is no double count.
	if err := prepareAll(t, d2, claim("a", [2]string{"gpu-0", "30Gi"}))["a"].Err; err != nil {
		t.Fatal(err)
	}
	// Releasing frees its units.
	if _, err := d2.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: "b"}}); err != nil {
		t.Fatal(err)
	}
	if err := prepareAll(t, d2, claim("e", [2]string{"gpu-0", "10Gi"}))["e"].Err; err != nil {
		t.Fatal(err)
	}
}

func TestBadClaimsAndFilesAreRefusedByName(t *testing.T) {
	dir := t.TempDir()
	d := New("n1", dir, inv)
	other := claim("x", [2]string{"gpu-0", "1Gi"})
	other.Status.Allocation.Devices.Results[0].Pool = "n2"
	out := prepareAll(t, d, other, claim("y", [2]string{"gpu-9", "1Gi"}))
	if out["x"].Err == nil || !strings.Contains(out["x"].Err.Error(), `"n2"`) {
		t.Errorf("x: %v", out["x"].Err)
	}
	if out["y"].Err == nil || !strings.Contains(out["y"].Err.Error(), "gpu-9") {
		t.Errorf("y: %v", out["y"].Err)
	}
	// A damaged file of ours: nothing is prepared rather than miscounted.
	if err := os.WriteFile(filepath.Join(dir, "gpu.gpushare.dev-claim_z.json"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{claim("w", [2]string{"gpu-0", "1Gi"})}); err == nil ||
		!strings.Contains(err.Error(), "gpu.gpushare.dev-claim_z.json") {
		t.Fatalf("damaged ledger: %v", err)
	}
	// Other files in the CDI folder are not ours.
	os.Remove(filepath.Join(dir, "gpu.gpushare.dev-claim_z.json"))
	os.WriteFile(filepath.Join(dir, "nvidia.yaml"), []byte("x"), 0o644)
	if err := prepareAll(t, d, claim("w", [2]string{"gpu-0", "1Gi"}))["w"].Err; err != nil {
		t.Fatal(err)
	}
}

func TestUnhealthyGpusAreTaintedAndNotPreparedAnew(t *testing.T) {
	dir := t.TempDir()
	d := New("n1", dir, inv)
	d.now = func() time.Time { return time.Unix(1000, 0) }
	if err := prepareAll(t, d, claim("old", [2]string{"gpu-1", "4Gi"}))["old"].Err; err != nil {
		t.Fatal(err)
	}
	if !d.SetHealth(map[int]string{1: "XID 79"}) || d.SetHealth(map[int]string{1: "XID 79"}) {
		t.Fatal("SetHealth's change report is wrong")
	}
	r, err := d.Resources()
	if err != nil {
		t.Fatal(err)
	}
	devs := r.Pools["n1"].Slices[0].Devices
	if len(devs[0].Taints) != 0 || len(devs[1].Taints) != 1 {
		t.Fatalf("taints %+v / %+v", devs[0].Taints, devs[1].Taints)
	}
	if tt := devs[1].Taints[0]; tt.Key != "gpu.gpushare.dev/unhealthy" || tt.Value != "XID-79" ||
		tt.Effect != resourceapi.DeviceTaintEffectNoSchedule || tt.TimeAdded.Unix() != 1000 {
		t.Fatalf("taint %+v", tt)
	}
	out := prepareAll(t, d, claim("new", [2]string{"gpu-1", "4Gi"}), claim("old", [2]string{"gpu-1", "4Gi"}))
	if out["new"].Err == nil || !strings.Contains(out["new"].Err.Error(), "unhealthy (XID 79)") || out["old"].Err != nil {
		t.Fatalf("new %v, old %v", out["new"].Err, out["old"].Err)
	}
	// Healthy again: the taint goes.
	d.SetHealth(nil)
	r, _ = d.Resources()
	if len(r.Pools["n1"].Slices[0].Devices[1].Taints) != 0 {
		t.Fatal("taint kept after recovery")
	}
}

func TestHealthIsReportedAtOnceAndOnChange(t *testing.T) {
	d := New("n1", t.TempDir(), inv)
	ctx, cancel := context.WithCancel(context.Background())
	reports := make(chan kubeletplugin.DeviceHealthReport)
	done := make(chan error)
	go func() { done <- d.WatchHealthStatus(ctx, reports) }()
	first := <-reports
	if len(first.Devices) != 2 || first.Devices[1].Health != kubeletplugin.HealthStatusHealthy {
		t.Fatalf("first report %+v", first)
	}
	d.SetHealth(map[int]string{1: "XID 48"})
	next := <-reports
	if next.Devices[1].Health != kubeletplugin.HealthStatusUnhealthy || next.Devices[1].Message != "XID 48" ||
		next.Devices[0].Health != kubeletplugin.HealthStatusHealthy || next.Devices[1].DeviceName != "gpu-1" {
		t.Fatalf("report %+v", next)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
