package plugin

import (
	"encoding/json"
	"fmt"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"gpushare.dev/go/gpushare"
)

// parsePod reads a pod's GPU request with gpushare's rules (the extender's).
func parsePod(pod *v1.Pod) (*gpushare.Pod, error) {
	body, err := json.Marshal(pod)
	if err != nil {
		return nil, fmt.Errorf("encoding pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return gpushare.ParsePod(body)
}

// maxParsed bounds parsedPods: past it the cache starts again, empty.
const maxParsed = 4096

// parsedPods caches parsePod by pod UID and resourceVersion, for the pods
// AddPod reads: a nominated pod is added before every Filter of a pod of
// lower priority on its node, each time with the same object. Dropped
// entries are not closed (a cycle may still use them): the garbage
// collector frees them (gpushare.Pod's cleanup).
type parsedPods struct {
	mu   sync.Mutex
	pods map[types.UID]parsedPod
}

type parsedPod struct {
	version string
	pod     *gpushare.Pod
	err     error
}

func (c *parsedPods) get(pod *v1.Pod) (*gpushare.Pod, error) {
	c.mu.Lock()
	e, ok := c.pods[pod.UID]
	c.mu.Unlock()
	if ok && e.version == pod.ResourceVersion && pod.UID != "" {
		return e.pod, e.err
	}
	gp, err := parsePod(pod)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pods == nil || len(c.pods) >= maxParsed {
		c.pods = make(map[types.UID]parsedPod)
	}
	if pod.UID != "" {
		c.pods[pod.UID] = parsedPod{version: pod.ResourceVersion, pod: gp, err: err}
	}
	return gp, err
}
