package prepare

import (
	"encoding/json"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"gpushare.dev/dra-driver/devices"
)

var inv = devices.Inventory{MemoryUnit: "GiB", GPUs: []devices.GPU{
	{Index: 0, UUID: "GPU-a", Units: 40}, {Index: 1, UUID: "GPU-b", Units: 40}, {Index: 2, UUID: "GPU-c", Units: 80}}}

type result struct {
	request, device, pool, memory string
}

func claim(results ...result) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "uid-1"}}
	var rs []resourceapi.DeviceRequestAllocationResult
	for _, r := range results {
		x := resourceapi.DeviceRequestAllocationResult{Request: r.request, Driver: devices.DriverName, Pool: r.pool, Device: r.device}
		if r.memory != "" {
			x.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{devices.MemoryCapacity: resource.MustParse(r.memory)}
		}
		rs = append(rs, x)
	}
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: rs}}
	return c
}

func TestOneGpuShareGetsTheOriginalsVariables(t *testing.T) {
	grants, err := Grants(claim(result{"gpu", "gpu-1", "n1", "8Gi"}), "n1", inv)
	if err != nil {
		t.Fatal(err)
	}
	if len(grants) != 1 || grants[0] != (Grant{Request: "gpu", Index: 1, UUID: "GPU-b", Units: 8}) {
		t.Fatalf("grants %+v", grants)
	}
	env := Env(grants, inv)
	want := map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-b", "ALIYUN_COM_GPU_MEM_IDX": "1",
		"ALIYUN_COM_GPU_MEM_CONTAINER": "8", "ALIYUN_COM_GPU_MEM_DEV": "40", "ALIYUN_COM_GPU_MEM_POD": "8"}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
	if len(env) != len(want) {
		t.Errorf("env %v", env)
	}
}

func TestNUnitsOverMGpusAndAWholeGpu(t *testing.T) {
	// Two requests, 8 GiB on each of GPUs 2 and 0, and a result without a
	// consumed amount (the whole GPU).
	grants, err := Grants(claim(result{"share", "gpu-2", "n1", "8Gi"}, result{"share", "gpu-0", "n1", "8Gi"},
		result{"whole", "gpu-1", "n1", ""}), "n1", inv)
	if err != nil {
		t.Fatal(err)
	}
	env := Env(grants, inv)
	if env["ALIYUN_COM_GPU_MEM_IDX"] != "0-1-2" || env["NVIDIA_VISIBLE_DEVICES"] != "GPU-a,GPU-b,GPU-c" ||
		env["ALIYUN_COM_GPU_MEM_CONTAINER"] != "8,40,8" || env["ALIYUN_COM_GPU_MEM_DEV"] != "40" ||
		env["ALIYUN_COM_GPU_MEM_POD"] != "56" {
		t.Errorf("env %v", env)
	}
	equal := Env(grants[:2], inv)
	if equal["ALIYUN_COM_GPU_MEM_CONTAINER"] != "8" || equal["ALIYUN_COM_GPU_MEM_IDX"] != "0-2" {
		t.Errorf("env %v", equal)
	}
}

func TestBadAllocationsAreRefusedNamingTheValue(t *testing.T) {
	notAllocated := claim()
	notAllocated.Status.Allocation = nil
	for _, c := range []struct {
		claim *resourceapi.ResourceClaim
		want  string
	}{
		{notAllocated, "ns/c is not allocated"},
		{claim(result{"gpu", "gpu-9", "n1", "1Gi"}), `device "gpu-9" is not a GPU`},
		{claim(result{"gpu", "gpu-0", "n2", "1Gi"}), `pool "n2"`},
		{claim(result{"gpu", "gpu-0", "n1", "1536Mi"}), "1536Mi is not a whole number of 1Gi"},
		{claim(result{"gpu", "gpu-0", "n1", "41Gi"}), "41 units of memory consumed, the GPU has 40"},
		{claim(), "no device of gpu.gpushare.dev"},
	} {
		if _, err := Grants(c.claim, "n1", inv); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want one naming %q", err, c.want)
		}
	}
}

func TestTheCdiSpecCarriesTheEnvironment(t *testing.T) {
	spec, name := CDISpec("uid-1", map[string]string{"B": "2", "A": "1"})
	if name != "gpu.gpushare.dev/claim=uid-1" {
		t.Errorf("name %q", name)
	}
	// Through JSON and back with CDI's own types, as a runtime reads it.
	data, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	var back cdispec.Spec
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if back.Kind != CDIKind || back.Version == "" || len(back.Devices) != 1 || back.Devices[0].Name != "uid-1" ||
		strings.Join(back.Devices[0].ContainerEdits.Env, " ") != "A=1 B=2" {
		t.Errorf("spec %s", data)
	}
}
