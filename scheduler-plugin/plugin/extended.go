package plugin

// Pods whose nvidia.com/gpu DRA serves (Kubernetes 1.34+, GA in 1.37:
// "DRA extended resource", KEP-5004). A DeviceClass with
// spec.extendedResourceName nvidia.com/gpu (gpushare's chart ships one,
// gpushare.dev-whole, for the nodes of gpushare-dra-driver) lets a pod that
// asks `nvidia.com/gpu: N` in its resources get N devices of that class on a
// node whose allocatable has no nvidia.com/gpu, that is with no device plugin
// for it there: kube-scheduler's DynamicResources plugin allocates the devices
// and writes a ResourceClaim for the pod (pod.status.extendedResourceClaimStatus),
// and NodeResourcesFit leaves the resource to it. On nodes whose allocatable
// has nvidia.com/gpu, the device plugin's resource serves the pod as before.
//
// GpuShare steps aside on the nodes where DRA serves the pod: its Filter
// admits them (their feasibility is DynamicResources' and NodeResourcesFit's),
// it reserves nothing there (so PreBind and Bind find no reservation, and the
// next bind plugin binds without gpushare's annotations), and it ranks them
// with the DRA state of dra.go when the class is one of Args.DRADeviceClasses,
// else not at all. The decision is kube-scheduler's own, per node, from the
// same objects: the class through the SharedDRAManager's DeviceClassResolver
// (the cache NodeResourcesFit and DynamicResources read), the node's
// allocatable from the cycle's snapshot. So for one pod and node exactly one
// of the two holds GPUs: the device plugin's through GpuShare's reservation
// where the node's allocatable has nvidia.com/gpu, DRA's where it has none.
//
// A pod that also asks aliyun.com/gpu-mem stays GpuShare's everywhere:
// memory units are not devices, and the chart maps no class to them.

import (
	"context"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"gpushare.dev/go/gpushare"
)

// extendedClass returns the DeviceClass that maps nvidia.com/gpu when the pod
// asks for it and for no aliyun.com/gpu-mem: the class DRA serves the pod
// from on nodes without the resource. "" when DRA serves no node for it (no
// such class, DRA off, a pod sharing GPU memory).
func (p *sharedState) extendedClass(pod *v1.Pod) string {
	if p.classes == nil {
		return ""
	}
	whole := false
	for _, c := range podContainers(pod) {
		for _, list := range []v1.ResourceList{c.Resources.Limits, c.Resources.Requests} {
			if q, ok := list[GPUMemResource]; ok && !q.IsZero() {
				return ""
			}
			if q, ok := list[WholeGPUResource]; ok && !q.IsZero() {
				whole = true
			}
		}
	}
	if !whole {
		return ""
	}
	class := p.classes.GetDeviceClass(WholeGPUResource)
	if class == nil {
		return ""
	}
	return class.Name
}

func podContainers(pod *v1.Pod) []*v1.Container {
	out := make([]*v1.Container, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	for i := range pod.Spec.InitContainers {
		out = append(out, &pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		out = append(out, &pod.Spec.Containers[i])
	}
	return out
}

// servedByDRA reports whether DRA serves the cycle's pod on the node: its
// nvidia.com/gpu is mapped to a class (extendedClass) and the node's
// allocatable has none, as NodeResourcesFit and DynamicResources decide.
func (c *cycleState) servedByDRA(ni fwk.NodeInfo) bool {
	if c.extendedClass == "" || ni == nil {
		return false
	}
	return ni.GetAllocatable().GetScalarResources()[WholeGPUResource] <= 0
}

// servedByDRAOn is servedByDRA for a node of the cycle's snapshot, by name
// (Reserve is given no NodeInfo). An error where the node cannot be read:
// the caller must then reserve nothing.
func (p *Plugin) servedByDRAOn(c *cycleState, node string) (bool, error) {
	if c.extendedClass == "" {
		return false, nil
	}
	if p.nodeInfo == nil {
		return false, errors.New("no snapshot of the nodes")
	}
	ni, err := p.nodeInfo(node)
	if err != nil {
		return false, err
	}
	if ni == nil || ni.Node() == nil {
		return false, fmt.Errorf("node %s is not in the snapshot", node)
	}
	return c.servedByDRA(ni), nil
}

// wholeGPUsAsked is how many nvidia.com/gpu the pod asks, as kube-scheduler
// counts a pod's request: the containers' sum, or an init container's
// larger one.
func wholeGPUsAsked(pod *v1.Pod) int64 {
	asked := func(c *v1.Container) int64 {
		if q, ok := c.Resources.Requests[WholeGPUResource]; ok {
			return q.Value()
		}
		q := c.Resources.Limits[WholeGPUResource]
		return q.Value()
	}
	var sum, initMax int64
	for i := range pod.Spec.Containers {
		sum += asked(&pod.Spec.Containers[i])
	}
	for i := range pod.Spec.InitContainers {
		initMax = max(initMax, asked(&pod.Spec.InitContainers[i]))
	}
	return max(sum, initMax)
}

// extendedDRARanks ranks `nodes`, where DRA serves the pod, with the DRA
// state (dra.go) when the pod's class is one of the driver's
// (Args.DRADeviceClasses): N whole GPUs, as DynamicResources asks them (one
// device per unit, no amount: the whole device). nil, nothing ranked, where
// that does not apply or fails: GpuShare never refuses such a node.
func (p *Plugin) extendedDRARanks(ctx context.Context, pod *v1.Pod, c *cycleState, nodes []string) []int64 {
	if p.dra == nil || !p.dra.classes[c.extendedClass] || len(nodes) == 0 {
		return nil
	}
	logger := klog.FromContext(ctx)
	n := wholeGPUsAsked(pod)
	if n <= 0 || n > draMaxGPUs {
		return nil
	}
	gp, err := gpushare.NewPod(gpushare.Request{ID: pod.Namespace + "/" + pod.Name, WholeGPUs: n})
	if err != nil {
		logger.Error(err, "A pod's nvidia.com/gpu through DRA cannot be scored", "pod", klog.KObj(pod))
		return nil
	}
	defer gp.Close()
	ranks, err := p.dra.rank(gp, nodes)
	if err != nil {
		logger.Error(err, "Ranking the nodes where DRA serves a pod's nvidia.com/gpu; GpuShare leaves them unscored",
			"pod", klog.KObj(pod))
		return nil
	}
	return ranks
}
