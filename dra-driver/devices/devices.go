// Package devices turns a node's GPUs, as gpushare-device-plugin --discover
// reports them from NVML (the one GPU discovery gpushare has), into Dynamic
// Resource Allocation devices: one device per GPU, its memory consumable
// capacity in the node's memory unit, so that several claims share a GPU
// and a claim of the whole capacity holds it alone.
package devices

import (
	"encoding/json"
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// DriverName is the DRA driver's name: the domain of its device attributes
// and capacities, and what the gpushare DeviceClass selects.
const DriverName = "gpu.gpushare.dev"

// MemoryCapacity is the name of each device's consumable memory.
const MemoryCapacity resourceapi.QualifiedName = "memory"

// GPU is one GPU of gpushare-device-plugin --discover's JSON.
type GPU struct {
	Index             int    `json:"index"`
	UUID              string `json:"uuid"`
	Name              string `json:"name"`
	MemoryBytes       int64  `json:"memory_bytes"`
	Units             int64  `json:"units"`
	PCIBusID          string `json:"pci_bus_id"`
	NUMANode          int    `json:"numa_node"`
	ComputeCapability string `json:"compute_capability"`
	MIGEnabled        bool   `json:"mig_enabled"`
}

// Inventory is gpushare-device-plugin --discover's JSON: the GPUs it would
// advertise (MIG-mode GPUs are left out there), the memory unit and, when
// NVML told, how the GPUs are linked.
type Inventory struct {
	DriverVersion string    `json:"driver_version"`
	MemoryUnit    string    `json:"memory_unit"`
	GPUs          []GPU     `json:"gpus"`
	Topology      *Topology `json:"topology,omitempty"`
}

// Topology is the inventory's "topology": the upper triangle of the link
// matrix over the inventory's GPUs (by position), Links[i] the links of GPU
// i to GPUs i+1..n-1 separated by spaces ("NV2 SYS PIX").
type Topology struct {
	GPUs  int      `json:"gpus"`
	Links []string `json:"links"`
}

// NVLinkGroups gives each GPU of the inventory (by position) the smallest
// NVML index of the GPUs it reaches over NVLink (directly or through
// others); nil when the inventory has no topology or one of another size.
func (inv Inventory) NVLinkGroups() []int {
	t := inv.Topology
	n := len(inv.GPUs)
	if t == nil || t.GPUs != n || len(t.Links) < n-1 {
		return nil
	}
	parent := make([]int, n)
	for i := range parent {
		parent[i] = i
	}
	var find func(int) int
	find = func(i int) int {
		for parent[i] != i {
			i = parent[i]
		}
		return i
	}
	for i := 0; i < n-1; i++ {
		links := strings.Fields(t.Links[i])
		if len(links) != n-1-i {
			return nil
		}
		for k, l := range links {
			if strings.HasPrefix(l, "NV") {
				parent[find(i)] = find(i + 1 + k)
			}
		}
	}
	group := make([]int, n)
	least := map[int]int{}
	for i, g := range inv.GPUs {
		r := find(i)
		if v, ok := least[r]; !ok || g.Index < v {
			least[r] = g.Index
		}
	}
	for i := range inv.GPUs {
		group[i] = least[find(i)]
	}
	return group
}

// ParseInventory reads --discover's JSON; unknown fields are ignored.
func ParseInventory(data []byte) (Inventory, error) {
	var inv Inventory
	if err := json.Unmarshal(data, &inv); err != nil {
		return Inventory{}, fmt.Errorf("the GPU inventory is not --discover's JSON: %w", err)
	}
	return inv, nil
}

// DeviceName is the name of GPU g's device: gpu-<index>.
func DeviceName(g GPU) string { return fmt.Sprintf("gpu-%d", g.Index) }

// UnitQuantity is one memory unit ("GiB" or "MiB") as a quantity.
func UnitQuantity(unit string) (resource.Quantity, error) {
	suffix, err := unitSuffix(unit)
	if err != nil {
		return resource.Quantity{}, err
	}
	return resource.MustParse("1" + suffix), nil
}

// unitSuffix is the binary-SI suffix of a memory unit.
func unitSuffix(unit string) (string, error) {
	switch unit {
	case "GiB":
		return "Gi", nil
	case "MiB":
		return "Mi", nil
	}
	return "", fmt.Errorf("memory unit %q is neither GiB nor MiB", unit)
}

// Devices returns one device per GPU of inv, named gpu-<index>, in index
// order (the order DRA's allocator tries them in: the first with room
// wins). Attributes: uuid, productName, index, pciBusID, numaNode (when
// known), computeCapability and driverVersion (semantic versions),
// nvlinkGroup (when the topology is known: the smallest index of the GPUs
// linked to it over NVLink, so that a claim's matchAttribute constraint on
// it keeps its GPUs NVLinked); capacity
// memory = the GPU's units in inv's unit, shared by any number of claims
// (allowMultipleAllocations), requested in whole units (minimum and step
// one unit); a claim that names no amount takes the whole GPU.
// Errors name the GPU and the bad value: no GPU, a GPU in MIG mode, one
// without a UUID or whole unit of memory, two with one index or UUID, an
// unknown unit.
func Devices(inv Inventory) ([]resourceapi.Device, error) {
	suffix, err := unitSuffix(inv.MemoryUnit)
	if err != nil {
		return nil, err
	}
	if len(inv.GPUs) == 0 {
		return nil, fmt.Errorf("the GPU inventory has no GPU")
	}
	one := resource.MustParse("1" + suffix)
	seenIndex := map[int]bool{}
	seenUUID := map[string]bool{}
	devices := make([]resourceapi.Device, 0, len(inv.GPUs))
	groups := inv.NVLinkGroups()
	for pos, g := range inv.GPUs {
		switch {
		case g.UUID == "":
			return nil, fmt.Errorf("GPU %d has no UUID", g.Index)
		case g.MIGEnabled:
			return nil, fmt.Errorf("GPU %d (%s) is in MIG mode: its memory belongs to its MIG instances", g.Index, g.UUID)
		case g.Units < 1:
			return nil, fmt.Errorf("GPU %d (%s) has %d units of memory (%s): less than one", g.Index, g.UUID, g.Units, inv.MemoryUnit)
		case g.Index < 0 || seenIndex[g.Index]:
			return nil, fmt.Errorf("GPU index %d (%s) is negative or given twice", g.Index, g.UUID)
		case seenUUID[g.UUID]:
			return nil, fmt.Errorf("GPU UUID %s is given twice", g.UUID)
		}
		seenIndex[g.Index] = true
		seenUUID[g.UUID] = true
		total := resource.MustParse(fmt.Sprintf("%d%s", g.Units, suffix))
		attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"uuid":        {StringValue: ptr.To(g.UUID)},
			"productName": {StringValue: ptr.To(g.Name)},
			"index":       {IntValue: ptr.To(int64(g.Index))},
			"pciBusID":    {StringValue: ptr.To(strings.ToLower(g.PCIBusID))},
		}
		if g.NUMANode >= 0 {
			attrs["numaNode"] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(g.NUMANode))}
		}
		if v, ok := semver(g.ComputeCapability); ok {
			attrs["computeCapability"] = resourceapi.DeviceAttribute{VersionValue: ptr.To(v)}
		}
		if v, ok := semver(inv.DriverVersion); ok {
			attrs["driverVersion"] = resourceapi.DeviceAttribute{VersionValue: ptr.To(v)}
		}
		if groups != nil {
			attrs["nvlinkGroup"] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(groups[pos]))}
		}
		devices = append(devices, resourceapi.Device{
			Name:                     DeviceName(g),
			Attributes:               attrs,
			AllowMultipleAllocations: ptr.To(true),
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				MemoryCapacity: {
					Value: total,
					RequestPolicy: &resourceapi.CapacityRequestPolicy{
						Default:    ptr.To(total.DeepCopy()),
						ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(one.DeepCopy()), Step: ptr.To(one.DeepCopy())},
					},
				},
			},
		})
	}
	return devices, nil
}

