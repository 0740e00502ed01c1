//go:build tools

// Package tools lists the containerd v2 programs tests/dra-node/ runs (built
// by ../build-containerd.sh), so that `go mod tidy` keeps their
// dependencies in go.sum.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
