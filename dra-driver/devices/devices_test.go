package devices

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

// What gpushare-device-plugin --discover printed for the H200 of
// ../shared/nvml/h200-nvml.json (through tests/nvml_stub), and two A100s.
const h200 = `{"driver_version": "580.159.04", "memory_unit": "GiB", "gpus": [
 {"compute_capability": "9.0", "index": 0, "memory_bytes": 150754820096, "mig_enabled": false,
  "name": "NVIDIA H200", "numa_node": -1, "pci_bus_id": "00000000:00:06.0", "units": 140,
  "uuid": "GPU-73009919-09b5-1b9e-5039-1eb42f2431d2"}]}`

const twoA100MiB = `{"driver_version": "550.54.15", "memory_unit": "MiB", "gpus": [
 {"compute_capability": "8.0", "index": 0, "memory_bytes": 42949672960, "name": "NVIDIA A100-SXM4-40GB",
  "numa_node": 0, "pci_bus_id": "00000000:07:00.0", "units": 40960, "uuid": "GPU-a"},
 {"compute_capability": "8.0", "index": 1, "memory_bytes": 42949672960, "name": "NVIDIA A100-SXM4-40GB",
  "numa_node": 1, "pci_bus_id": "00000000:0B:00.0", "units": 40960, "uuid": "GPU-b"}]}`

func mustDevices(t *testing.T, text string) Inventory {
	t.Helper()
	inv, err := ParseInventory([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

func TestEachGpuIsADeviceWithConsumableMemory(t *testing.T) {
	devs, err := Devices(mustDevices(t, h200))
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 1 || devs[0].Name != "gpu-0" {
		t.Fatalf("devices %+v", devs)
	}
	d := devs[0]
	if d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations {
		t.Errorf("not shareable: %+v", d)
	}
	if got := *d.Attributes["uuid"].StringValue; got != "GPU-73009919-09b5-1b9e-5039-1eb42f2431d2" {
		t.Errorf("uuid %q", got)
	}
	if got := *d.Attributes["productName"].StringValue; got != "NVIDIA H200" {
		t.Errorf("productName %q", got)
	}
	if got := *d.Attributes["pciBusID"].StringValue; got != "00000000:00:06.0" {
		t.Errorf("pciBusID %q", got)
	}
	if _, ok := d.Attributes["numaNode"]; ok {
		t.Errorf("numaNode given although NVML does not know it")
	}
	if got := *d.Attributes["computeCapability"].VersionValue; got != "9.0.0" {
		t.Errorf("computeCapability %q", got)
	}
	if got := *d.Attributes["driverVersion"].VersionValue; got != "580.159.4" {
		t.Errorf("driverVersion %q", got)
	}
	c := d.Capacity[MemoryCapacity]
	if c.Value.Cmp(resource.MustParse("140Gi")) != 0 {
		t.Errorf("memory %s, want 140Gi (units, not the 140.4 GiB NVML reports)", c.Value.String())
	}
	p := c.RequestPolicy
	if p == nil || p.Default.Cmp(c.Value) != 0 || p.ValidRange == nil ||
		p.ValidRange.Min.Cmp(resource.MustParse("1Gi")) != 0 ||
		p.ValidRange.Step.Cmp(resource.MustParse("1Gi")) != 0 || p.ValidRange.Max != nil {
		t.Errorf("request policy %+v: want default the whole GPU, min and step 1Gi", p)
	}
}

func TestMiBClustersCountInMiBAndDevicesKeepIndexOrder(t *testing.T) {
	devs, err := Devices(mustDevices(t, twoA100MiB))
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 2 || devs[0].Name != "gpu-0" || devs[1].Name != "gpu-1" {
		t.Fatalf("devices %v", devs)
	}
	if got := devs[1].Capacity[MemoryCapacity].Value; got.Cmp(resource.MustParse("40960Mi")) != 0 {
		t.Errorf("memory %s", got.String())
	}
	if got := devs[1].Capacity[MemoryCapacity].RequestPolicy.ValidRange.Step; got.Cmp(resource.MustParse("1Mi")) != 0 {
		t.Errorf("step %s", got.String())
	}
	if got := *devs[1].Attributes["numaNode"].IntValue; got != 1 {
		t.Errorf("numaNode %d", got)
	}
	if got := *devs[1].Attributes["pciBusID"].StringValue; got != "00000000:0b:00.0" {
		t.Errorf("pciBusID %q (lower case, as the kubelet's PCI ids)", got)
	}
	s := Slice("n1", devs)
	if s.Spec.Driver != DriverName || *s.Spec.NodeName != "n1" || s.Spec.Pool.Name != "n1" ||
		s.Spec.Pool.ResourceSliceCount != 1 || len(s.Spec.Devices) != 2 {
		t.Errorf("slice %+v", s.Spec)
	}
}

func TestBadInventoriesAreRefusedNamingTheValue(t *testing.T) {
	for _, c := range []struct{ edit, want string }{
		{`"memory_unit": "MiB"|"memory_unit": "KiB"`, `"KiB"`},
		{`"uuid": "GPU-b"|"uuid": ""`, "GPU 1 has no UUID"},
		{`"uuid": "GPU-b"|"uuid": "GPU-a"`, "GPU-a is given twice"},
		{`"index": 1|"index": 0`, "index 0"},
		{`"units": 40960, "uuid": "GPU-b"|"units": 0, "uuid": "GPU-b"`, "0 units"},
		{`"name": "NVIDIA A100-SXM4-40GB",
  "numa_node": 1|"name": "x", "mig_enabled": true, "numa_node": 1`, "MIG mode"},
	} {
		from, to, _ := strings.Cut(c.edit, "|")
		text := strings.Replace(twoA100MiB, from, to, 1)
		if text == twoA100MiB {
			t.Fatalf("edit %q changed nothing", from)
		}
		if _, err := Devices(mustDevices(t, text)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %q", to, err, c.want)
		}
	}
	if _, err := Devices(mustDevices(t, `{"memory_unit": "GiB", "gpus": []}`)); err == nil {
		t.Error("no GPU accepted")
	}
	if _, err := ParseInventory([]byte("not json")); err == nil {
		t.Error("not JSON accepted")
	}
}

func TestNVLinkGroupsFollowTheTopology(t *testing.T) {
	// GPUs 0-1 over NVLink, 2-3 over NVLink, the pairs over SYS; NVML
	// indices 4..7 (positions 0..3).
	inv := Inventory{MemoryUnit: "GiB", Topology: &Topology{GPUs: 4, Links: []string{"NV2 SYS SYS", "SYS SYS", "NV1"}}}
	for i := 0; i < 4; i++ {
		inv.GPUs = append(inv.GPUs, GPU{Index: 4 + i, UUID: "GPU-" + string(rune('a'+i)), Units: 16})
	}
	devs, err := Devices(inv)
	if err != nil {
		t.Fatal(err)
	}
	want := []int64{4, 4, 6, 6}
	for i, d := range devs {
		if g := d.Attributes["nvlinkGroup"].IntValue; g == nil || *g != want[i] {
			t.Errorf("device %s nvlinkGroup %v, want %d", d.Name, g, want[i])
		}
	}
	inv.Topology.Links = []string{"NV2 SYS", "SYS SYS", "NV1"} // Wrong shape: no groups.
	if inv.NVLinkGroups() != nil {
		t.Error("groups from a malformed topology")
	}
	inv.Topology = nil
	if devs, _ := Devices(inv); devs[0].Attributes["nvlinkGroup"].IntValue != nil {
		t.Error("a group without a topology")
	}
}
