package gpushare_test

import (
	"errors"
	"fmt"

	"gpushare.dev/go/gpushare"
)

func Example() {
	s, err := gpushare.New(gpushare.Options{Policy: "binpack"})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	// Two GPUs of 16 memory units each (say GiB), taking shared work.
	if err := s.AddNode(gpushare.Node{
		Name:      "n1",
		GPUMemory: []int64{16, 16},
		Labels:    map[string]string{"gpushare": "true"},
	}); err != nil {
		panic(err)
	}

	pod, err := gpushare.NewPod(gpushare.Request{ID: "default/p1", GPUMemory: 4})
	if err != nil {
		panic(err)
	}
	defer pod.Close()
	fits, _, _ := s.Fit(pod, "n1")
	fmt.Println("fits n1:", fits)

	p, err := s.Reserve(pod, "n1")
	if err != nil {
		panic(err)
	}
	fmt.Println(p.RequestID, "on", p.Node, "GPUs", p.GPUs, "units per GPU", p.MemoryPerGPU)
	// The pod is bound: the reservation becomes a placement.
	if err := s.Confirm(p.RequestID); err != nil {
		panic(err)
	}

	big, err := gpushare.NewPod(gpushare.Request{ID: "default/big", GPUMemory: 64})
	if err != nil {
		panic(err)
	}
	defer big.Close()
	_, err = s.Reserve(big, "n1")
	fmt.Println("too big:", errors.Is(err, gpushare.ErrResourceExhausted))

	fmt.Println("check:", s.Check())
	// Output:
	// fits n1: true
	// default/p1 on n1 GPUs [0] units per GPU 4
	// too big: true
	// check: <nil>
}
