// Package prepare turns a ResourceClaim that kube-scheduler allocated from
// gpushare-dra-driver's devices into what its containers get: the GPUs and
// the memory units of each, the environment users of the Go original
// expect (the variables gpushare-device-plugin sets, docs/device-plugin.md),
// and the CDI spec that carries them to the container runtime.
package prepare

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"gpushare.dev/dra-driver/devices"
)

// CDIKind is the CDI vendor/class of the devices the driver prepares: one
// CDI device per claim, named after the claim's UID.
const CDIKind = "gpu.gpushare.dev/claim"

// Grant is one GPU of a claim and the memory units it holds there.
type Grant struct {
	Request string // The claim's request it serves.
	Index   int    // GPU index on the node.
	UUID    string
	Units   int64
}

// Grants reads the claim's allocation for this driver and node pool: one
// grant per result, in the order of the results. The units are the consumed
// memory in the inventory's unit (the whole GPU when the result records
// none). Errors name the claim and the bad value: not allocated, a device
// the inventory does not have, another node's pool, an amount that is not
// whole units or more than the GPU has.
func Grants(claim *resourceapi.ResourceClaim, node string, inv devices.Inventory) ([]Grant, error) {
	name := claim.Namespace + "/" + claim.Name
	if claim.Status.Allocation == nil {
		return nil, fmt.Errorf("claim %s is not allocated", name)
	}
	unit, err := devices.UnitQuantity(inv.MemoryUnit)
	if err != nil {
		return nil, err
	}
	byName := map[string]devices.GPU{}
	for _, g := range inv.GPUs {
		byName[devices.DeviceName(g)] = g
	}
	var grants []Grant
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != devices.DriverName {
			continue
		}
		if r.Pool != node {
			return nil, fmt.Errorf("claim %s: device %s is of pool %q, not this node's %q", name, r.Device, r.Pool, node)
		}
		g, ok := byName[r.Device]
		if !ok {
			return nil, fmt.Errorf("claim %s: device %q is not a GPU of this node", name, r.Device)
		}
		units := g.Units
		if q, ok := r.ConsumedCapacity[devices.MemoryCapacity]; ok {
			units, err = wholeUnits(q, unit)
			if err != nil {
				return nil, fmt.Errorf("claim %s: device %s: %w", name, r.Device, err)
			}
			if units < 1 || units > g.Units {
				return nil, fmt.Errorf("claim %s: device %s: %d units of memory consumed, the GPU has %d", name, r.Device, units, g.Units)
			}
		}
		grants = append(grants, Grant{Request: r.Request, Index: g.Index, UUID: g.UUID, Units: units})
	}
	if len(grants) == 0 {
		return nil, fmt.Errorf("claim %s has no device of %s", name, devices.DriverName)
	}
	return grants, nil
}

// wholeUnits is q / unit, when that is a whole number.
func wholeUnits(q, unit resource.Quantity) (int64, error) {
	v, u := q.Value(), unit.Value()
	if v%u != 0 {
		return 0, fmt.Errorf("memory %s is not a whole number of %s", q.String(), unit.String())
	}
	return v / u, nil
}

// Env is the environment of a container that uses the claim, as
// gpushare-device-plugin gives a container of the same GPUs and units:
// NVIDIA_VISIBLE_DEVICES (the UUIDs), ALIYUN_COM_GPU_MEM_IDX (the indices,
// joined by "-"), ALIYUN_COM_GPU_MEM_CONTAINER (the units on each GPU: one
// number when equal, else one per GPU), ALIYUN_COM_GPU_MEM_DEV (the first
// GPU's units) and ALIYUN_COM_GPU_MEM_POD (the claim's units). A GPU named
// by two requests of the claim counts once, with their units added.
func Env(grants []Grant, inv devices.Inventory) map[string]string {
	units := map[int]int64{}
	uuid := map[int]string{}
	var total int64
	for _, g := range grants {
		units[g.Index] += g.Units
		uuid[g.Index] = g.UUID
		total += g.Units
	}
	idx := make([]int, 0, len(units))
	for i := range units {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	var ids, uuids, amounts []string
	equal := true
	for _, i := range idx {
		ids = append(ids, strconv.Itoa(i))
		uuids = append(uuids, uuid[i])
		amounts = append(amounts, strconv.FormatInt(units[i], 10))
		equal = equal && units[i] == units[idx[0]]
	}
	container := strings.Join(amounts, ",")
	if equal && len(amounts) > 0 {
		container = amounts[0]
	}
	dev := "0"
	for _, g := range inv.GPUs {
		if len(idx) > 0 && g.Index == idx[0] {
			dev = strconv.FormatInt(g.Units, 10)
		}
	}
	return map[string]string{
		"NVIDIA_VISIBLE_DEVICES":       strings.Join(uuids, ","),
		"ALIYUN_COM_GPU_MEM_IDX":       strings.Join(ids, "-"),
		"ALIYUN_COM_GPU_MEM_CONTAINER": container,
		"ALIYUN_COM_GPU_MEM_DEV":       dev,
		"ALIYUN_COM_GPU_MEM_POD":       strconv.FormatInt(total, 10),
	}
}

// CDISpec is the CDI spec of one prepared claim: a device named after the
// claim's UID whose container edits set Env(), and the fully qualified CDI
// device name to hand the kubelet.
func CDISpec(claimUID string, env map[string]string) (cdispec.Spec, string) {
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var vars []string
	for _, k := range keys {
		vars = append(vars, k+"="+env[k])
	}
	spec := cdispec.Spec{
		Version: cdispec.CurrentVersion,
		Kind:    CDIKind,
		Devices: []cdispec.Device{{
			Name:           claimUID,
			ContainerEdits: cdispec.ContainerEdits{Env: vars},
		}},
	}
	return spec, CDIKind + "=" + claimUID
}
