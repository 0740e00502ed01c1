"""A real node for gpushare's end-to-end tests: containerd, runc and a kubelet
joined to the control plane of tests/kube/harness.py, with
gpushare-device-plugin serving a simulated GPU node (the NVML stand-in of
tests/nvml_stub/, driven by a fixture file).

What runs (all as root, on 127.0.0.1, each logging to <workdir>/logs/):
- containerd (Debian's 1.6) with its own configuration, root, state and
  sockets under <workdir>/containerd; runc as its runtime; a loopback-only CNI
  configuration, so pods use hostNetwork. The sandbox image and the pods'
  image are one busybox-static image written here as a docker-archive tarball
  and imported with `ctr images import` (no registry is needed).
- the kubelet, node name `localhost`, in a private mount namespace where
  <workdir>/var-lib is mounted over /var/lib and <workdir>/var-log over
  /var/log: the kubelet's device plugin folder is hard-coded as
  /var/lib/kubelet/device-plugins, so the device plugin (on the host) serves
  in <workdir>/var-lib/kubelet/device-plugins and no host path is touched.
  The kubelet's client certificate is O=system:nodes, CN=system:node:localhost
  (the Node authorizer); it serves the API server anonymously (AlwaysAllow),
  for `pods/log` only, on 127.0.0.1.
- gpushare-device-plugin as user `gpushare-device-plugin` (pods get/list and
  patch, nodes get and patch), loading the NVML stand-in with
  $GPUSHARE_NVML_FIXTURE and $GPUSHARE_NVML_FAULTS.

Host state the kubelet changes and Node.stop() restores: the sysctls
vm.overcommit_memory, kernel.panic and kernel.panic_on_oops, the cgroup
folders /sys/fs/cgroup/*/kubepods, the containers' processes and mounts,
/run/containerd (its shims' sockets). The kubelet is told not to add its
KUBE-* iptables chains (makeIPTablesUtilChains: false); Node.stop() checks
that none appeared, and removes any that did.
Node.stop() works from whatever state a failure left, and every wait has a
deadline. Standard library only.
"""

import contextlib
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import urllib.request

from harness import (ApiError, HarnessError, Processes, free_port, user_cluster_role,
                     wait_until, write_kubeconfig)

NODE_NAME = "localhost"
IMAGE = "localhost/gpushare-node-e2e:busybox"
GPU_MEM = "aliyun.com/gpu-mem"
GPU_COUNT = "aliyun.com/gpu-count"
WHOLE_GPU = "nvidia.com/gpu"
UNHEALTHY_ANNOTATION = "gpushare.io/unhealthy-gpus"

# Deadlines (seconds).
CONTAINERD_START = 30
NODE_READY = 90
PLUGIN_REGISTERED = 60
CLEANUP = 30

# What the kubelet changes on the host (with protectKernelDefaults: false).
SYSCTLS = ("vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops")
CGROUP_ROOT = "/sys/fs/cgroup"
RUN_CONTAINERD = "/run/containerd"

def _device_plugin_rules():
    """The rules of the ClusterRole in deploy/device-plugin/rbac.yaml, as shipped."""
    import yaml  # PyYAML: 52-node.sh installs it beside pytest.
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                        "deploy", "device-plugin", "rbac.yaml")
    with open(path) as f:
        (role,) = [o for o in yaml.safe_load_all(f) if o and o["kind"] == "ClusterRole"]
    return role["rules"]


def device_plugin_rbac():
    """The plugin's ClusterRole as shipped, bound to its test identity."""
    return user_cluster_role("gpushare-e2e-device-plugin", "gpushare-device-plugin",
                             _device_plugin_rules())


# ---------------------------------------------------------------- the image

