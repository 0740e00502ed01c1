package main

import (
	"strings"
	"testing"
)

func TestRunFlags(t *testing.T) {
	c, err := parseRun([]string{"--node-name=n1", "--memory-unit=MiB", "--nvml-library=/x/libnvidia-ml.so.1"})
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(c.discoveryArgs(), " ")
	want := "--memory-unit=MiB --health-interval-ms=5000 --health-checks=true --node-name=n1 --nvml-library=/x/libnvidia-ml.so.1"
	if got != want {
		t.Fatalf("discovery args %q, want %q", got, want)
	}
	if c.cdiDir != "/var/run/cdi" || c.pluginDir != "/var/lib/kubelet/plugins/gpu.gpushare.dev" ||
		c.registrarDir != "/var/lib/kubelet/plugins_registry" {
		t.Fatalf("default folders %+v", c)
	}
	t.Setenv("NODE_NAME", "")
	for args, msg := range map[string]string{
		"":                                      "no node name",
		"--node-name=n1 --memory-unit=TB":       `"TB"`,
		"--node-name=n1 --health-interval-ms=5": "5, less than 100",
		"--node-name=n1 extra":                  "no arguments",
	} {
		if _, err := parseRun(strings.Fields(args)); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: %v, want %q", args, err, msg)
		}
	}
}
