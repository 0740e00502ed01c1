// gpushare-dra-driver: gpushare's GPUs as Dynamic Resource Allocation
// devices (package devices). This program so far prints a node's
// ResourceSlice from the GPU inventory gpushare-device-plugin --discover
// writes:
//
//	gpushare-device-plugin --discover --node-name n1 > gpus.json
//	gpushare-dra-driver slice --node-name n1 --inventory gpus.json
//
// dra-driver/README.md.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"gpushare.dev/dra-driver/devices"
)

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "gpushare-dra-driver:", err)
		os.Exit(2)
	}
}

func run(args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) == 0 || args[0] != "slice" {
		return fmt.Errorf("usage: gpushare-dra-driver slice --node-name NAME --inventory FILE|-")
	}
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
