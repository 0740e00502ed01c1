// Package discovery runs `gpushare-device-plugin --discover --watch-health`
// and reads its stream: the node's GPU inventory (one JSON line, package
// devices' Inventory), then the unhealthy GPUs now and at each change
// ({"unhealthy":{"<index>":"<why>"}}). NVML is read by that one program,
// for the device plugin and the DRA driver alike.
//
//	s, inv, err := discovery.Start(ctx, "gpushare-device-plugin", "--memory-unit=GiB")
//	for {
//		unhealthy, err := s.Next()   // blocks; an error when the program ends
//		...
//	}
package discovery

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"gpushare.dev/dra-driver/devices"
)

// Stream is a running discovery program.
type Stream struct {
	cmd   *exec.Cmd
	lines *bufio.Scanner
	err   error
}

// Start runs program with --discover --watch-health and extra, and reads
// the inventory line. The program's stderr goes to this process's. It ends
// when ctx is done.
func Start(ctx context.Context, program string, extra ...string) (*Stream, devices.Inventory, error) {
	cmd := exec.CommandContext(ctx, program, append([]string{"--discover", "--watch-health"}, extra...)...)
	cmd.Stderr = os.Stderr
	// Should this process die without stopping it (SIGKILL), the program
	// must not outlive it holding NVML.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, devices.Inventory{}, err
	}
	if err := cmd.Start(); err != nil {
		return nil, devices.Inventory{}, fmt.Errorf("running %s: %w", program, err)
	}
	s := &Stream{cmd: cmd, lines: bufio.NewScanner(out)}
	s.lines.Buffer(make([]byte, 64<<10), 16<<20)
	line, err := s.next()
	if err != nil {
		return nil, devices.Inventory{}, err
	}
	inv, err := devices.ParseInventory(line)
	if err != nil {
		s.Stop()
		return nil, devices.Inventory{}, err
	}
	return s, inv, nil
}

// Next blocks for the next health line and returns the unhealthy GPUs by
// NVML index. An error when the program ended (it ends when NVML comes back
// with other GPUs: the driver must start again) or wrote something else.
func (s *Stream) Next() (map[int]string, error) {
	line, err := s.next()
	if err != nil {
		return nil, err
	}
	h, err := ParseHealth(line)
	if err != nil {
		s.Stop()
		return nil, err
	}
	return h, nil
}

func (s *Stream) next() ([]byte, error) {
	if s.err != nil {
		return nil, s.err
	}
	if s.lines.Scan() {
		return s.lines.Bytes(), nil
	}
	err := s.lines.Err()
	if err == nil {
		err = io.EOF
	}
	waitErr := s.cmd.Wait()
	s.err = fmt.Errorf("%s ended (%v) after reading: %v", s.cmd.Path, waitErr, err)
	return nil, s.err
}

// Stop ends the program.
func (s *Stream) Stop() {
	if s.cmd.Process != nil && s.cmd.ProcessState == nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
}

// ParseHealth reads one health line: {"unhealthy":{"1":"XID 79"}}.
func ParseHealth(line []byte) (map[int]string, error) {
	var msg struct {
		Unhealthy *map[string]string `json:"unhealthy"`
	}
	if err := json.Unmarshal(line, &msg); err != nil || msg.Unhealthy == nil {
		return nil, fmt.Errorf("not a health line of --watch-health: %q", truncate(string(line)))
	}
	out := map[int]string{}
	for k, why := range *msg.Unhealthy {
		i, err := strconv.Atoi(k)
		if err != nil || i < 0 {
			return nil, fmt.Errorf("health line names GPU %q, not an index", k)
		}
		out[i] = why
	}
	return out, nil
}

func truncate(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}
