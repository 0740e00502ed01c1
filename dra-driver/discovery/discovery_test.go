package discovery

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakePlugin is a script standing in for gpushare-device-plugin: it checks
// its arguments and prints the stream given.
func fakePlugin(t *testing.T, stream string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "plugin")
	script := "#!/bin/sh\n[ \"$1 $2 $3\" = '--discover --watch-health --memory-unit=GiB' ] || { echo \"bad args $*\" >&2; exit 2; }\ncat <<'END'\n" + stream + "\nEND\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

const inventory = `{"driver_version":"550.54.15","gpus":[{"index":0,"uuid":"GPU-a","units":40},{"index":3,"uuid":"GPU-b","units":40}],"memory_unit":"GiB"}`

func TestTheStreamGivesTheInventoryThenHealth(t *testing.T) {
	s, inv, err := Start(context.Background(), fakePlugin(t, inventory+"\n"+`{"unhealthy":{}}`+"\n"+`{"unhealthy":{"3":"XID 79"}}`), "--memory-unit=GiB")
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.GPUs) != 2 || inv.GPUs[1].Index != 3 {
		t.Fatalf("inventory %+v", inv)
	}
	h, err := s.Next()
	if err != nil || len(h) != 0 {
		t.Fatalf("first health %v %v", h, err)
	}
	h, err = s.Next()
	if err != nil || h[3] != "XID 79" || len(h) != 1 {
		t.Fatalf("second health %v %v", h, err)
	}
	// The program ended: an error, every time after.
	for i := 0; i < 2; i++ {
		if _, err := s.Next(); err == nil || !strings.Contains(err.Error(), "ended") {
			t.Fatalf("after the end: %v", err)
		}
	}
}

func TestBadStreamsAreRefused(t *testing.T) {
	if _, _, err := Start(context.Background(), fakePlugin(t, "not json"), "--memory-unit=GiB"); err == nil ||
		!strings.Contains(err.Error(), "--discover's JSON") {
		t.Fatalf("bad inventory: %v", err)
	}
	if _, _, err := Start(context.Background(), fakePlugin(t, inventory), "--memory-unit=MiB"); err == nil {
		t.Fatal("a program that failed at once was read")
	}
	if _, _, err := Start(context.Background(), filepath.Join(t.TempDir(), "missing")); err == nil ||
		!strings.Contains(err.Error(), "missing") {
		t.Fatalf("missing program: %v", err)
	}
	for _, line := range []string{`{"unhealthy":{"x":"y"}}`, `{"gpus":[]}`, `{"unhealthy":{"-1":"y"}}`} {
		if _, err := ParseHealth([]byte(line)); err == nil {
			t.Errorf("%s accepted", line)
		}
	}
}
