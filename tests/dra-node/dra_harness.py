"""A real node serving gpushare's GPUs through Dynamic Resource Allocation:
node_harness.Node run with containerd 2 (tests/node/build-containerd.sh,
which injects CDI devices) instead of Debian's 1.6, and gpushare-dra-driver
in place of the device plugin's kubelet side. The driver runs on the host
as user `gpushare-dra-driver` (the chart's ClusterRole for it), reads the
GPUs and their health from `gpushare-device-plugin --discover
--watch-health` on the NVML stand-in (the fixture and faults file of the
node), registers in the kubelet's plugins_registry (under the kubelet's
--root-dir), serves its DRA socket in <workdir>/node/dra-plugin and writes
CDI specs into the node's cdi_dir, which containerd reads.
PyYAML and helm (the chart's RBAC).
"""

import os
import signal
import subprocess
import time

from harness import ApiError, user_cluster_role, wait_until, write_kubeconfig
from node_harness import NODE_NAME, Node, fixture_gpus

DRIVER = "gpu.gpushare.dev"
CLASS = "gpushare.dev"
WHOLE_GPU_RESOURCE = "nvidia.com/gpu"
RESOURCE = "/apis/resource.k8s.io/v1"
DRIVER_STARTED = 60

CHART = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "deploy", "chart")


def driver_rules(helm):
    """The rules of the driver's ClusterRole as the chart ships it
    (deploy/chart with dra.enabled, rendered by `helm`)."""
    import yaml  # PyYAML, beside pytest.
    out = subprocess.run([helm, "template", "gpushare", CHART, "--set", "dra.enabled=true",
                          "--show-only", "templates/dra/rbac.yaml"],
                         check=True, stdout=subprocess.PIPE, text=True).stdout
    (role,) = [o for o in yaml.safe_load_all(out) if o and o["kind"] == "ClusterRole"]
    return role["rules"]


def device_classes(helm):
    """The chart's DeviceClasses: gpushare.dev, and gpushare.dev-whole
    serving the extended resource nvidia.com/gpu."""
    import yaml
    out = subprocess.run([helm, "template", "gpushare", CHART, "--set", "dra.enabled=true",
                          "--set", f"dra.extendedResourceName={WHOLE_GPU_RESOURCE}",
                          "--show-only", "templates/dra/deviceclass.yaml"],
                         check=True, stdout=subprocess.PIPE, text=True).stdout
    return [o for o in yaml.safe_load_all(out) if o]


class DraNode(Node):
    """A node whose GPUs are offered by gpushare-dra-driver."""

    def __init__(self, cp, kube_bin, device_plugin_bin, nvml_library, containerd_bin, driver_bin,
                 helm):
        super().__init__(cp, kube_bin, device_plugin_bin, nvml_library,
                         containerd_bin=containerd_bin)
        self.driver_bin, self.helm = driver_bin, helm
        self.dra_plugin_dir = os.path.join(self.dir, "dra-plugin")

    def _credentials(self):
        super()._credentials()
        pki, cp = self.cp.pki, self.cp
        self.driver_kubeconfig = write_kubeconfig(
            os.path.join(self.dir, "dra-driver.kubeconfig"), cp.server, pki.ca_crt,
            *pki.issue("dra-driver", "/CN=gpushare-dra-driver", client=True),
            "gpushare-dra-driver")
        cp.create_rbac(user_cluster_role("gpushare-e2e-dra-driver", "gpushare-dra-driver",
                                         driver_rules(self.helm)))
        for c in device_classes(self.helm):
            self.api.request("POST", f"{RESOURCE}/deviceclasses", c)

    def start_driver(self, fixture):
        """(Re)starts gpushare-dra-driver on NVML fixture `fixture`; waits
        until the node's ResourceSlice lists its GPUs with no taint and the
        kubelet has registered the driver. Returns the seconds that took."""
        self.stop_driver()
        self.fixture = fixture
        os.makedirs(self.dra_plugin_dir, exist_ok=True)
        env = dict(os.environ, GPUSHARE_NVML_FIXTURE=fixture,
                   GPUSHARE_NVML_FAULTS=self.faults_path)
        argv = [self.driver_bin, "run", "--node-name", NODE_NAME,
                "--kubeconfig", self.driver_kubeconfig,
                "--device-plugin", self.device_plugin_bin,
                "--nvml-library", self.nvml_library, "--health-interval-ms", "500",
                "--registrar-dir", os.path.join(self.kubelet_root, "plugins_registry"),
                "--plugin-dir", self.dra_plugin_dir, "--cdi-dir", self.cdi_dir]
        kubelet_log = os.path.join(self.logs, "kubelet.log")
        offset = os.path.getsize(kubelet_log) if os.path.exists(kubelet_log) else 0
        start = time.monotonic()
        p = self._start("gpushare-dra-driver", argv, env=env)
        want = len(self.expected_gpus())

        def published():
            p.check_alive()
            devices = self.devices()
            return len(devices) == want and not any(d.get("taints") for d in devices)

        def registered():  # The kubelet connects to the driver's health service.
            p.check_alive()
            with open(kubelet_log, "rb") as f:
                f.seek(offset)
                return b"Successfully started WatchResources health stream" in f.read()
        wait_until(f"the driver's ResourceSlice with {want} healthy GPUs", published,
                   DRIVER_STARTED, 0.2)
        wait_until("the kubelet registering the driver", registered, DRIVER_STARTED, 0.2)
        return time.monotonic() - start

    def use_fixture(self, fixture):
        """Makes sure the driver runs on NVML fixture `fixture` with every GPU
        untainted: restarts it otherwise."""
        p = self.procs.get("gpushare-dra-driver")
        if (p is None or not p.alive() or self.fixture != fixture
                or any(d.get("taints") for d in self.devices())):
            self.start_driver(fixture)

    def expected_gpus(self):
        return fixture_gpus(self.fixture)

    def stop_driver(self, sig=signal.SIGTERM):
        p = self.procs.pop("gpushare-dra-driver", None)
        if p:
            p.stop(sig)

    def stop_device_plugin(self, sig=signal.SIGTERM):
        # Node.stop() stops the device plugin after the pods are gone: the
        # driver goes then too (the kubelet unprepares claims until then).
        self.stop_driver(sig)
        super().stop_device_plugin(sig)

    def slices(self):
        """This node's ResourceSlices of the driver."""
        items = self.api.get(f"{RESOURCE}/resourceslices")["items"]
        return [s for s in items if s["spec"]["driver"] == DRIVER
                and s["spec"].get("nodeName") == NODE_NAME]

    def devices(self):
        return [d for s in self.slices() for d in s["spec"].get("devices", [])]

    def claims(self):
        try:
            return self.api.get(f"{RESOURCE}/namespaces/default/resourceclaims")["items"]
        except ApiError as e:
            if e.status == 404:
                return []
            raise

    def prepared_files(self):
        """The CDI specs of prepared claims in the node's cdi_dir."""
        return sorted(f for f in os.listdir(self.cdi_dir) if f.endswith(".json"))
