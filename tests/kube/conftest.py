"""pytest fixtures: one control plane (etcd + kube-apiserver) per session; per
test a clean API (no pods, nodes or events) and a fresh kube-scheduler, with
or without gpushare-extender. Component logs are printed when a test fails.

gpushare runs in one of two modes, GPUSHARE_KUBE_SCHEDULER:
  extender (default)  gpushare-extender behind the stock kube-scheduler;
  plugin              kube-scheduler built with the GpuShare plugin
                      (scheduler-plugin/), configured by
                      deploy/scheduler-plugin/scheduler-config.yaml with its
                      profile renamed default-scheduler, its identity given
                      deploy/scheduler-plugin/rbac.yaml (needs PyYAML).
The `gpushare` fixture and ControlPlane.start_gpushare / kill_gpushare /
restart_gpushare start, kill and restart whichever it is. Tests marked
`extender_only(reason)` are skipped in plugin mode, with that reason.

Environment: GPUSHARE_KUBE_BIN (folder with kube-apiserver, kube-scheduler,
kubectl; else build-kube.sh is run, which builds or finds them in its cache),
GPUSHARE_EXTENDER (the extender binary; else the build folder's),
GPUSHARE_PLUGIN_SCHEDULER (plugin mode: the plugin's kube-scheduler; else
scheduler-plugin/build.sh is run with BUILD), GPUSHARE_KUBE_KEEP=1 keeps the
work folder (logs, certificates) after the run.
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

MODES = ("extender", "plugin")
MODE = os.environ.get("GPUSHARE_KUBE_SCHEDULER") or "extender"


def plugin_mode():
    return MODE == "plugin"


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "extender_only(reason): a test of gpushare-extender itself (its replicas, "
        "endpoints, manifests), skipped when GPUSHARE_KUBE_SCHEDULER=plugin")
    if MODE not in MODES:
        raise pytest.UsageError(f"GPUSHARE_KUBE_SCHEDULER={MODE!r}: one of {', '.join(MODES)}")


def pytest_collection_modifyitems(config, items):
    if not plugin_mode():
        return
    for item in items:
        marker = item.get_closest_marker("extender_only")
        if marker is not None:
            reason = marker.args[0] if marker.args else marker.kwargs.get("reason", "")
            item.add_marker(pytest.mark.skip(reason=f"extender only: {reason}"))


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
    if plugin_mode():
        return None   # The tests that need it are skipped.
    pytest.fail("no gpushare-extender binary: build it or set GPUSHARE_EXTENDER")


def plugin_scheduler_bin():
    if os.environ.get("GPUSHARE_PLUGIN_SCHEDULER"):
        return os.environ["GPUSHARE_PLUGIN_SCHEDULER"]
    r = subprocess.run([os.path.join(ROOT, "scheduler-plugin", "build.sh")],
                       stdout=subprocess.PIPE, text=True, timeout=3600, check=True)
    return r.stdout.strip().splitlines()[-1]


def use_plugin(cp):
    """Plugin mode: the shipped configuration and RBAC (harness.use_shipped_plugin)."""
    harness.use_shipped_plugin(cp, plugin_scheduler_bin())


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
        if plugin_mode():
            use_plugin(cp)
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
    """kube-scheduler calling gpushare-extender, or (plugin mode)
    kube-scheduler with the GpuShare plugin."""
    cluster.start_gpushare()
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
        what = "the GpuShare plugin" if plugin_mode() else "the extender"
        terminalreporter.write_line(
            f"What {what} prevents (kube-scheduler alone binds by node totals):")
        terminalreporter.write_line(mod.comparison_table(
            "GpuShare plugin" if plugin_mode() else "gpushare-extender"))
