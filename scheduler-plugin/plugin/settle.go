package plugin

// Binds that end without a clear answer, and confirmations that fail.
//
// A bind can fail after the API server applied it (a timeout, a lost
// connection, a 5xx from a proxy, or 409 because an earlier try bound the
// pod). Forgetting its reservation then would leave a bound pod's GPUs free
// for another pod until the informer's event restores them, and they may be
// taken by then. So the pod is read back first: bound to the node, the bind
// succeeded; not bound, gone or another pod of the name, the reservation is
// forgotten; unreadable, the reservation stays held and a goroutine keeps
// reading (settle) until it knows, as long as the scheduler runs.

import (
	"context"
	"errors"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"

	"gpushare.dev/go/gpushare"
)

var (
	confirmFailures = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      "gpushare",
		Name:           "reservation_confirm_failures_total",
		Help:           "Bound pods whose GPU reservation GpuShare could not confirm, by the library's error code.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"code"})
	settledBinds = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      "gpushare",
		Name:           "unsettled_binds_total",
		Help:           "Binds of unknown outcome GpuShare read back before freeing anything, by what it found (bound, not_bound).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"outcome"})
	registerOnce sync.Once
)

// registerMetrics adds the metrics to kube-scheduler's /metrics.
func registerMetrics() {
	registerOnce.Do(func() { legacyregistry.MustRegister(confirmFailures, settledBinds) })
}

// mayHaveApplied reports whether a failed write may have been applied: only
// the API server's refusals say it was not.
func mayHaveApplied(err error) bool {
	switch {
	case apierrors.IsNotFound(err), apierrors.IsInvalid(err), apierrors.IsForbidden(err),
		apierrors.IsBadRequest(err), apierrors.IsUnauthorized(err), apierrors.IsTooManyRequests(err),
		apierrors.IsMethodNotSupported(err), apierrors.IsRequestEntityTooLargeError(err),
		apierrors.IsNotAcceptable(err), apierrors.IsUnsupportedMediaType(err):
		return false
	}
	return true
}

type bindOutcome int

const (
	outcomeUnknown bindOutcome = iota
	boundHere                  // Bound to the node of the reservation.
	notBound                   // Not bound, bound elsewhere, gone, or another pod of the name.
)

// readBack reads the pod from the API server (not the informer, which may
// lag) to learn whether it is bound to nodeName.
func (p *Plugin) readBack(pod *v1.Pod, nodeName string) bindOutcome {
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	now, err := p.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return notBound
	case err != nil:
		p.logger.Info("Cannot read back a pod whose bind may have applied; its GPUs stay reserved",
			"pod", klog.KObj(pod), "err", err)
		return outcomeUnknown
	case now.UID != pod.UID || now.Spec.NodeName != nodeName:
		return notBound
	}
	return boundHere
}

// settle decides a reservation whose bind's outcome is unknown: the pod is
// read back until it answers (1 s apart, then up to 30 s), then the
// reservation is confirmed (bound there) or forgotten.
func (p *Plugin) settle(pod *v1.Pod, placement *gpushare.Placement) {
	wait := time.Second
	for {
		switch p.readBack(pod, placement.Node) {
		case boundHere:
			settledBinds.WithLabelValues("bound").Inc()
			if err := p.sched.ConfirmReservation(placement); err != nil {
				p.confirmFailed(p.ctx, pod, placement.Node, err)
			}
			return
		case notBound:
			// Pods that these GPUs kept out are retried at the next event
			// the hints accept, or kube-scheduler's periodic flush.
			settledBinds.WithLabelValues("not_bound").Inc()
			if err := p.sched.ForgetReservation(placement); err != nil &&
				!errors.Is(err, gpushare.ErrFailedPrecondition) && !errors.Is(err, gpushare.ErrNotFound) {
				p.logger.Error(err, "Forgetting the reservation of a bind found not bound", "pod", klog.KObj(pod))
			}
			return
		}
		select {
		case <-p.ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
	}
}

// confirmFailed reports a reservation that could not be confirmed for a
// bound pod: an Event on the pod, a metric and a log line.
func (p *Plugin) confirmFailed(ctx context.Context, pod *v1.Pod, nodeName string, err error) {
	code := "unknown"
	var e *gpushare.Error
	if errors.As(err, &e) {
		code = e.Code.String()
	}
	confirmFailures.WithLabelValues(code).Inc()
	klog.FromContext(ctx).Error(err, "Confirming the GPU reservation of a bound pod", "pod", klog.KObj(pod),
		"node", nodeName)
	if p.recorder != nil {
		p.recorder.Eventf(pod, nil, v1.EventTypeWarning, "GpuShareConfirmFailed", "Binding",
			"GpuShare could not confirm the GPUs reserved for the pod on node %s: %v", nodeName, err)
	}
}
