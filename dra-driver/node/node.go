// Package node is gpushare-dra-driver's kubelet side: the DRAPlugin of
// k8s.io/dynamic-resource-allocation/kubeletplugin for one node's GPUs.
//
//	d := node.New("n1", "/var/run/cdi", inventory)
//	d.SetHealth(unhealthy)                 // from the device plugin's stream
//	helper, _ := kubeletplugin.Start(ctx, d, ...)
//	helper.PublishResources(ctx, d.Resources())
//
// Preparing a claim writes one CDI spec file into the CDI folder (package
// prepare: the claim's GPUs and the ALIYUN_COM_GPU_MEM_* environment) and
// hands the kubelet its CDI device; unpreparing removes it. Those files are
// the driver's only state: a restarted driver, or a second instance during
// a rolling update, reads what is prepared from them.
//
// The last line of defence: whatever an allocation says, a claim is not
// prepared when its GPUs, with the claims prepared before it, would hold
// more memory units than they have, nor on a GPU that is unhealthy (unless
// it was prepared before, so that a restarted kubelet finds it again).
package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"gpushare.dev/dra-driver/devices"
	"gpushare.dev/dra-driver/prepare"
)

// Annotations of the CDI spec files: what the claim holds, read back to
// know what is prepared.
const (
	unitsAnnotation = devices.DriverName + "/units" // "0=8,1=8": GPU index = units.
	claimAnnotation = devices.DriverName + "/claim" // namespace/name.
	filePrefix      = "gpu.gpushare.dev-claim_"
)

// HealthResend is how often the health of every device is sent to the
// kubelet when nothing changes (it treats a report older than 30 s as
// unknown).
const HealthResend = 10 * time.Second

// Driver serves the kubelet's DRA calls for one node's GPUs. Safe for
// concurrent use.
type Driver struct {
	node   string
	cdiDir string
	inv    devices.Inventory
	now    func() time.Time

	mu        sync.Mutex
	unhealthy map[int]string
	since     map[int]metav1.Time // When each GPU became unhealthy.
	changed   chan struct{}       // Closed and replaced at each change of health.
}

// New serves inv's GPUs on node, writing CDI specs into cdiDir (which must
// exist and be a folder the container runtime reads CDI specs from).
func New(node, cdiDir string, inv devices.Inventory) *Driver {
	return &Driver{node: node, cdiDir: cdiDir, inv: inv, now: time.Now,
		unhealthy: map[int]string{}, since: map[int]metav1.Time{}, changed: make(chan struct{})}
}

// SetHealth records the unhealthy GPUs (NVML index → why); every other GPU
// is healthy. It reports whether anything changed.
func (d *Driver) SetHealth(unhealthy map[int]string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	same := len(unhealthy) == len(d.unhealthy)
	for g, why := range unhealthy {
		same = same && d.unhealthy[g] == why
	}
	if same {
		return false
	}
	now := metav1.NewTime(d.now().Truncate(time.Second))
	since := map[int]metav1.Time{}
	for g := range unhealthy {
		if t, ok := d.since[g]; ok {
			since[g] = t
		} else {
			since[g] = now
		}
	}
	d.unhealthy = map[int]string{}
	for g, why := range unhealthy {
		d.unhealthy[g] = why
	}
	d.since = since
	close(d.changed)
	d.changed = make(chan struct{})
	return true
}

// Resources is what the node publishes: one pool named after the node, its
// GPUs as devices (package devices), the unhealthy ones tainted.
func (d *Driver) Resources() (resourceslice.DriverResources, error) {
	devs, err := devices.Devices(d.inv)
	if err != nil {
		return resourceslice.DriverResources{}, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	devices.Taint(devs, d.unhealthy, d.since)
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		d.node: {Slices: []resourceslice.Slice{{Devices: devs}}},
	}}, nil
}

// PrepareResourceClaims writes each claim's CDI spec and returns its CDI
// device, one per claim: the first of its devices carries it for all its
// requests, so each container of the claim gets the claim's environment
// once. A claim that cannot be prepared gets an error naming it.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	held, err := d.prepared()
	if err != nil {
		return nil, err
	}
	out := map[types.UID]kubeletplugin.PrepareResult{}
	for _, claim := range claims {
		res, err := d.prepareOne(claim, held)
		if err != nil {
			klog.FromContext(ctx).Error(err, "not prepared", "claim", klog.KObj(claim))
			out[claim.UID] = kubeletplugin.PrepareResult{Err: err}
			continue
		}
		out[claim.UID] = res
	}
	return out, nil
}

