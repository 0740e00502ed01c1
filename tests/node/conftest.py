"""pytest fixtures of the node tests: one control plane (etcd, kube-apiserver,
kube-scheduler calling gpushare-extender; tests/kube/harness.py) and one
node (containerd, runc, a kubelet; node_harness.py) per session; per test
no pods, no injected NVML faults and gpushare-device-plugin started on the
NVML fixture the test asks for. Component logs are printed when a test
fails, and everything is stopped and the host restored at the end.

Environment: GPUSHARE_KUBE_BIN (folder with kube-apiserver, kube-scheduler,
kubectl and kubelet; else tests/kube/build-kube.sh builds or finds them),
GPUSHARE_EXTENDER, GPUSHARE_DEVICE_PLUGIN and GPUSHARE_NVML_STUB (the
programs and the NVML stand-in; else those of the build folder $BUILD,
default build), GPUSHARE_KUBE_KEEP=1 keeps the work folder.
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
sys.path.insert(0, HERE)

import harness  # noqa: E402
import node_harness  # noqa: E402

REQUIRED_TOOLS = {
    "etcd": "etcd-server", "openssl": "openssl", "containerd": "containerd",
    "containerd-shim-runc-v2": "containerd", "ctr": "containerd", "runc": "runc",
    "unshare": "util-linux", "mount": "mount",
}


def kube_bin():
    if os.environ.get("GPUSHARE_KUBE_BIN"):
        path = os.environ["GPUSHARE_KUBE_BIN"]
    else:
        r = subprocess.run([os.path.join(ROOT, "tests", "kube", "build-kube.sh"),
                            "kube-apiserver", "kube-scheduler", "kubectl", "kubelet"],
                           stdout=subprocess.PIPE, text=True, timeout=3600, check=True)
        path = r.stdout.strip().splitlines()[-1]
    for program in ("kube-apiserver", "kube-scheduler", "kubelet"):
        if not os.access(os.path.join(path, program), os.X_OK):
            pytest.fail(f"{path} has no {program} (tests/kube/build-kube.sh {program})")
    return path


def built(env, rel, what):
    """The program or library named by $env, else <build>/<rel>."""
    if os.environ.get(env):
        return os.environ[env]
    path = os.path.join(ROOT, os.environ.get("BUILD", "build"), rel)
    if not os.path.exists(path):
        pytest.fail(f"no {what} at {path}: build it or set {env}")
    return path


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if outcome.get_result().failed:
        item.gpushare_failed = True


@pytest.fixture(scope="session")
def cluster(request):
    """The control plane and the node, started once."""
    missing = [f"{tool} (Debian's {package})" for tool, package in REQUIRED_TOOLS.items()
               if shutil.which(tool) is None]
    if not os.access("/usr/lib/cni/loopback", os.X_OK):
        missing.append("/usr/lib/cni/loopback (Debian's containernetworking-plugins)")
    if not os.access("/bin/busybox", os.X_OK):
        missing.append("/bin/busybox (Debian's busybox-static)")
    if missing:
        pytest.fail("not installed: " + ", ".join(missing))
    extender = built("GPUSHARE_EXTENDER", "extender/gpushare-extender", "gpushare-extender")
    plugin = built("GPUSHARE_DEVICE_PLUGIN", "device-plugin/gpushare-device-plugin",
                   "gpushare-device-plugin")
    stub = built("GPUSHARE_NVML_STUB", "tests/nvml_stub/libnvidia-ml.so.1",
                 "NVML stand-in (target nvml_stub)")
    workdir = tempfile.mkdtemp(prefix="gpushare-node-")
    cp = harness.ControlPlane(kube_bin(), extender, workdir,
                              apiserver_args=node_harness.NODE_APISERVER_ARGS)
    node = node_harness.Node(cp, cp.kube_bin, plugin, stub)
    with node_harness.running(cp, node, request.session, workdir, "node e2e"):
        cp.start_extender()
        cp.start_scheduler(with_extender=True)
        yield node


@pytest.fixture
def node(cluster, request):
    """The node with no pods and no NVML faults; the test starts the device
    plugin on its fixture (Node.use_fixture)."""
    cluster.delete_all_pods()
    cluster.write_faults({})
    yield cluster
    if getattr(request.node, "gpushare_failed", False):
        print("\n" + cluster.log_tails(), file=sys.stderr)