def _tar_bytes(members):
    """An uncompressed tar of `members`: (TarInfo, bytes or None)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for info, data in members:
            t.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _entry(name, kind=tarfile.REGTYPE, mode=0o755, data=None, link=""):
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime = kind, mode, 0
    info.uid = info.gid = 0
    info.linkname = link
    if data is not None:
        info.size = len(data)
    return info, data


def write_busybox_image(path, busybox="/bin/busybox", tag=IMAGE):
    """Writes a docker-archive tarball (what `docker save` writes, which
    `ctr images import` reads) of a one-layer image: the static busybox as
    /bin/busybox with /bin/sh, /bin/sleep, /bin/env, /bin/grep and /bin/sort
    linked to it. Its default command waits for SIGTERM, so the image is also
    the pod sandbox ("pause") image."""
    with open(busybox, "rb") as f:
        binary = f.read()
    if not _is_static(busybox):
        raise HarnessError(f"{busybox} is not statically linked: install busybox-static")
    members = [_entry("bin", tarfile.DIRTYPE), _entry("tmp", tarfile.DIRTYPE, 0o1777),
               _entry("etc", tarfile.DIRTYPE),
               _entry("bin/busybox", data=binary)]
    for tool in ("sh", "sleep", "env", "grep", "sort", "cat", "echo"):
        members.append(_entry(f"bin/{tool}", tarfile.SYMTYPE, 0o777, link="busybox"))
    layer = _tar_bytes(members)
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = {
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["PATH=/bin"],
                   "Cmd": ["/bin/sh", "-c",
                           "trap 'exit 0' TERM INT; sleep 2147483647 & wait"]},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": "tests/node/node_harness.py: busybox-static"}],
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    manifest = [{"Config": config_name, "RepoTags": [tag],
                 "Layers": [diff_id[len("sha256:"):] + "/layer.tar"]}]
    archive = [
        _entry(config_name, mode=0o644, data=config_bytes),
        _entry(diff_id[len("sha256:"):], tarfile.DIRTYPE),
        _entry(diff_id[len("sha256:"):] + "/layer.tar", mode=0o644, data=layer),
        _entry("manifest.json", mode=0o644, data=json.dumps(manifest).encode()),
    ]
    with open(path, "wb") as f:
        f.write(_tar_bytes(archive))
    return path


def _is_static(path):
    """True when the ELF file has no PT_INTERP program header (no loader)."""
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2:
            return False
        phoff = int.from_bytes(head[32:40], "little")
        phentsize = int.from_bytes(head[54:56], "little")
        phnum = int.from_bytes(head[56:58], "little")
        f.seek(phoff)
        table = f.read(phentsize * phnum)
    return all(int.from_bytes(table[i * phentsize:i * phentsize + 4], "little") != 3
               for i in range(phnum))


# ---------------------------------------------------------------- host state

def iptables_chains():
    """{(tool, table, chain)} of the KUBE-* chains in the host's iptables and
    ip6tables; empty where the tools are missing."""
    chains = set()
    for tool in ("iptables", "ip6tables"):
        if shutil.which(tool) is None:
            continue
        for table in ("filter", "nat", "mangle"):
            r = subprocess.run([tool, "-t", table, "-S"], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True, check=False)
            for line in r.stdout.splitlines():
                if line.startswith("-N KUBE-"):
                    chains.add((tool, table, line.split()[1]))
    return chains


# ---------------------------------------------------------------- fixtures

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# NVML fixtures. The H200 one is what NVML answered on a real machine
# (../shared beside the checkout); the others are hand-made multi-GPU nodes.
TWO_A100 = os.path.join(_ROOT, "tests", "data", "nvml", "two-a100.json")
FOUR_V100 = os.path.join(_ROOT, "tests", "data", "nvml", "four-v100-16gb.json")
H200 = os.path.join(os.path.dirname(_ROOT), "shared", "nvml", "h200-nvml.json")


def fixture_gpus(path):
    """[(uuid, units)] of an NVML fixture file, as the device plugin counts
    them: floor(memory.total / 2^30) GiB units per GPU, GPUs in MIG mode
    (mig_mode [1, ...]) left out."""
    with open(path) as f:
        devices = json.load(f)["devices"]

    def in_mig_mode(d):
        mig = d.get("mig_mode")
        return isinstance(mig, list) and bool(mig[0])
    return [(d["uuid"], int(d["memory"]["total"]) // (1 << 30)) for d in devices
            if not in_mig_mode(d)]


# ---------------------------------------------------------------- the node

class Node(Processes):
    """containerd, a kubelet and gpushare-device-plugin, joined to `cp` (a
    started harness.ControlPlane whose API server has the flags of
    NODE_APISERVER_ARGS)."""

    def __init__(self, cp, kube_bin, device_plugin_bin, nvml_library, one_namespace=False,
                 containerd_bin=None):
        """`one_namespace`: containerd and the kubelet run in one mount
        namespace of their own (a holder process keeps it), so that what the
        kubelet mounts for a pod (Secrets, projected service account tokens:
        tmpfs) is what runc mounts into its containers; otherwise only the
        kubelet has a namespace (its fixed folders), and pods must not need
        such volumes (tests/node/'s do not). `containerd_bin`: a folder with
        containerd 2's containerd, containerd-shim-runc-v2 and ctr
        (tests/node/build-containerd.sh), run instead of Debian's 1.6, with
        CDI specs read from <workdir>/node/cdi (cdi_dir)."""
        self.cp, self.kube_bin = cp, kube_bin
        self.one_namespace = one_namespace
        self.containerd_bin = containerd_bin
        self.device_plugin_bin, self.nvml_library = device_plugin_bin, nvml_library
        self.dir = os.path.join(cp.workdir, "node")
        self.logs = cp.logs
        self.procs = {}
        self.sysctls = {}
        self.containerd_dir = os.path.join(self.dir, "containerd")
        self.containerd_sock = os.path.join(self.containerd_dir, "containerd.sock")
        self.cdi_dir = os.path.join(self.dir, "cdi")
        self.var_lib = os.path.join(self.dir, "var-lib")
        self.plugin_dir = os.path.join(self.var_lib, "kubelet", "device-plugins")
        self.kubelet_root = os.path.join(self.dir, "kubelet")
        self.faults_path = os.path.join(self.dir, "nvml-faults.json")
        self.fixture = None
        self.kubelet_port = None
        self.iptables_chains = None
        self.run_containerd_existed = True  # Until start() looks.

    # -- start ------------------------------------------------------------

    def start(self):
        if os.geteuid() != 0:
            raise HarnessError("the node tests run containerd and a kubelet: they need root")
        self._check_host()
        for d in (self.containerd_dir, self.plugin_dir, self.kubelet_root, self.cdi_dir,
                  os.path.join(self.dir, "var-log"), os.path.join(self.dir, "cni"),
                  os.path.join(self.dir, "pod-logs"), os.path.join(self.dir, "volume-plugins")):
            os.makedirs(d, exist_ok=True)
        for name in SYSCTLS:
            with open("/proc/sys/" + name) as f:
                self.sysctls[name] = f.read().strip()
        self.iptables_chains = iptables_chains()
        # containerd's shims make their sockets' folder, a fixed path.
        self.run_containerd_existed = os.path.exists(RUN_CONTAINERD)
        self._credentials()
        if self.one_namespace:
            self._start_namespace()
        self._start_containerd()
        self._import_image()
        self.start_kubelet()
        # What an administrator does to offer a node to gpushare.
        self.api.request("PATCH", f"/api/v1/nodes/{NODE_NAME}",
                         {"metadata": {"labels": {"gpushare": "true"}}},
                         content_type="application/merge-patch+json")
        self.write_faults({})
        return self

    @property
    def api(self):
        return self.cp.api

    def _check_host(self):
        leftovers = [d for d in self._kubepods_dirs() if self._cgroup_procs(d)]
        if leftovers:
            raise HarnessError(
                "processes run in kubepods cgroups (another kubelet on this machine?): "
                + ", ".join(leftovers))
        self._remove_kubepods()  # Empty folders a crashed run left.

    def _credentials(self):
        pki, cp = self.cp.pki, self.cp
        self.kubelet_kubeconfig = write_kubeconfig(
            os.path.join(self.dir, "kubelet.kubeconfig"), cp.server, pki.ca_crt,
            *pki.issue("kubelet", f"/O=system:nodes/CN=system:node:{NODE_NAME}", client=True),
            f"system:node:{NODE_NAME}")
        self.device_plugin_kubeconfig = write_kubeconfig(
            os.path.join(self.dir, "device-plugin.kubeconfig"), cp.server, pki.ca_crt,
            *pki.issue("device-plugin", "/CN=gpushare-device-plugin", client=True),
            "gpushare-device-plugin")
        for obj in device_plugin_rbac():
            kind = obj["kind"].lower() + "s"
            self.api.request("POST", f"/apis/rbac.authorization.k8s.io/v1/{kind}", obj)

    def _start_namespace(self):
        """The mount namespace of containerd and the kubelet: the host's, with
        the work folder's var-lib and var-log over /var/lib and /var/log."""
        p = self._start("mount-namespace", [
            "unshare", "--mount", "--propagation", "slave", "sh", "-c",
            'mount --bind "$1" /var/lib && mount --bind "$2" /var/log && exec sleep 2147483647',
            "namespace", self.var_lib, os.path.join(self.dir, "var-log")])

        def mounted():
            p.check_alive()
            with open(f"/proc/{p.proc.pid}/mountinfo") as f:
                return any(line.split()[4] == "/var/log" for line in f)
        wait_until("the node's mount namespace", mounted, CONTAINERD_START, 0.05)

    def _in_namespace(self, argv):
        """argv run in the node's mount namespace (one_namespace), else as is."""
        p = self.procs.get("mount-namespace")
        return ["nsenter", "-t", str(p.proc.pid), "-m", "--", *argv] if p else list(argv)

    def _start_containerd(self):
        d = self.containerd_dir
        with open(os.path.join(self.dir, "cni", "10-loopback.conflist"), "w") as f:
            json.dump({"cniVersion": "0.4.0", "name": "lo-only",
                       "plugins": [{"type": "loopback"}]}, f)
        config = self._containerd2_config() if self.containerd_bin else self._containerd1_config()
        path = os.path.join(d, "config.toml")
        with open(path, "w") as f:
            f.write(config)
        env = None
        containerd = "containerd"
        if self.containerd_bin:  # Its shim first on PATH: containerd looks it up there.
            containerd = os.path.join(self.containerd_bin, "containerd")
            env = dict(os.environ, PATH=self.containerd_bin + ":" + os.environ.get("PATH", ""))
        p = self._start("containerd", self._in_namespace(
            [containerd, "--config", path, "--log-level", "warn"]), env=env)
        wait_until("containerd serving", lambda: p.check_alive() and self.ctr(
            "version", check=False).returncode == 0, CONTAINERD_START, 0.2)

    def _containerd1_config(self):
        """Debian's containerd 1.6 (configuration version 2)."""
        d = self.containerd_dir
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        return f"""version = 2
root = "{d}/root"
state = "{d}/state"
[grpc]
  address = "{self.containerd_sock}"
[ttrpc]
  address = "{self.containerd_sock}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"
[{cri}]
  sandbox_image = "{IMAGE}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  disable_apparmor = true
  # No CAP_SYS_RESOURCE in these VMs: runc cannot lower oom_score_adj.
  restrict_oom_score_adj = true
  enable_selinux = false
[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  Root = "{d}/runc"
[{cri}.cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "{self.dir}/cni"
"""
    def _containerd2_config(self):
        """containerd 2 (configuration version 3): the CRI plugin's runtime
        and image settings are separate plugins; CDI specs come from
        cdi_dir."""
        d = self.containerd_dir
        rt = 'plugins."io.containerd.cri.v1.runtime"'
        return f"""version = 3
root = "{d}/root"
state = "{d}/state"
[grpc]
  address = "{self.containerd_sock}"
[ttrpc]
  address = "{self.containerd_sock}.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "{IMAGE}"
[{rt}]
  disable_apparmor = true
  # No CAP_SYS_RESOURCE in these VMs: runc cannot lower oom_score_adj.
  restrict_oom_score_adj = true
  enable_selinux = false
  cdi_spec_dirs = ["{self.cdi_dir}"]
[{rt}.containerd]
  default_runtime_name = "runc"
[{rt}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[{rt}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  Root = "{d}/runc"
[{rt}.cni]
  bin_dirs = ["/usr/lib/cni"]
  conf_dir = "{self.dir}/cni"
"""

    def ctr(self, *args, check=True, timeout=60):
        """Runs `ctr` against this node's containerd, namespace k8s.io; the
        result's stdout is ctr's standard output only."""
        ctr = os.path.join(self.containerd_bin, "ctr") if self.containerd_bin else "ctr"
        # stdout alone: containerd 2's ctr warns on stderr (cgroup v1 is
        # deprecated), which must not read as a task or image name.
        r = subprocess.run([ctr, "--address", self.containerd_sock, "-n", "k8s.io", *args],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=timeout)
        if check and r.returncode != 0:
            raise HarnessError(f"ctr {' '.join(args)}: exit {r.returncode}: {r.stdout}{r.stderr}")
        return r

    def _import_image(self):
        archive = write_busybox_image(os.path.join(self.dir, "busybox-image.tar"))
        self.ctr("images", "import", archive)
        listed = self.ctr("images", "ls", "-q").stdout.split()
        if IMAGE not in listed:
            raise HarnessError(f"{IMAGE} not among the imported images: {listed}")

    def start_kubelet(self, wait=True):
        """Starts (or restarts) the kubelet; waits (unless not `wait`) until
        its /healthz answers and its Node is Ready. Returns the seconds that
        took."""
        if self.kubelet_port is None:
            self.kubelet_port, self.kubelet_healthz = free_port(), free_port()
        resolv = os.path.join(self.dir, "resolv.conf")
        with open(resolv, "w") as f:
            f.write("nameserver 127.0.0.1\n")
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "containerRuntimeEndpoint": "unix://" + self.containerd_sock,
            "cgroupDriver": "cgroupfs", "failSwapOn": False, "failCgroupV1": False,
            "address": "127.0.0.1", "port": self.kubelet_port,
            "healthzBindAddress": "127.0.0.1", "healthzPort": self.kubelet_healthz,
            "readOnlyPort": 0,
            # Test only: the API server fetches pods/log anonymously.
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "podLogsDir": os.path.join(self.dir, "pod-logs"),
            "volumePluginDir": os.path.join(self.dir, "volume-plugins"),
            "resolvConf": resolv,
            "enforceNodeAllocatable": [],
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "evictionHard": {}, "mergeDefaultEvictionSettings": False,
            "protectKernelDefaults": False,
            # Else it adds KUBE-* chains, and a rule dropping some traffic to
            # 127.0.0.0/8, to the host's iptables.
            "makeIPTablesUtilChains": False,
            # Device plugin capacity and health reach the Node within 2 s.
            "nodeStatusUpdateFrequency": "2s", "nodeStatusReportFrequency": "2s",
            "syncFrequency": "10s",
        }
        path = os.path.join(self.dir, "kubelet-config.json")
        with open(path, "w") as f:
            json.dump(config, f, indent=1)
        kubelet = os.path.join(self.kube_bin, "kubelet")
        # /var/lib/kubelet/device-plugins and /var/log/containers are fixed
        # paths: give the kubelet folders of the work directory there.
        mounts = ('mount --bind "$1" /var/lib && mount --bind "$2" /var/log && '
                  'shift 2 && exec "$@"')
        argv = [kubelet, f"--config={path}", f"--kubeconfig={self.kubelet_kubeconfig}",
                f"--root-dir={self.kubelet_root}",
                f"--cert-dir={os.path.join(self.dir, 'kubelet-pki')}",
                f"--hostname-override={NODE_NAME}", "--v=2"]
        if self.one_namespace:
            argv = self._in_namespace(argv)
        else:
            argv = ["unshare", "--mount", "--propagation", "slave", "sh", "-c", mounts, "kubelet",
                    self.var_lib, os.path.join(self.dir, "var-log"), *argv]
        p = self._start("kubelet", argv)
        start = time.monotonic()
        if not wait:
            return 0.0

        def ready():
            p.check_alive()
            try:
                node = self.api.get(f"/api/v1/nodes/{NODE_NAME}")
            except ApiError as e:
                if e.status == 404:
                    return False
                raise
            ready = [c for c in node["status"].get("conditions", []) if c["type"] == "Ready"]
            # After a restart: a heartbeat from this kubelet, not the last one.
            return ready and ready[0]["status"] == "True" and self._kubelet_healthy()
        wait_until("the kubelet's Node Ready", ready, NODE_READY, 0.25)
        return time.monotonic() - start

    def _kubelet_healthy(self):
        try:
            with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.kubelet_healthz}/healthz", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def stop_kubelet(self, sig=signal.SIGTERM):
        p = self.procs.pop("kubelet", None)
        if p:
            p.stop(sig)

    # -- the device plugin -------------------------------------------------

    def write_faults(self, faults):
        """Replaces the NVML stand-in's fault file (read on every query)."""
        tmp = self.faults_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(faults, f)
        os.replace(tmp, self.faults_path)

    def use_fixture(self, fixture):
        """Makes sure gpushare-device-plugin runs on NVML fixture `fixture`,
        healthy: restarts it unless it already runs on that fixture with
        every GPU allocatable."""
        p = self.procs.get("gpushare-device-plugin")
        if (p is None or not p.alive() or self.fixture != fixture
                or self.gpu_capacity("allocatable") != self.expected_capacity()):
            self.start_device_plugin(fixture)

    def start_device_plugin(self, fixture, extra_args=()):
        """(Re)starts gpushare-device-plugin with NVML fixture `fixture`; waits
        until it has registered with the kubelet and the Node's capacity and
        allocatable show its GPUs, all healthy. Returns the seconds that took."""
        self.stop_device_plugin()
        self.fixture = fixture
        env = dict(os.environ, GPUSHARE_NVML_FIXTURE=fixture,
                   GPUSHARE_NVML_FAULTS=self.faults_path)
        argv = [self.device_plugin_bin, "--node-name", NODE_NAME,
                "--kubeconfig", self.device_plugin_kubeconfig,
                "--device-plugin-path", self.plugin_dir,
                "--pod-resources-socket",
                os.path.join(self.kubelet_root, "pod-resources", "kubelet.sock"),
                "--nvml-library", self.nvml_library, "--health-interval-ms", "500",
                "--metrics-bind-address", f"127.0.0.1:{self.device_plugin_metrics_port}",
                *extra_args]
        log = os.path.join(self.logs, "gpushare-device-plugin.log")
        offset = os.path.getsize(log) if os.path.exists(log) else 0
        start = time.monotonic()
        p = self._start("gpushare-device-plugin", argv, env=env)
        want = self.expected_capacity()

        def registered():
            p.check_alive()
            with open(log, "rb") as f:
                f.seek(offset)
                if b"registered with the kubelet" not in f.read():
                    return False
            return (self.gpu_capacity() == want
                    and self.gpu_capacity("allocatable") == want)
        wait_until(f"the device plugin registered and the Node offering {want}",
                   registered, PLUGIN_REGISTERED, 0.2)
        return time.monotonic() - start

    @property
    def device_plugin_metrics_port(self):
        if getattr(self, "_metrics_port", None) is None:
            self._metrics_port = free_port()
        return self._metrics_port

    def device_plugin_metrics_text(self):
        """The running plugin's GET /metrics."""
        url = f"http://127.0.0.1:{self.device_plugin_metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.read().decode()

    def device_plugin_metrics(self):
        """{series as written: value} of the running plugin's GET /metrics."""
        return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
                for line in self.device_plugin_metrics_text().splitlines()
                if line and not line.startswith("#")}

    def stop_device_plugin(self, sig=signal.SIGTERM):
        p = self.procs.pop("gpushare-device-plugin", None)
        if p:
            p.stop(sig)

    def expected_capacity(self):
        gpus = fixture_gpus(self.fixture)
        return {GPU_MEM: sum(u for _, u in gpus), GPU_COUNT: len(gpus), WHOLE_GPU: len(gpus)}

    def node(self):
        return self.api.get(f"/api/v1/nodes/{NODE_NAME}")

    def gpu_capacity(self, field="capacity"):
        """{resource: int} of the Node's status.<field> for the GPU resources."""
        values = self.node()["status"].get(field, {})
        return {r: int(values.get(r, "0")) for r in (GPU_MEM, GPU_COUNT, WHOLE_GPU)}

    # -- pods ---------------------------------------------------------------

    def delete_all_pods(self, timeout=60):
        """Deletes every pod (grace period 0) and waits until the API and
        containerd hold none (the kubelet stopped their containers)."""
        for pod in self.api.pods():
            self.api.delete_pod(pod["metadata"]["name"])

        def gone():
            if self.api.pods():
                return False
            tasks = self.ctr("tasks", "ls", "-q", check=False).stdout.split()
            return not tasks
        wait_until("every pod and container gone", gone, timeout, 0.25)

    # -- stop ---------------------------------------------------------------

    def stop(self):
        """Stops everything this node started and restores the host; every
        step runs whatever the ones before it did."""
        errors = []

        def step(what, fn):
            try:
                fn()
            except Exception as e:  # Keep cleaning up.
                errors.append(f"{what}: {e}")

        if "kubelet" in self.procs and self.procs["kubelet"].alive():
            step("deleting pods", lambda: self.delete_all_pods(timeout=CLEANUP))
        step("device plugin", self.stop_device_plugin)
        step("kubelet", self.stop_kubelet)
        if "containerd" in self.procs and self.procs["containerd"].alive():
            step("containers", self._kill_tasks)
        step("containerd", lambda: self.procs.pop("containerd").stop()
             if "containerd" in self.procs else None)
        step("shims", self._kill_shims)
        step("container processes", self._kill_kubepods_processes)
        # Its mounts (the pods' volumes, the containers' root file systems)
        # go with the namespace.
        step("mount namespace", lambda: self.procs.pop("mount-namespace").stop()
             if "mount-namespace" in self.procs else None)
        step("mounts", self._unmount_all)
        step("cgroups", self._remove_kubepods)
        step("sysctls", self._restore_sysctls)
        step("/run/containerd", self._remove_run_containerd)
        step("iptables", self._check_iptables)
        return errors

    def _kill_tasks(self):
        for task in self.ctr("tasks", "ls", "-q", check=False).stdout.split():
            self.ctr("tasks", "kill", "-s", "SIGKILL", task, check=False)
        deadline = time.monotonic() + 10
        for task in self.ctr("tasks", "ls", "-q", check=False).stdout.split():
            while time.monotonic() < deadline and self.ctr(
                    "tasks", "delete", task, check=False).returncode != 0:
                time.sleep(0.2)
        for c in self.ctr("containers", "ls", "-q", check=False).stdout.split():
            self.ctr("containers", "delete", c, check=False)

    def _pids_matching(self, needle):
        pids = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if needle.encode() in f.read():
                        pids.append(int(entry))
            except OSError:
                pass
        return pids

    def _kill_shims(self):
        """containerd-shim-runc-v2 processes of this containerd (their command
        line names its socket) outlive it; kill them by PID."""
        for pid in self._pids_matching(self.containerd_sock):
            if pid != os.getpid():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def _kubepods_dirs(self):
        dirs = []
        if os.path.isdir(CGROUP_ROOT):
            for controller in sorted(os.listdir(CGROUP_ROOT)):
                d = os.path.join(CGROUP_ROOT, controller, "kubepods")
                if os.path.isdir(d):
                    dirs.append(d)
        return dirs

    @staticmethod
    def _cgroup_procs(top):
        pids = set()
        for root, _, files in os.walk(top):
            if "cgroup.procs" in files:
                try:
                    with open(os.path.join(root, "cgroup.procs")) as f:
                        pids.update(int(x) for x in f.read().split())
                except OSError:
                    pass
        return pids

    def _kill_kubepods_processes(self):
        """The containers' processes, should any be left (they run in the
        kubepods cgroups the kubelet made for this node)."""
        for d in self._kubepods_dirs():
            for pid in self._cgroup_procs(d):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        wait_until("container processes gone",
                   lambda: not any(self._cgroup_procs(d) for d in self._kubepods_dirs()),
                   10, 0.1)

    def _remove_kubepods(self):
        for d in self._kubepods_dirs():
            for root, _, _ in os.walk(d, topdown=False):
                try:
                    os.rmdir(root)
                except OSError:
                    pass
        left = self._kubepods_dirs()
        if left:
            raise HarnessError(f"cgroup folders left: {left}")

    def _unmount_all(self):
        """Unmounts whatever containerd left mounted under the work folder
        (sandbox /dev/shm, container root file systems), deepest first."""
        for _ in range(3):
            points = []
            with open("/proc/self/mountinfo") as f:
                for line in f:
                    point = line.split()[4].replace("\\040", " ")
                    if point == self.dir or point.startswith(self.dir + "/"):
                        points.append(point)
            if not points:
                return
            for point in sorted(points, key=len, reverse=True):
                subprocess.run(["umount", "-l", point], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, check=False, timeout=30)
        raise HarnessError(f"mounts left under {self.dir}: {points}")

    def _remove_run_containerd(self):
        """Removes /run/containerd/s and /run/containerd when this run made
        them and they are empty (a kill -9'd shim leaves its socket)."""
        if self.run_containerd_existed:
            return
        for d in (os.path.join(RUN_CONTAINERD, "s"), RUN_CONTAINERD):
            try:
                os.rmdir(d)
            except OSError:
                pass

    def _check_iptables(self):
        """Removes KUBE-* chains that appeared during the run (the kubelet
        makes them unless makeIPTablesUtilChains is false), and says so."""
        if self.iptables_chains is None:
            return
        new = iptables_chains() - self.iptables_chains
        for tool, table, chain in sorted(new):
            rules = subprocess.run([tool, "-t", table, "-S"], stdout=subprocess.PIPE,
                                   text=True, check=False).stdout.splitlines()
            for rule in rules:
                if rule.startswith("-A ") and rule.endswith(f"-j {chain}"):
                    subprocess.run([tool, "-t", table, "-D", *rule.split()[1:]], check=False)
            subprocess.run([tool, "-t", table, "-F", chain], check=False)
            subprocess.run([tool, "-t", table, "-X", chain], check=False)
        if new:
            raise HarnessError(f"iptables chains were added (now removed): {sorted(new)}")

    def _restore_sysctls(self):
        for name, value in self.sysctls.items():
            with open("/proc/sys/" + name, "w") as f:
                f.write(value)

    def log_tails(self, lines=60):
        return self.cp.log_tails(lines)


