// gpushare-dra-driver: gpushare's GPUs as Dynamic Resource Allocation
// devices, each GPU's memory consumable capacity.
//
//	gpushare-dra-driver run --node-name n1     # the kubelet plugin (a DaemonSet)
//	gpushare-dra-driver slice --node-name n1 --inventory gpus.json
//
// run: starts `gpushare-device-plugin --discover --watch-health` (package
// discovery) for the GPUs and their health, publishes the node's
// ResourceSlice and serves the kubelet's DRA calls through
// k8s.io/dynamic-resource-allocation/kubeletplugin (package node), and
// republishes the slice when a GPU's health changes (its device tainted).
// It exits 1 when the discovery program ends (NVML came back with other
// GPUs): the DaemonSet starts it again. slice: prints the ResourceSlice of
// an inventory. dra-driver/README.md.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"gpushare.dev/dra-driver/devices"
)

func main() {
	var err error
	switch {
	case len(os.Args) > 1 && os.Args[1] == "run":
		err = run(os.Args[2:])
	case len(os.Args) > 1 && os.Args[1] == "slice":
		err = slice(os.Args[1:], os.Stdin, os.Stdout)
	default:
		err = fmt.Errorf("usage: gpushare-dra-driver run [flags] | slice --node-name NAME --inventory FILE|- (-h for the flags)")
	}
	switch {
	case errors.Is(err, errGPUsChanged):
		os.Exit(1)
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case err != nil:
		fmt.Fprintln(os.Stderr, "gpushare-dra-driver:", err)
		os.Exit(2)
	}
}

func slice(args []string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("slice", flag.ContinueOnError)
	node := fs.String("node-name", os.Getenv("NODE_NAME"), "this node (default: $NODE_NAME)")
	inventory := fs.String("inventory", "", "gpushare-device-plugin --discover's JSON, or - for stdin")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *node == "" || *inventory == "" {
		return fmt.Errorf("slice needs --node-name and --inventory")
	}
	var data []byte
	var err error
	if *inventory == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(*inventory)
	}
	if err != nil {
		return err
	}
	inv, err := devices.ParseInventory(data)
	if err != nil {
		return err
	}
	devs, err := devices.Devices(inv)
	if err != nil {
		return err
	}
	out := json.NewEncoder(stdout)
	out.SetIndent("", "  ")
	return out.Encode(devices.Slice(*node, devs))
}
