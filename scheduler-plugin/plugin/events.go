package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"gpushare.dev/go/gpushare"
)

// The resources and annotations gpushare reads (include/gpushare/kubernetes.h).
const (
	GPUMemResource       v1.ResourceName = "aliyun.com/gpu-mem"
	GPUCountResource     v1.ResourceName = "aliyun.com/gpu-count"
	WholeGPUResource     v1.ResourceName = "nvidia.com/gpu"
	GPUIndexAnnotation                   = "ALIYUN_COM_GPU_MEM_IDX"
	AllocationAnnotation                 = "scheduler.framework.gpushare.allocation"
)

// RequestsGPUs reports whether a pod's containers ask for GPU memory or
// whole GPUs (limits or requests): the pods gpushare places. gpushare's own
// reading (gpushare.Pod.UsesGPUs) decides; this is its cheap necessary
// condition.
func RequestsGPUs(pod *v1.Pod) bool {
	for i := range pod.Spec.Containers {
		r := &pod.Spec.Containers[i].Resources
		for _, list := range []v1.ResourceList{r.Limits, r.Requests} {
			for _, name := range []v1.ResourceName{GPUMemResource, WholeGPUResource} {
				if q, ok := list[name]; ok && !q.IsZero() {
					return true
				}
			}
		}
	}
	return false
}

// MayHoldGPUs reports whether a pod may hold a placement in gpushare: it
// asks for GPUs or carries gpushare's bind annotations. The events of other
// pods are not applied: they cannot change gpushare's state.
func MayHoldGPUs(pod *v1.Pod) bool {
	if RequestsGPUs(pod) {
		return true
	}
	_, idx := pod.Annotations[GPUIndexAnnotation]
	_, alloc := pod.Annotations[AllocationAnnotation]
	return idx || alloc
}

// offersGPUs reports whether a node's capacity offers GPUs to gpushare.
func offersGPUs(node *v1.Node) bool {
	for _, name := range []v1.ResourceName{GPUMemResource, WholeGPUResource} {
		for _, list := range []v1.ResourceList{node.Status.Capacity, node.Status.Allocatable} {
			if q, ok := list[name]; ok && q.Cmp(resource.Quantity{}) > 0 {
				return true
			}
		}
	}
	return false
}

// ---- Applying events -------------------------------------------------------------

// eventGate applies each object's events in order, once. Events reach
// gpushare from two places: the plugin's own informer handlers, and the
// queueing hints (EventsToRegister), which kube-scheduler calls from its own
// handlers of the same informers, before it retries the pods the event may
// help. A hint applies its event first, so that the retry sees it; the
// handler's copy, later, is then a duplicate, and the handler's older events
// of the object that are still queued are stale: both are skipped.
// Events are ordered by the objects' resourceVersion (decimal, as etcd
// writes it); an object whose resourceVersion does not parse is always
// applied.
type eventGate struct {
	mu   sync.Mutex
	last map[string]gateEntry // "node/<name>" or "pod/<ns>/<name>"
	// applied counts the events applied, so that a reader can tell whether
	// any was applied between two moments (Filter).
	applied atomic.Uint64
}

// appliedCount returns how many events the gate has applied.
func (g *eventGate) appliedCount() uint64 { return g.applied.Load() }

type gateEntry struct {
	rv      uint64
	deleted bool
}

// apply runs `do` unless the event is stale or a duplicate; `final` marks
// the handler's DELETED event, the last of the object's stream, after which
// the entry is dropped.
func (g *eventGate) apply(key, resourceVersion string, deleted, final bool, do func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	rv, err := strconv.ParseUint(resourceVersion, 10, 64)
	if err != nil {
		do()
		g.applied.Add(1)
		return true
	}
	e, seen := g.last[key]
	run := !seen || rv > e.rv || (rv == e.rv && deleted && !e.deleted)
	if run {
		do()
		g.applied.Add(1)
		g.last[key] = gateEntry{rv: rv, deleted: deleted}
	}
	if final {
		delete(g.last, key)
	}
	return run
}

// applyNode applies a node's event unless the gate skips it; it reports
// whether the event was applied.
func (p *sharedState) applyNode(eventType string, node *v1.Node, final bool) bool {
	return p.gate.apply("node/"+node.Name, node.ResourceVersion, eventType == gpushare.EventDeleted, final, func() {
		body, err := json.Marshal(node)
		if err != nil {
			p.logger.Error(err, "Encoding a node", "node", klog.KObj(node))
			return
		}
		r, err := p.sched.ApplyNodeEvent(eventType, body)
		p.logEvent(err, r, "node", klog.KObj(node), eventType)
	})
}

