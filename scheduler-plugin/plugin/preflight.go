//go:build !kube_pre136

package plugin

import (
	"context"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
)

// PreBindPreFlight (Kubernetes 1.36 and later, where it also returns a
// result): GpuShare's PreBind runs alone (a nil result: AllowParallel
// false), after the PreBind plugins before it. go-tags.sh picks this file or
// preflight_pre136.go from the release scheduler-plugin/go.mod pins.
func (p *Plugin) PreBindPreFlight(ctx context.Context, state fwk.CycleState, pod *v1.Pod,
	nodeName string) (*fwk.PreBindPreFlightResult, *fwk.Status) {
	return nil, p.preBindPreFlight(state)
}
