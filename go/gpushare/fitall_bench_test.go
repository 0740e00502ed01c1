package gpushare_test

import (
	"fmt"
	"testing"

	"gpushare.dev/go/gpushare"
)

// BenchmarkFilterPaths compares the two ways a host learns where a pod
// fits, on 5,000 nodes of two 16-unit GPUs with one node changed between
// pods (a bind): FitAll (every node, from the library's memo) against Fit
// on the 500 nodes kube-scheduler evaluates by default.
//
//	BUILD=build go/gpushare/test.sh -run '^$' -bench FilterPaths
func BenchmarkFilterPaths(b *testing.B) {
	const nodes = 5000
	s, err := gpushare.New(gpushare.Options{ReservationTTL: gpushare.NoExpiry})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	names := make([]string, nodes)
	for i := range names {
		names[i] = fmt.Sprintf("node-%05d", i)
		if err := s.AddNode(gpushare.Node{Name: names[i], GPUMemory: []int64{16, 16}, Sharing: gpushare.SharingOn}); err != nil {
			b.Fatal(err)
		}
	}
	pod, err := gpushare.NewPod(gpushare.Request{ID: "default/p", GPUMemory: 4})
	if err != nil {
		b.Fatal(err)
	}
	filler, err := gpushare.NewPod(gpushare.Request{ID: "default/filler", GPUMemory: 2})
	if err != nil {
		b.Fatal(err)
	}
	change := func(i int) {
		p, err := s.Reserve(filler, names[(i*7919)%nodes])
		if err != nil {
			b.Fatal(err)
		}
		if err := s.ForgetReservation(p); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("FitAll", func(b *testing.B) {
		buf := make([]byte, 0, nodes+64)
		for i := 0; i < b.N; i++ {
			change(i)
			v, _, served, err := s.FitAll(pod, buf)
			if err != nil || !served || len(v) != nodes {
				b.Fatal(v, served, err)
			}
		}
	})
	b.Run("Fit500", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			change(i)
			start := (i * 500) % nodes
			for k := 0; k < 500; k++ {
				if _, _, err := s.Fit(pod, names[(start+k)%nodes]); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