func (d *Driver) prepareOne(claim *resourceapi.ResourceClaim, held map[types.UID]Prepared) (kubeletplugin.PrepareResult, error) {
	grants, err := prepare.Grants(claim, d.node, d.inv)
	if err != nil {
		return kubeletplugin.PrepareResult{}, err
	}
	units := map[int]int64{}
	for _, g := range grants {
		units[g.Index] += g.Units
	}
	_, again := held[claim.UID]
	used := map[int]int64{}
	var others []string
	for uid, p := range held {
		if uid == claim.UID {
			continue
		}
		for i, u := range p.Units {
			used[i] += u
		}
		others = append(others, p.Claim)
	}
	for _, g := range d.inv.GPUs {
		want, ok := units[g.Index]
		if !ok {
			continue
		}
		if used[g.Index]+want > g.Units {
			return kubeletplugin.PrepareResult{}, fmt.Errorf(
				"claim %s/%s: GPU %d would hold %d units (%d of this claim, %d of claims prepared before), it has %d",
				claim.Namespace, claim.Name, g.Index, used[g.Index]+want, want, used[g.Index], g.Units)
		}
		if why, bad := d.unhealthy[g.Index]; bad && !again {
			return kubeletplugin.PrepareResult{}, fmt.Errorf("claim %s/%s: GPU %d is unhealthy (%s)",
				claim.Namespace, claim.Name, g.Index, why)
		}
	}
	spec, id := prepare.CDISpec(string(claim.UID), prepare.Env(grants, d.inv))
	spec.Annotations = map[string]string{
		unitsAnnotation: formatUnits(units),
		claimAnnotation: claim.Namespace + "/" + claim.Name,
	}
	if err := writeSpec(d.specPath(claim.UID), spec); err != nil {
		return kubeletplugin.PrepareResult{}, fmt.Errorf("claim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	held[claim.UID] = Prepared{Claim: claim.Namespace + "/" + claim.Name, Units: units}
	var res kubeletplugin.PrepareResult
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != devices.DriverName {
			continue
		}
		dev := kubeletplugin.Device{Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device, ShareID: r.ShareID}
		if len(res.Devices) == 0 {
			dev.Requests = nil // All of the claim's requests.
			dev.CDIDeviceIDs = []string{id}
		}
		res.Devices = append(res.Devices, dev)
	}
	return res, nil
}

// UnprepareResourceClaims removes the claims' CDI specs; a claim not
// prepared is no error.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[types.UID]error{}
	for _, c := range claims {
		err := os.Remove(d.specPath(c.UID))
		if errors.Is(err, os.ErrNotExist) {
			err = nil
		}
		out[c.UID] = err
	}
	return out, nil
}

// HandleError logs errors of the background work (publishing the slice);
// they are retried, and none is fatal.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	runtime.HandleErrorWithContext(ctx, err, msg)
}

// WatchHealthStatus reports every device's health to the kubelet now, at
// each change, and every HealthResend.
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	for {
		d.mu.Lock()
		changed := d.changed
		report := kubeletplugin.DeviceHealthReport{}
		now := d.now()
		for _, g := range d.inv.GPUs {
			h := kubeletplugin.DeviceHealth{PoolName: d.node, DeviceName: devices.DeviceName(g),
				Health: kubeletplugin.HealthStatusHealthy, LastUpdated: now, HealthCheckTimeout: 3 * HealthResend}
			if why, bad := d.unhealthy[g.Index]; bad {
				h.Health, h.Message = kubeletplugin.HealthStatusUnhealthy, why
			}
			report.Devices = append(report.Devices, h)
		}
		d.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case reports <- report:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-time.After(HealthResend):
		}
	}
}

// Prepared is what one prepared claim holds, as its CDI spec records it.
type Prepared struct {
	Claim string        // namespace/name.
	Units map[int]int64 // GPU index → memory units.
}

// prepared reads the claims prepared on this node from the CDI folder.
func (d *Driver) prepared() (map[types.UID]Prepared, error) {
	return ReadPrepared(d.cdiDir)
}

// ReadPrepared reads the claims prepared on a node from its CDI folder (the
// files this package writes; others are ignored). A file of ours that
// cannot be read is an error: its claim's units would go uncounted.
func ReadPrepared(cdiDir string) (map[types.UID]Prepared, error) {
	entries, err := os.ReadDir(cdiDir)
	if err != nil {
		return nil, fmt.Errorf("reading the prepared claims: %w", err)
	}
	out := map[types.UID]Prepared{}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, filePrefix) || !strings.HasSuffix(name, ".json") {
			continue
		}
		uid := types.UID(strings.TrimSuffix(strings.TrimPrefix(name, filePrefix), ".json"))
		data, err := os.ReadFile(filepath.Join(cdiDir, name))
		if err != nil {
			return nil, fmt.Errorf("reading the prepared claims: %w", err)
		}
		var spec cdispec.Spec
		if err := json.Unmarshal(data, &spec); err != nil {
			return nil, fmt.Errorf("the prepared claim file %s is not a CDI spec: %w", name, err)
		}
		units, err := parseUnits(spec.Annotations[unitsAnnotation])
		if err != nil {
			return nil, fmt.Errorf("the prepared claim file %s: %w", name, err)
		}
		out[uid] = Prepared{Claim: spec.Annotations[claimAnnotation], Units: units}
	}
	return out, nil
}

func (d *Driver) specPath(uid types.UID) string {
	return filepath.Join(d.cdiDir, filePrefix+string(uid)+".json")
}

func formatUnits(units map[int]int64) string {
	idx := make([]int, 0, len(units))
	for i := range units {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	parts := make([]string, 0, len(idx))
	for _, i := range idx {
		parts = append(parts, fmt.Sprintf("%d=%d", i, units[i]))
	}
	return strings.Join(parts, ",")
}

func parseUnits(s string) (map[int]int64, error) {
	out := map[int]int64{}
	for _, part := range strings.Split(s, ",") {
		i, u, ok := strings.Cut(part, "=")
		gi, err1 := strconv.Atoi(i)
		un, err2 := strconv.ParseInt(u, 10, 64)
		if !ok || err1 != nil || err2 != nil || gi < 0 || un < 1 {
			return nil, fmt.Errorf("annotation %s is %q, not index=units,...", unitsAnnotation, s)
		}
		out[gi] += un
	}
	return out, nil
}

// writeSpec writes spec to path atomically (a container runtime watching
// the folder never reads half a file).
func writeSpec(path string, spec cdispec.Spec) error {
	data, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err != nil {
		return fmt.Errorf("writing its CDI spec: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("writing its CDI spec: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