// applyPod applies a pod's event unless the gate skips it; it reports
// whether the event was applied.
func (p *sharedState) applyPod(eventType string, pod *v1.Pod, final bool) bool {
	key := "pod/" + pod.Namespace + "/" + pod.Name
	return p.gate.apply(key, pod.ResourceVersion, eventType == gpushare.EventDeleted, final, func() {
		body, err := json.Marshal(pod)
		if err != nil {
			p.logger.Error(err, "Encoding a pod", "pod", klog.KObj(pod))
			return
		}
		r, err := p.sched.ApplyPodEvent(eventType, body)
		p.logEvent(err, r, "pod", klog.KObj(pod), eventType)
		if err == nil {
			p.bound.note(eventType, pod)
		}
	})
}

func (p *sharedState) logEvent(err error, r gpushare.EventReport, kind string, obj klog.ObjectRef, eventType string) {
	switch {
	case errors.Is(err, gpushare.ErrClosed):
		// Shutting down.
	case err != nil:
		p.logger.Error(err, "Event not applied", kind, obj, "type", eventType)
	case r.Warnings > 0:
		p.logger.Info("Event applied with warnings (a change that waits for placements to end, or a conflict)",
			kind, obj, "type", eventType, "report", r)
	case r != (gpushare.EventReport{}):
		p.logger.V(4).Info("Event applied", kind, obj, "type", eventType, "report", r)
	}
}

func (p *sharedState) nodeHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) {
			if node, ok := obj.(*v1.Node); ok {
				p.applyNode(gpushare.EventAdded, node, false)
			}
		},
		UpdateFunc: func(_, obj interface{}) {
			if node, ok := obj.(*v1.Node); ok {
				p.applyNode(gpushare.EventModified, node, false)
			}
		},
		DeleteFunc: func(obj interface{}) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if node, ok := obj.(*v1.Node); ok {
				p.applyNode(gpushare.EventDeleted, node, true)
			}
		},
	}
}

func (p *sharedState) podHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) {
			if pod, ok := obj.(*v1.Pod); ok && MayHoldGPUs(pod) {
				p.applyPod(gpushare.EventAdded, pod, false)
			}
		},
		UpdateFunc: func(old, obj interface{}) {
			pod, ok := obj.(*v1.Pod)
			if !ok {
				return
			}
			if oldPod, _ := old.(*v1.Pod); MayHoldGPUs(pod) || (oldPod != nil && MayHoldGPUs(oldPod)) {
				p.applyPod(gpushare.EventModified, pod, false)
			}
		},
		DeleteFunc: func(obj interface{}) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if pod, ok := obj.(*v1.Pod); ok && MayHoldGPUs(pod) {
				p.applyPod(gpushare.EventDeleted, pod, true)
			}
		},
	}
}

// ---- Requeueing ------------------------------------------------------------------

// EventsToRegister names the events that may make a pod this plugin
// rejected schedulable: a node added or changed (GPUs, labels, cordon,
// the device plugin's annotations), a pod holding GPUs deleted (or ended:
// kube-scheduler's informer drops finished pods), and the pending pod's own
// labels (aliyun.com/gpu-count).
func (p *Plugin) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeAllocatable |
			fwk.UpdateNodeLabel | fwk.UpdateNodeTaint | fwk.UpdateNodeAnnotation},
			QueueingHintFn: p.nodeHint},
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Delete}, QueueingHintFn: p.podDeletedHint},
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.UpdatePodLabel}, QueueingHintFn: selfUpdatedHint},
	}, nil
}