// semver makes NVML's "9.0" or "580.159.04" a semantic version (three
// numbers, no leading zeros); false when it is not dotted numbers.
func semver(v string) (string, bool) {
	parts := strings.Split(v, ".")
	if v == "" || len(parts) > 3 {
		return "", false
	}
	for len(parts) < 3 {
		parts = append(parts, "0")
	}
	for i, p := range parts {
		if p == "" {
			return "", false
		}
		n := 0
		for _, c := range p {
			if c < '0' || c > '9' {
				return "", false
			}
			n = n*10 + int(c-'0')
		}
		parts[i] = fmt.Sprint(n)
	}
	return strings.Join(parts, "."), true
}

// UnhealthyTaintKey is the key of the taint an unhealthy GPU's device
// carries (effect NoSchedule: no new claim gets it; running pods keep
// theirs, as the device plugin keeps an unhealthy GPU's pods).
const UnhealthyTaintKey = DriverName + "/unhealthy"

// Taint marks the devices of the unhealthy GPUs (keyed by NVML index, the
// reason as value) with UnhealthyTaintKey, and clears it from the others;
// it changes devs in place. The reason is made a valid taint value
// ("XID 79" becomes "XID-79"); since[index], when given, is the taint's
// timeAdded.
func Taint(devs []resourceapi.Device, unhealthy map[int]string, since map[int]metav1.Time) {
	for i := range devs {
		var kept []resourceapi.DeviceTaint
		for _, t := range devs[i].Taints {
			if t.Key != UnhealthyTaintKey {
				kept = append(kept, t)
			}
		}
		if idx := devs[i].Attributes["index"].IntValue; idx != nil {
			if why, bad := unhealthy[int(*idx)]; bad {
				t := resourceapi.DeviceTaint{Key: UnhealthyTaintKey, Value: taintValue(why),
					Effect: resourceapi.DeviceTaintEffectNoSchedule}
				if at, ok := since[int(*idx)]; ok {
					t.TimeAdded = ptr.To(at)
				}
				kept = append(kept, t)
			}
		}
		devs[i].Taints = kept
	}
}

// taintValue makes s a label value: at most 63 characters of letters,
// digits, '-', '_' and '.', starting and ending with a letter or digit.
func taintValue(s string) string {
	b := []byte(s)
	for i, c := range b {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
		if !ok {
			b[i] = '-'
		}
	}
	if len(b) > 63 {
		b = b[:63]
	}
	v := strings.Trim(string(b), "-_.")
	if v == "" {
		return "unhealthy"
	}
	return v
}

// Slice is the ResourceSlice of node's devices: one pool named after the
// node, of one slice.
func Slice(node string, devices []resourceapi.Device) resourceapi.ResourceSlice {
	return resourceapi.ResourceSlice{
		TypeMeta:   metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceSlice"},
		ObjectMeta: metav1.ObjectMeta{Name: node + "-" + strings.ReplaceAll(DriverName, ".", "-")},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   DriverName,
			NodeName: ptr.To(node),
			Pool:     resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
			Devices:  devices,
		},
	}
}
