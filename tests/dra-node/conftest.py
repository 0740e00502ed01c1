"""pytest fixtures of the DRA end-to-end tests: one control plane (etcd,
kube-apiserver, kube-controller-manager with only the resource claim
controller and the garbage collector (claims made from templates are
owned by their pods), kube-scheduler: built with the GpuShare plugin when
GPUSHARE_PLUGIN_SCHEDULER names it, deploy/scheduler-plugin/'s
configuration, else the release's own) and one DRA node (dra_harness.py:
containerd 2, runc, a kubelet, gpushare-dra-driver) per session; per test
no pods or claims, no injected NVML faults, and the driver running on the
fixture the test asks for, its GPUs untainted.

Environment: GPUSHARE_KUBE_BIN (kube-apiserver, kube-scheduler,
kube-controller-manager, kubelet), GPUSHARE_CONTAINERD_BIN (containerd 2;
else tests/node/build-containerd.sh builds or finds it), GPUSHARE_DRA_DRIVER,
GPUSHARE_DEVICE_PLUGIN, GPUSHARE_NVML_STUB (else those of the build folder
$BUILD), GPUSHARE_PLUGIN_SCHEDULER (optional), GPUSHARE_HELM (else the helm of
GPUSHARE_KUBE_BIN: the driver's RBAC is the chart's), GPUSHARE_KUBE_KEEP=1 keeps
the work folder.
"""

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "kube"))
sys.path.insert(0, os.path.join(ROOT, "tests", "node"))
sys.path.insert(0, HERE)

import harness  # noqa: E402
import node_harness  # noqa: E402
import dra_harness  # noqa: E402


def built(env, rel, what):
    if os.environ.get(env):
        return os.environ[env]
    path = os.path.join(ROOT, os.environ.get("BUILD", "build"), rel)
    if not os.path.exists(path):
        pytest.fail(f"no {what} at {path}: build it or set {env}")
    return path


def containerd_bin():
    if os.environ.get("GPUSHARE_CONTAINERD_BIN"):
        return os.environ["GPUSHARE_CONTAINERD_BIN"]
    r = subprocess.run([os.path.join(ROOT, "tests", "node", "build-containerd.sh")],
                       stdout=subprocess.PIPE, text=True, timeout=1800, check=True)
    return r.stdout.strip().splitlines()[-1]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if outcome.get_result().failed:
        item.gpushare_failed = True


@pytest.fixture(scope="session")
def dra_cluster(request):
    kube_bin = os.environ.get("GPUSHARE_KUBE_BIN")
    if not kube_bin:
        pytest.fail("GPUSHARE_KUBE_BIN is not set (scripts/test.d/52-node.sh sets it)")
    for tool in ("etcd", "openssl", "runc", "unshare"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not installed")
    driver = built("GPUSHARE_DRA_DRIVER", "dra-driver/gpushare-dra-driver", "gpushare-dra-driver")
    plugin = built("GPUSHARE_DEVICE_PLUGIN", "device-plugin/gpushare-device-plugin",
                   "gpushare-device-plugin")
    stub = built("GPUSHARE_NVML_STUB", "tests/nvml_stub/libnvidia-ml.so.1", "NVML stand-in")
    extender = built("GPUSHARE_EXTENDER", "extender/gpushare-extender", "gpushare-extender")
    version = subprocess.run([os.path.join(kube_bin, "kubelet"), "--version"], check=True,
                             stdout=subprocess.PIPE, text=True).stdout  # "Kubernetes v1.37.2"
    minor = int(version.split("v1.")[1].split(".")[0])
    if minor < 37:
        pytest.skip(f"kubelet 1.{minor}: the DRA node tests run the kubelet of 1.37 or later "
                    "(consumable capacity and device taints on by default)")
    workdir = tempfile.mkdtemp(prefix="gpushare-dra-node-")
    cp = harness.ControlPlane(kube_bin, extender, workdir,
                              apiserver_args=node_harness.NODE_APISERVER_ARGS,
                              controllers=("resourceclaim-controller", "garbage-collector-controller"))
    helm = os.environ.get("GPUSHARE_HELM") or os.path.join(kube_bin, "helm")
    node = dra_harness.DraNode(cp, kube_bin, plugin, stub, containerd_bin(), driver, helm)
    with node_harness.running(cp, node, request.session, workdir, "DRA node e2e"):
        if os.environ.get("GPUSHARE_PLUGIN_SCHEDULER"):
            harness.use_shipped_plugin(cp, os.environ["GPUSHARE_PLUGIN_SCHEDULER"])
            cp.start_plugin_scheduler()
        else:
            cp.start_scheduler(with_extender=False)
        yield node


@pytest.fixture
def dra_node(dra_cluster, request):
    """The node with no pods or claims and no NVML faults; the driver
    restarted on the test's fixture when it is not running on it with every
    GPU untainted."""
    node = dra_cluster
    node.delete_all_pods()
    for c in node.claims():
        node.api.request("DELETE", f"{dra_harness.RESOURCE}/namespaces/default/resourceclaims/"
                         f"{c['metadata']['name']}", ok=(200, 202, 404))
    node.write_faults({})
    yield node
    if getattr(request.node, "gpushare_failed", False):
        print("\n" + node.log_tails(), file=sys.stderr)