// nodeHint applies the node's event before the retry it asks for (see
// eventGate), and asks for one when the node offers GPUs.
func (p *sharedState) nodeHint(_ klog.Logger, _ *v1.Pod, oldObj, newObj interface{}) (fwk.QueueingHint, error) {
	node, ok := newObj.(*v1.Node)
	if !ok {
		return fwk.Queue, nil
	}
	eventType := gpushare.EventModified
	if oldObj == nil {
		eventType = gpushare.EventAdded
	}
	p.applyNode(eventType, node, false)
	if offersGPUs(node) {
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}

// podDeletedHint releases the GPUs of a pod that is gone before the retry
// it asks for. kube-scheduler also reports pods it merely unassumed (a
// failed bind) as deleted: those are still in the informer's store, under
// the same UID, and are left to the informer's events (Unreserve already
// forgot their reservations).
func (p *sharedState) podDeletedHint(_ klog.Logger, _ *v1.Pod, oldObj, _ interface{}) (fwk.QueueingHint, error) {
	pod, ok := oldObj.(*v1.Pod)
	if !ok {
		return fwk.Queue, nil
	}
	if !MayHoldGPUs(pod) {
		return fwk.QueueSkip, nil
	}
	if p.podLister != nil {
		current, err := p.podLister.Pods(pod.Namespace).Get(pod.Name)
		if apierrors.IsNotFound(err) || (err == nil && current.UID != pod.UID) {
			p.applyPod(gpushare.EventDeleted, pod, false)
		}
	}
	return fwk.Queue, nil
}

// selfUpdatedHint asks for a retry when the rejected pod itself changed.
func selfUpdatedHint(_ klog.Logger, pod *v1.Pod, _, newObj interface{}) (fwk.QueueingHint, error) {
	if updated, ok := newObj.(*v1.Pod); ok && updated.UID == pod.UID {
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}

// ---- Catching up with kube-scheduler's snapshot ------------------------------------

// kube-scheduler retries a pending pod when an event may help it, asking only
// the queueing hints of the plugins that rejected it. When GpuShare was one of
// them, its hint applies the event before answering (see eventGate). When
// another plugin was (NodeResourcesFit's node totals, say: 6 units free on a
// node and 12 asked), GpuShare's hint is not asked, and the retry may run
// GpuShare's Filter before the plugin's own informer handler has applied the
// same event: the node added is still unknown to gpushare, the deleted pod's
// GPUs still held. kube-scheduler's snapshot, which Filter is given, has the
// event already: its cache is updated before it retries anyone, and the
// informer's store before any handler hears of it.
//
// So a Filter that is about to refuse a node first brings gpushare up to the
// node as the snapshot has it (catchUp): the Node object, when newer than the
// one applied, and the bound GPU pods gpushare follows on the node that the
// snapshot no longer lists and that the informer's store has as gone, ended
// or replaced by a pod of another UID. Then it judges the node again. This
// runs only on a refusal, and once per generation of the node in the
// snapshot; the common path is one Fit. Retries themselves are kube-scheduler's:
// its queueing hints (EventsToRegister), its backoff, and its in-flight event
// tracking for events that arrive during a pod's scheduling cycle.

// boundPods are the bound GPU pods whose events gpushare applied, by node:
// the pods catchUp compares with the snapshot.
type boundPods struct {
	mu     sync.Mutex
	byNode map[string]map[string]*v1.Pod // node -> "namespace/name" -> the pod as applied
	nodeOf map[string]string             // "namespace/name" -> node
}

// note records the pod of an applied event.
func (b *boundPods) note(eventType string, pod *v1.Pod) {
	key := pod.Namespace + "/" + pod.Name
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byNode == nil {
		b.byNode, b.nodeOf = map[string]map[string]*v1.Pod{}, map[string]string{}
	}
	if node, ok := b.nodeOf[key]; ok {
		delete(b.byNode[node], key)
		if len(b.byNode[node]) == 0 {
			delete(b.byNode, node)
		}
		delete(b.nodeOf, key)
	}
	if eventType == gpushare.EventDeleted || pod.Spec.NodeName == "" || finished(pod) {
		return
	}
	on := b.byNode[pod.Spec.NodeName]
	if on == nil {
		on = map[string]*v1.Pod{}
		b.byNode[pod.Spec.NodeName] = on
	}
	on[key] = pod
	b.nodeOf[key] = pod.Spec.NodeName
}

// on returns the pods recorded on a node.
func (b *boundPods) on(node string) []*v1.Pod {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]*v1.Pod, 0, len(b.byNode[node]))
	for _, pod := range b.byNode[node] {
		out = append(out, pod)
	}
	return out
}

func finished(pod *v1.Pod) bool {
	return pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed
}

// catchUp applies what kube-scheduler's snapshot of a node shows and gpushare
// has not applied yet (see above); it reports whether it applied anything.
// When it returns, gpushare has applied at least what the snapshot shows
// of the node, whoever applied it (the gate serializes the appliers).
func (p *sharedState) catchUp(nodeInfo fwk.NodeInfo) bool {
	node := nodeInfo.Node()
	gen := nodeInfo.GetGeneration()
	if last, ok := p.caughtUp.Load(node.Name); ok && last.(int64) == gen {
		return false
	}
	applied := p.applyNode(gpushare.EventModified, node, false)
	present := make(map[types.UID]bool, len(nodeInfo.GetPods()))
	for _, pi := range nodeInfo.GetPods() {
		present[pi.GetPod().UID] = true
	}
	for _, held := range p.bound.on(node.Name) {
		if present[held.UID] || p.podLister == nil {
			continue
		}
		current, err := p.podLister.Pods(held.Namespace).Get(held.Name)
		switch {
		case apierrors.IsNotFound(err), err == nil && current.UID != held.UID:
			applied = p.applyPod(gpushare.EventDeleted, held, false) || applied
		case err == nil && finished(current):
			applied = p.applyPod(gpushare.EventModified, current, false) || applied
		}
	}
	p.caughtUp.Store(node.Name, gen)
	return applied
}
