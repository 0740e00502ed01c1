package gpushare

/*
#include <gpushare/c/gpushare.h>
*/
import "C"

import (
	"runtime"
	"sync"
)

// Pod is a request validated once, to be filtered, ranked and reserved many
// times: a handle on an immutable gs_pod.
//
// A Pod may be used by any number of goroutines at once. Close frees it
// once the calls using it have returned; a Pod that is dropped without
// Close is freed by the garbage collector (a cleanup, the safety net of a
// host that cannot tell when a pod is done with, such as a kube-scheduler
// plugin whose scheduling cycle may end at any extension point). Close it
// when you can: the collector does not see the C memory.
type Pod struct {
	mu       sync.RWMutex // held shared by the calls using p, exclusively by Close
	p        *C.gs_pod
	id       string
	usesGPUs bool
	cleanup  runtime.Cleanup
}

func newPod(p *C.gs_pod) *Pod {
	pod := &Pod{
		p:        p,
		id:       C.GoString(C.gs_pod_id(p)),
		usesGPUs: C.gs_pod_uses_gpus(p) != 0,
	}
	pod.cleanup = runtime.AddCleanup(pod, freePod, p)
	return pod
}

func freePod(p *C.gs_pod) { C.gs_pod_free(p) }

// Request is a pod's demand, for NewPod. Pods of a Kubernetes cluster are
// rather read from their v1.Pod JSON with ParsePod.
type Request struct {
	ID         string   // required, e.g. "ns/name"
	GPUMemory  int64    // N memory units in all
	GPUCount   int64    // M GPUs sharing the N units; 0 = 1
	Compute    int64    // per GPU, thousandths; 0 = untracked
	WholeGPUs  int64    // exclusive whole GPUs
	CPU        int64    // thousandths of a core
	HostMemory int64    // MiB
	GPUModels  []string // allowed GPU models; nil = any
}

// NewPod validates a request. Errors: InvalidArgument naming the bad field.
func NewPod(r Request) (*Pod, error) {
	var a cargs
	defer a.release()
	var cr C.gs_request
	C.gs_request_init(&cr)
	var err error
	if cr.id, err = a.str("request id", r.ID); err != nil {
		return nil, err
	}
	cr.gpu_memory = C.int64_t(r.GPUMemory)
	if r.GPUCount != 0 {
		cr.gpu_count = C.int64_t(r.GPUCount)
	}
	cr.compute = C.int64_t(r.Compute)
	cr.whole_gpus = C.int64_t(r.WholeGPUs)
	cr.cpu = C.int64_t(r.CPU)
	cr.host_memory = C.int64_t(r.HostMemory)
	if cr.gpu_models, err = a.strs("GPU model", r.GPUModels); err != nil {
		return nil, err
	}
	cr.gpu_model_count = C.size_t(len(r.GPUModels))
	var p *C.gs_pod
	if err := statusError(C.gs_pod_from_request(&cr, &p)); err != nil {
		return nil, err
	}
	return newPod(p), nil
}

// ParsePod reads a v1.Pod given as JSON under the extender's rules: the
// containers' aliyun.com/gpu-mem (and nvidia.com/gpu, cpu, memory), the
// aliyun.com/gpu-count label, nodeSelector, required node affinity and the
// topology annotation. Its ID is "namespace/name". Errors: InvalidArgument
// naming the bad value.
func ParsePod(json []byte) (*Pod, error) {
	j, l := bytesArg(json)
	var p *C.gs_pod
	if err := statusError(C.gs_pod_parse(j, l, &p)); err != nil {
		return nil, err
	}
	return newPod(p), nil
}

// ID is the request's id ("namespace/name" for a parsed pod). It stays
// valid after Close.
func (p *Pod) ID() string { return p.id }

// UsesGPUs reports whether the pod asks for GPU memory or whole GPUs (a
// Request also: GPU compute); a host may leave the others to other
// schedulers. It stays valid after Close.
func (p *Pod) UsesGPUs() bool { return p.usesGPUs }

// Close frees the pod once the calls using it have returned; later calls
// taking it return ErrClosed. Closing again does nothing.
func (p *Pod) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.p != nil {
		p.cleanup.Stop()
		C.gs_pod_free(p.p)
		p.p = nil
	}
}

// handle read-locks p and returns the C handle; the caller unlocks with
// p.mu.RUnlock() when it returns no error. The lock also keeps p reachable,
// so its cleanup cannot free the C pod during the call.
func (p *Pod) handle() (*C.gs_pod, error) {
	if p == nil {
		return nil, &Error{Code: InvalidArgument, Message: "nil *gpushare.Pod"}
	}
	p.mu.RLock()
	if p.p == nil {
		p.mu.RUnlock()
		return nil, ErrClosed
	}
	return p.p, nil
}
