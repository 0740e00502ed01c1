package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"gpushare.dev/dra-driver/devices"
	"gpushare.dev/dra-driver/discovery"
	"gpushare.dev/dra-driver/node"
)

// runConfig is run's flags.
type runConfig struct {
	node, devicePlugin, memoryUnit, nvmlLibrary, kubeconfig string
	registrarDir, pluginDir, cdiDir                         string
	healthIntervalMS                                        int
	healthChecks                                            bool
}

func parseRun(args []string) (runConfig, error) {
	c := runConfig{}
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.StringVar(&c.node, "node-name", os.Getenv("NODE_NAME"), "this node (default: $NODE_NAME)")
	fs.StringVar(&c.devicePlugin, "device-plugin", "gpushare-device-plugin",
		"gpushare-device-plugin, run with --discover --watch-health for the GPUs and their health")
	fs.StringVar(&c.memoryUnit, "memory-unit", "GiB", "GiB or MiB: the unit of each GPU's memory capacity")
	fs.StringVar(&c.nvmlLibrary, "nvml-library", "", "NVML, passed to gpushare-device-plugin (default: its default)")
	fs.IntVar(&c.healthIntervalMS, "health-interval-ms", 5000, "how often GPU health is probed (at least 100)")
	fs.BoolVar(&c.healthChecks, "health-checks", true, "watch NVML events and probe each GPU; false keeps every GPU healthy")
	fs.StringVar(&c.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig (default: $KUBECONFIG, else the in-cluster service account)")
	fs.StringVar(&c.registrarDir, "registrar-dir", "/var/lib/kubelet/plugins_registry", "the kubelet's plugin registration folder")
	fs.StringVar(&c.pluginDir, "plugin-dir", "/var/lib/kubelet/plugins/"+devices.DriverName, "this driver's folder (its DRA socket)")
	fs.StringVar(&c.cdiDir, "cdi-dir", "/var/run/cdi", "where CDI specs of prepared claims are written (the container runtime reads them)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch {
	case fs.NArg() > 0:
		return c, fmt.Errorf("run takes no arguments, got %q", fs.Args())
	case c.node == "":
		return c, fmt.Errorf("no node name: pass --node-name, or set NODE_NAME (the DaemonSet sets it from spec.nodeName)")
	case c.memoryUnit != "GiB" && c.memoryUnit != "MiB":
		return c, fmt.Errorf("--memory-unit is %q, not GiB or MiB", c.memoryUnit)
	case c.healthIntervalMS < 100:
		return c, fmt.Errorf("--health-interval-ms is %d, less than 100", c.healthIntervalMS)
	}
	return c, nil
}

// discoveryArgs are the flags gpushare-device-plugin gets.
func (c runConfig) discoveryArgs() []string {
	args := []string{"--memory-unit=" + c.memoryUnit, fmt.Sprintf("--health-interval-ms=%d", c.healthIntervalMS),
		fmt.Sprintf("--health-checks=%t", c.healthChecks), "--node-name=" + c.node}
	if c.nvmlLibrary != "" {
		args = append(args, "--nvml-library="+c.nvmlLibrary)
	}
	return args
}

// errGPUsChanged ends run with status 1: NVML came back with other GPUs.
var errGPUsChanged = errors.New("the GPU discovery ended")

func run(args []string) error {
	c, err := parseRun(args)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	logger := klog.Background()
	ctx = klog.NewContext(ctx, logger)

	rest, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		return fmt.Errorf("the Kubernetes API: %w", err)
	}
	rest.UserAgent = "gpushare-dra-driver"
	client, err := kubernetes.NewForConfig(rest)
	if err != nil {
		return fmt.Errorf("the Kubernetes API: %w", err)
	}

	stream, inv, err := discovery.Start(ctx, c.devicePlugin, c.discoveryArgs()...)
	if err != nil {
		return err
	}
	defer stream.Stop()
	unhealthy, err := stream.Next()
	if err != nil {
		return err
	}
	if inv.MemoryUnit != c.memoryUnit {
		return fmt.Errorf("the inventory counts in %s, not --memory-unit %s", inv.MemoryUnit, c.memoryUnit)
	}
	for _, dir := range []string{c.pluginDir, c.cdiDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	if _, err := os.Stat(c.registrarDir); err != nil {
		return fmt.Errorf("the kubelet's plugin registration folder: %w", err)
	}
	d := node.New(c.node, c.cdiDir, inv)
	d.SetHealth(unhealthy)
	resources, err := d.Resources()
	if err != nil {
		return err
	}
	helper, err := kubeletplugin.Start(ctx, d,
		kubeletplugin.DriverName(devices.DriverName),
		kubeletplugin.NodeName(c.node),
		kubeletplugin.KubeClient(client),
		kubeletplugin.RegistrarDirectoryPath(c.registrarDir),
		kubeletplugin.PluginDataDirectoryPath(filepath.Clean(c.pluginDir)))
	if err != nil {
		return fmt.Errorf("serving the kubelet: %w", err)
	}
	defer helper.Stop()
	if err := helper.PublishResources(ctx, resources); err != nil {
		return fmt.Errorf("publishing the ResourceSlice: %w", err)
	}
	for _, g := range inv.GPUs {
		logger.Info("GPU", "index", g.Index, "uuid", g.UUID, "name", g.Name, "units", g.Units, "unit", inv.MemoryUnit)
	}
	logger.Info("serving", "node", c.node, "driver", devices.DriverName, "cdiDir", c.cdiDir)

	health := make(chan map[int]string)
	ended := make(chan error, 1)
	go func() {
		for {
			h, err := stream.Next()
			if err != nil {
				ended <- err
				return
			}
			select {
			case health <- h:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			logger.Info("stopping")
			return nil
		case err := <-ended:
			if ctx.Err() != nil {
				return nil
			}
			logger.Error(err, "the GPU discovery ended; starting again is the DaemonSet's")
			return errGPUsChanged
		case h := <-health:
			if !d.SetHealth(h) {
				continue
			}
			logger.Info("GPU health changed", "unhealthy", h)
			r, err := d.Resources()
			if err == nil {
				err = helper.PublishResources(ctx, r)
			}
			if err != nil {
				logger.Error(err, "republishing the ResourceSlice")
			}
		}
	}
}
