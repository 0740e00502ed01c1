//go:build kube_pre136

package plugin

import (
	"context"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
)

// PreBindPreFlight (Kubernetes 1.35, where it returns a status only).
func (p *Plugin) PreBindPreFlight(ctx context.Context, state fwk.CycleState, pod *v1.Pod,
	nodeName string) *fwk.Status {
	return p.preBindPreFlight(state)
}
