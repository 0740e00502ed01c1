// kube-scheduler with the GpuShare plugin compiled in, as out-of-tree
// plugins are: the upstream command, its flags and configuration, and one
// more plugin in the registry. Enable it in a KubeSchedulerConfiguration
// profile (deploy/scheduler-plugin/scheduler-config.yaml).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"gpushare.dev/scheduler-plugin/plugin"
)

func main() {
	command := app.NewSchedulerCommand(app.WithPlugin(plugin.Name, plugin.New))
	os.Exit(cli.Run(command))
}
