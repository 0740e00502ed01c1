"""pytest fixtures: one control plane (etcd + kube-apiserver) per session; per
test a clean API (no pods, nodes or events) and a fresh kube-scheduler, with
or without gpushare-extender. Component logs are printed when a test fails.

Environment: GPUSHARE_KUBE_BIN (folder with kube-apiserver, kube-scheduler,
kubectl; else build-kube.sh is run, which builds or finds them in its cache),
GPUSHARE_EXTENDER (the extender binary; else the build folder's),
GPUSHARE_KUBE_KEEP=1 keeps the work folder (logs, certificates) after the run.
"""

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import harness  # noqa: E402


def kube_bin():
    if os.environ.get("GPUSHARE_KUBE_BIN"):
        return os.environ["GPUSHARE_KUBE_BIN"]
    r = subprocess.run([os.path.join(HERE, "build-kube.sh")], stdout=subprocess.PIPE,
                       text=True, timeout=3600, check=True)
    return r.stdout.strip().splitlines()[-1]


def extender_bin():
    if os.environ.get("GPUSHARE_EXTENDER"):
        return os.environ["GPUSHARE_EXTENDER"]
    build = os.environ.get("BUILD", "build")
    for rel in ("extender/gpushare-extender", "examples/extender/gpushare_extender"):
        path = os.path.join(ROOT, build, rel)
        if os.access(path, os.X_OK):
            return path
    pytest.fail("no gpushare-extender binary: build it or set GPUSHARE_EXTENDER")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed:
        item.gpushare_failed = True


@pytest.fixture(scope="session")
def control_plane(request):
    for tool in ("etcd", "openssl"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not installed (etcd: Debian's etcd-server)")
    workdir = tempfile.mkdtemp(prefix="gpushare-kube-")
    cp = harness.ControlPlane(kube_bin(), extender_bin(), workdir)
    failed = False
    try:
        cp.start()
    except BaseException:
        print(cp.log_tails(), file=sys.stderr)
        cp.stop()
        raise
    try:
        yield cp
    finally:
        cp.stop()
        failed = any(getattr(i, "gpushare_failed", False) for i in request.session.items)
        if failed or os.environ.get("GPUSHARE_KUBE_KEEP"):
            print(f"\nkube e2e work folder kept: {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def cluster(control_plane, request):
    """A clean API; kube-scheduler and the extender are started by the test."""
    control_plane.reset()
    yield control_plane
    if getattr(request.node, "gpushare_failed", False):
        print("\n" + control_plane.log_tails(), file=sys.stderr)
    # Stop them so that the next test starts from nothing.
    control_plane.stop_clients()


@pytest.fixture
def gpushare(cluster):
    """kube-scheduler calling gpushare-extender."""
    cluster.start_extender()
    cluster.start_scheduler(with_extender=True)
    return cluster


@pytest.fixture
def scheduler_alone(cluster):
    """kube-scheduler without the extender (what gpushare prevents)."""
    cluster.start_scheduler(with_extender=False)
    return cluster


def pytest_terminal_summary(terminalreporter):
    mod = sys.modules.get("test_scenarios")
    if mod is not None and getattr(mod, "COMPARISON", None):
        terminalreporter.write_line("")
        terminalreporter.write_line("What the extender prevents (kube-scheduler alone binds by node totals):")
        terminalreporter.write_line(mod.comparison_table())
