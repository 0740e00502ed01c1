"""pytest fixtures of the install tests: one control plane (etcd,
kube-apiserver, kube-controller-manager for Deployments, DaemonSets and
service account tokens; tests/kube/harness.py) and one node (containerd,
runc, a kubelet; tests/node/node_harness.py) per session, with the images of
the three programs imported into the node's containerd. Nothing of gpushare
runs on the host: the tests install the Helm chart, whose pods run it.

Environment: GPUSHARE_KUBE_BIN (kube-apiserver, kube-controller-manager,
kube-scheduler, kubectl, kubelet, helm; else tests/kube/build-kube.sh builds
or finds them), GPUSHARE_HELM (another Helm binary), GPUSHARE_NVML_STUB (the
NVML stand-in, else the build folder's), GPUSHARE_INSTALL_IMAGES (the folder
of the images' docker archives, extender.tar, device-plugin.tar and
scheduler.tar, as scripts/test.d/52-node.sh writes them),
GPUSHARE_KUBE_KEEP=1 keeps the work folder.
"""

import os
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "kube"))
sys.path.insert(0, os.path.join(ROOT, "tests", "node"))

import harness  # noqa: E402
import node_harness  # noqa: E402

PROGRAMS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kubelet",
            "helm")


def kube_bin():
    path = os.environ.get("GPUSHARE_KUBE_BIN")
    if not path:
        r = subprocess.run([os.path.join(ROOT, "tests", "kube", "build-kube.sh"), *PROGRAMS],
                           stdout=subprocess.PIPE, text=True, timeout=3600, check=True)
        path = r.stdout.strip().splitlines()[-1]
    for program in PROGRAMS:
        if program == "helm" and os.environ.get("GPUSHARE_HELM"):
            continue
        if not os.access(os.path.join(path, program), os.X_OK):
            pytest.fail(f"{path} has no {program} (tests/kube/build-kube.sh {program})")
    return path


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if outcome.get_result().failed:
        item.gpushare_failed = True


@pytest.fixture(scope="session")
def images():
    """{program: docker archive} of the three images."""
    folder = os.environ.get("GPUSHARE_INSTALL_IMAGES")
    if not folder:
        pytest.fail("GPUSHARE_INSTALL_IMAGES is not set (scripts/test.d/52-node.sh builds the "
                    "images and sets it)")
    found = {k: os.path.join(folder, f"{k}.tar") for k in ("extender", "device-plugin", "scheduler")}
    missing = [p for p in found.values() if not os.path.exists(p)]
    if missing:
        pytest.fail(f"missing image archives: {missing}")
    return found


@pytest.fixture(scope="session")
def cluster(request, images):
    """The control plane (with kube-controller-manager) and the node, started
    once, with the images imported."""
    stub = os.environ.get("GPUSHARE_NVML_STUB") or os.path.join(
        ROOT, os.environ.get("BUILD", "build"), "tests", "nvml_stub", "libnvidia-ml.so.1")
    if not os.path.exists(stub):
        pytest.fail(f"no NVML stand-in at {stub} (target nvml_stub)")
    workdir = tempfile.mkdtemp(prefix="gpushare-install-")
    cp = harness.ControlPlane(kube_bin(), None, workdir,
                              apiserver_args=node_harness.NODE_APISERVER_ARGS, controllers=True)
    node = node_harness.Node(cp, cp.kube_bin, None, stub, one_namespace=True)
    with node_harness.running(cp, node, request.session, workdir, "install e2e"):
        for archive in images.values():
            node.ctr("images", "import", archive, timeout=120)
        yield node