# The API server flags a kubelet needs: pods/log reaches the kubelet at the
# Node's Hostname address (`localhost`; its InternalIP may not answer).
NODE_APISERVER_ARGS = ("--kubelet-preferred-address-types=Hostname,InternalIP",)


@contextlib.contextmanager
def running(cp, node, session, workdir, what):
    """Starts `cp` (a harness.ControlPlane) and `node`, yields the node;
    at the end stops both, even after a failure, restores the host, and
    removes `workdir` unless a test of `session` failed, the clean-up did, or
    GPUSHARE_KUBE_KEEP is set. Components' logs are printed when a start
    fails; `what` names the work folder in messages."""
    errors = []
    try:
        cp.start()
        node.start()
        yield node
    except BaseException:
        print("\n" + cp.log_tails(), file=sys.stderr)
        raise
    finally:
        errors = node.stop()
        cp.stop()
        failed = any(getattr(i, "gpushare_failed", False) for i in session.items)
        if errors:
            print("\nnode clean-up: " + "; ".join(errors), file=sys.stderr)
        if failed or errors or os.environ.get("GPUSHARE_KUBE_KEEP"):
            print(f"\n{what} work folder kept: {workdir}", file=sys.stderr)
        else:
            remove_tree(workdir)
    assert not errors, f"the node was not cleaned up: {errors}"


def remove_tree(path):
    """shutil.rmtree that first makes sure nothing under `path` is mounted."""
    with open("/proc/self/mountinfo") as f:
        mounted = [l.split()[4] for l in f if l.split()[4].startswith(path + "/")]
    if mounted:
        raise HarnessError(f"not removing {path}: still mounted there: {mounted}")
    shutil.rmtree(path, ignore_errors=True)

