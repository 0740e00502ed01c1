package plugin

import (
	"context"
	"fmt"
	"testing"

	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"gpushare.dev/go/gpushare"
)

// BenchmarkSchedulingCycle is GpuShare's share of one pod's scheduling cycle
// as kube-scheduler runs it on a cluster of `nodes` nodes of two 16-unit
// GPUs, a third of them holding a pod: PreFilter, Filter on the nodes
// kube-scheduler evaluates (percentageOfNodesToScore's adaptive share, at
// least 100), PreScore and Score on those, Reserve and Unreserve.
//
//	BUILD=build scheduler-plugin/test.sh -run '^$' -bench SchedulingCycle -benchmem
//
// verdicts=false drops PreFilter's verdicts (gpushare.Scheduler.FitAll), so
// that Filter asks the library node by node: the two rows of one run
// compare the paths.
func BenchmarkSchedulingCycle(b *testing.B) {
	for _, nodes := range []int{1000, 5000} {
		for _, verdicts := range []bool{true, false} {
			b.Run(fmt.Sprintf("nodes=%d/verdicts=%v", nodes, verdicts), func(b *testing.B) {
				benchmarkCycle(b, nodes, verdicts)
			})
		}
	}
}

// evaluated is how many nodes kube-scheduler filters per pod by default.
func evaluated(nodes int) int {
	percent := 50 - nodes/125
	if percent < 5 {
		percent = 5
	}
	n := nodes * percent / 100
	if n < 100 {
		n = min(100, nodes)
	}
	return n
}

func benchmarkCycle(b *testing.B, count int, verdicts bool) {
	ctx := context.Background()
	s, err := gpushare.New(gpushare.Options{ReservationTTL: gpushare.NoExpiry})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	p := newPlugin(s, fake.NewClientset(), corelisters.NewPodLister(indexer), klog.Background())
	infos := make([]fwk.NodeInfo, count)
	for i := range infos {
		n := gpuNode(fmt.Sprintf("node-%05d", i), 2, 16)
		p.nodeHandler().OnAdd(n, true)
		infos[i] = nodeInfo(n)
	}
	for i := 0; i < count; i += 3 {
		held := gpuPod(fmt.Sprintf("held-%05d", i), 8)
		state := framework.NewCycleState()
		if _, st := p.PreFilter(ctx, state, held, nil); !st.IsSuccess() {
			b.Fatal(st)
		}
		if st := p.Reserve(ctx, state, held, infos[i].Node().Name); !st.IsSuccess() {
			b.Fatal(st)
		}
	}
	pod := gpuPod("train", 4)
	window := evaluated(count)
	feasible := make([]fwk.NodeInfo, 0, window)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		state := framework.NewCycleState()
		if _, st := p.PreFilter(ctx, state, pod, nil); !st.IsSuccess() {
			b.Fatal(st)
		}
		if !verdicts {
			readState(state).verdicts = nil
		}
		// kube-scheduler starts each pod's window where the last one ended.
		start := (i * window) % count
		feasible = feasible[:0]
		for k := 0; k < window; k++ {
			ni := infos[(start+k)%count]
			if st := p.Filter(ctx, state, pod, ni); st.IsSuccess() {
				feasible = append(feasible, ni)
			}
		}
		if st := p.PreScore(ctx, state, pod, feasible); !st.IsSuccess() {
			b.Fatal(st)
		}
		best, bestScore := "", int64(-1)
		for _, ni := range feasible {
			score, st := p.Score(ctx, state, pod, ni)
			if !st.IsSuccess() {
				b.Fatal(st)
			}
			if score > bestScore {
				best, bestScore = ni.Node().Name, score
			}
		}
		if st := p.Reserve(ctx, state, pod, best); !st.IsSuccess() {
			b.Fatal(st)
		}
		p.Unreserve(ctx, state, pod, best)
	}
	b.StopTimer()
	b.ReportMetric(float64(window), "nodes-filtered/op")
}
