"""The Helm chart deploy/chart/ with the Helm release tests/kube/go.mod pins
(built by build-kube.sh beside kube-apiserver): lint, the values schema, the
rendered objects through the real API server's validation (GPUSHARE_HELM
names another Helm binary: scripts/kube-matrix.sh uses the pinned one with
other releases), the manifests of
deploy/ rendered from it, and install, upgrade and uninstall against the
real API server (there is no kubelet here: the node stage runs the pods)."""

import base64
import json
import os
import subprocess
import tempfile

import pytest
import yaml

from harness import HarnessError

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CHART = os.path.join(ROOT, "deploy", "chart")
NS = "kube-system"
# Kinds whose CRDs this control plane does not have: checked by name only.
CRD_GROUPS = ("monitoring.coreos.com/", "cert-manager.io/")

pytestmark = pytest.mark.extender_only("the chart does not depend on the scheduler mode of "
                                       "the other tests; once is enough")


def helm_bin(cluster):
    path = os.environ.get("GPUSHARE_HELM") or os.path.join(cluster.kube_bin, "helm")
    if not os.access(path, os.X_OK):
        raise HarnessError(f"{path} is missing: run tests/kube/build-kube.sh helm")
    return path


def helm(cluster, *args, check=True, stdin=None):
    env = {**os.environ, "KUBECONFIG": cluster.admin_kubeconfig,
           "HELM_CACHE_HOME": os.path.join(cluster.workdir, "helm-cache"),
           "HELM_CONFIG_HOME": os.path.join(cluster.workdir, "helm-config"),
           "HELM_DATA_HOME": os.path.join(cluster.workdir, "helm-data")}
    r = subprocess.run([helm_bin(cluster), *args], env=env, input=stdin, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=180)
    if check and r.returncode != 0:
        raise HarnessError(f"helm {' '.join(args)}: {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r


def kubectl(cluster, *args, check=True, stdin=None):
    env = {**os.environ, "KUBECONFIG": cluster.admin_kubeconfig}
    r = subprocess.run([os.path.join(cluster.kube_bin, "kubectl"), *args], env=env, input=stdin,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    if check and r.returncode != 0:
        raise HarnessError(f"kubectl {' '.join(args)}: {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r


def render(cluster, *values):
    """The objects `helm template` renders with these values arguments."""
    args = ["template", "gpushare", CHART, "-n", NS, *values]
    return [o for o in yaml.safe_load_all(helm(cluster, *args).stdout) if o]


def names(objects):
    return {(o["kind"], o["metadata"]["name"]) for o in objects}


TARGET_WORKLOAD = os.path.join(ROOT, "deploy", "fgdpack", "target-workload.json")
# The values arguments of each variant the tests render.
VARIANTS = {
    "extender": (),
    "extender-cert-manager": ("--set", "extender.tls.source=cert-manager"),
    "extender-fgdpack": ("--set", "policy=fgdpack", "--set-file", f"targetWorkload={TARGET_WORKLOAD}"),
    "scheduler": ("--set", "mode=scheduler"),
    "everything": ("--set", "monitoring.serviceMonitor=true", "--set", "monitoring.podMonitor=true",
                   "--set", "monitoring.prometheusRule=true", "--set", "monitoring.dashboard=true"),
    "dra": ("--set", "dra.enabled=true", "--set", "dra.extendedResourceName=nvidia.com/gpu"),
}
DRA_EXAMPLES = os.path.join(ROOT, "deploy", "dra-examples")


def test_the_chart_lints_in_each_variant(cluster):
    for variant, values in VARIANTS.items():
        r = helm(cluster, "lint", "--strict", CHART, "--namespace", NS, *values, check=False)
        assert r.returncode == 0 and "0 chart(s) failed" in r.stdout, (variant, r.stdout, r.stderr)


@pytest.mark.parametrize("bad, named", [
    ("mode=extenders", "mode"),
    ("policy=fastest", "policy"),
    ("extender.replica=2", "replica"),           # a misspelt name
    ("devicePlugin.memoryUnit=KiB", "memoryUnit"),
    ("extender.tls.source=vault", "source"),
    ("devicePlugin.hostPaths.podResources=var/lib/kubelet", "podResources"),
    # Written into the admission policies' CEL: a quote would end the string.
    ("admission.extraSchedulers={x',y}", "extraSchedulers"),
    ("dra.memoryUnit=TiB", "memoryUnit"),
    ("dra.extendedResourceName=gpu", "extendedResourceName"),  # Not domain/name.
    ("dra.hostPaths.cdi=var/run/cdi", "cdi"),
    ("dra.enable=true", "enable"),
])
def test_the_schema_refuses_a_bad_value_and_names_it(cluster, bad, named):
    r = helm(cluster, "template", "gpushare", CHART, "-n", NS, "--set", bad, check=False)
    assert r.returncode != 0, r.stdout[:400]
    assert named in r.stderr and "schema" in r.stderr, r.stderr


def test_the_admission_policies_trust_exactly_the_configured_users(cluster):
    objects = render(cluster, "--set", "admission.extraSchedulers={system:kube-scheduler,ops}",
                     "--set", "admission.extraDevicePlugins={system:serviceaccount:kube-system:old}")
    policies = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"}
    assert set(policies) == {"gpushare-annotations", "gpushare-device-plugin-node"}, set(policies)
    plugins = ("['system:serviceaccount:kube-system:gpushare-devices', "
               "'system:serviceaccount:kube-system:old']")
    schedulers = ("['system:serviceaccount:kube-system:gpushare-extender', "
                  "'system:kube-scheduler', 'ops', "
                  "'system:serviceaccount:kube-system:gpushare-scheduler']")
    for name, policy in policies.items():
        assert "paramKind" not in policy["spec"], name  # Nothing to delete that opens them.
        variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
        assert variables["devicePlugins"] == plugins, (name, variables["devicePlugins"])
        if name == "gpushare-annotations":
            assert variables["schedulers"] == schedulers, variables["schedulers"]
    bindings = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert len(bindings) == 2 and not any("paramRef" in b["spec"] for b in bindings), bindings


def test_every_rendered_object_passes_the_api_servers_validation(cluster):
    expect = {
        "extender": {("Deployment", "gpushare-extender"), ("Secret", "gpushare-extender-tls"),
                     ("Secret", "gpushare-extender-tls-scheduler"), ("DaemonSet", "gpushare-device-plugin"),
                     ("ValidatingAdmissionPolicy", "gpushare-annotations"),
                     ("ConfigMap", "gpushare-scheduler-config"), ("NetworkPolicy", "gpushare-extender")},
        "extender-cert-manager": {("Certificate", "gpushare-extender"), ("Issuer", "gpushare-ca")},
        "extender-fgdpack": {("ConfigMap", "gpushare-target-workload")},
        "scheduler": {("Deployment", "gpushare-scheduler"), ("ConfigMap", "gpushare-scheduler-config"),
                      ("Role", "gpushare-scheduler-leader-election"), ("DaemonSet", "gpushare-device-plugin")},
        "everything": {("ServiceMonitor", "gpushare-extender"), ("PodMonitor", "gpushare-device-plugin"),
                       ("PrometheusRule", "gpushare-extender"), ("ConfigMap", "gpushare-dashboard")},
        "dra": {("DaemonSet", "gpushare-dra-driver"), ("ClusterRole", "gpushare-dra-driver"),
                ("DeviceClass", "gpushare.dev"), ("DeviceClass", "gpushare.dev-whole"),
                ("DaemonSet", "gpushare-device-plugin")},
    }
    kubectl(cluster, "create", "namespace", "monitoring", check=False)  # The dashboard's.
    for variant, values in VARIANTS.items():
        objects = render(cluster, *values)
        assert expect[variant] <= names(objects), (variant, expect[variant] - names(objects))
        if variant == "scheduler":
            assert not any(o["metadata"]["name"].startswith("gpushare-extender") for o in objects
                           if o["kind"] in ("Deployment", "Secret", "Service")), names(objects)
            (cm,) = [o for o in objects if o["metadata"]["name"] == "gpushare-scheduler-config"]
            config = yaml.safe_load(cm["data"]["scheduler-config.yaml"])
            assert config["profiles"][0]["schedulerName"] == "gpushare-scheduler"
        if variant == "extender-fgdpack":
            (d,) = [o for o in objects if o["kind"] == "Deployment"]
            args = d["spec"]["template"]["spec"]["containers"][0]["args"]
            assert "--policy=fgdpack" in args and \
                "--target-workload=/etc/gpushare/target-workload.json" in args, args
            (cm,) = [o for o in objects if o["metadata"]["name"] == "gpushare-target-workload"]
            with open(TARGET_WORKLOAD) as f:
                assert json.loads(cm["data"]["target-workload.json"]) == json.load(f)
        native = [o for o in objects if not o["apiVersion"].startswith(CRD_GROUPS)]
        r = kubectl(cluster, "apply", "--server-side", "--dry-run=server", "-f", "-",
                    stdin=yaml.safe_dump_all(native), check=False)
        assert r.returncode == 0, (variant, r.stderr)
        assert r.stdout.count("(server dry run)") == len(native), (variant, r.stdout)


def test_the_schema_refuses_aliyun_gpu_mem_as_the_dra_extended_resource_saying_why(cluster):
    # One unit of a DeviceClass's extended resource is one device (a whole
    # GPU) in 1.37; a unit of memory needs the mappings alpha in 1.38.
    r = helm(cluster, "template", "gpushare", CHART, "-n", NS,
             "--set", "dra.extendedResourceName=aliyun.com/gpu-mem", check=False)
    assert r.returncode != 0, r.stdout[:400]
    assert "/dra/extendedResourceName" in r.stderr and "schema" in r.stderr, r.stderr
    assert "alpha in Kubernetes 1.38" in r.stderr and "whole GPU" in r.stderr, r.stderr


DRA_OBJECTS = {("ServiceAccount", "gpushare-dra-driver"), ("ClusterRole", "gpushare-dra-driver"),
               ("ClusterRoleBinding", "gpushare-dra-driver"), ("DaemonSet", "gpushare-dra-driver"),
               ("DeviceClass", "gpushare.dev")}


def by_name(objects, kind, name):
    (o,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return o


def node_affinity(pod_spec):
    (term,) = pod_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    return term["matchExpressions"]


def runs_on(pod_spec, labels):
    """Whether a pod of this spec may run on a node with these labels (its
    nodeSelector and its required node affinity; In and NotIn)."""
    if any(labels.get(k) != v for k, v in (pod_spec.get("nodeSelector") or {}).items()):
        return False
    for e in node_affinity(pod_spec):
        value = labels.get(e["key"])
        if e["operator"] == "In" and value not in e["values"]:
            return False
        if e["operator"] == "NotIn" and value in e["values"]:
            return False
        assert e["operator"] in ("In", "NotIn"), e
    return True


def test_dra_is_off_by_default(cluster):
    objects = render(cluster)
    assert not {o for o in names(objects) if "dra" in o[1] or o[0] == "DeviceClass"}, names(objects)
    ds = by_name(objects, "DaemonSet", "gpushare-device-plugin")
    assert node_affinity(ds["spec"]["template"]["spec"]) == [
        {"key": "gpushare.io/device-plugin", "operator": "NotIn", "values": ["aliyun"]}]


def test_dra_renders_the_driver_its_rights_and_device_classes(cluster):
    objects = render(cluster, "--set", "dra.enabled=true", "--set", "imageRegistry=reg.example/gs",
                     "--set", "devicePlugin.image.tag=1.2.3")
    assert DRA_OBJECTS <= names(objects), DRA_OBJECTS - names(objects)
    assert ("DeviceClass", "gpushare.dev-whole") not in names(objects)  # No extendedResourceName.

    ds = by_name(objects, "DaemonSet", "gpushare-dra-driver")
    assert ds["metadata"]["namespace"] == NS
    spec = ds["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "gpushare-dra-driver"
    assert "runtimeClassName" not in spec and "hostNetwork" not in spec
    (c,) = spec["containers"]
    # The device plugin's image, which carries both programs.
    assert c["image"] == "reg.example/gs/gpushare-device-plugin:1.2.3"
    assert c["command"] == ["/usr/local/bin/gpushare-dra-driver"]
    assert c["args"] == ["run", "--node-name=$(NODE_NAME)",
                         "--device-plugin=/usr/local/bin/gpushare-device-plugin",
                         "--memory-unit=GiB",
                         "--registrar-dir=/var/lib/kubelet/plugins_registry",
                         "--plugin-dir=/var/lib/kubelet/plugins/gpu.gpushare.dev",
                         "--cdi-dir=/var/run/cdi"]
    # NVML as the device plugin's DaemonSet gets it.
    dp = by_name(objects, "DaemonSet", "gpushare-device-plugin")["spec"]["template"]["spec"]
    nvml = [e for e in dp["containers"][0]["env"] if e["name"].startswith("NVIDIA_")]
    assert nvml == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                    {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"}]
    assert c["env"] == [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                        *nvml]
    assert c["securityContext"] == {"runAsUser": 0, "allowPrivilegeEscalation": False,
                                    "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}
    # The kubelet's folders at their own paths (the kubelet dials the
    # registered socket paths), the CDI folder the runtime reads.
    host = {v["name"]: v["hostPath"] for v in spec["volumes"] if "hostPath" in v}
    assert host == {"plugins-registry": {"path": "/var/lib/kubelet/plugins_registry", "type": "DirectoryOrCreate"},
                    "plugins": {"path": "/var/lib/kubelet/plugins", "type": "DirectoryOrCreate"},
                    "cdi": {"path": "/var/run/cdi", "type": "DirectoryOrCreate"}}
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert mounts == {**{n: h["path"] for n, h in host.items()}, "tmp": "/tmp"}, mounts
    assert [v for v in spec["volumes"] if "hostPath" not in v] == [
        {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}}]

    # Least privilege: exactly the driver's requests.
    role = by_name(objects, "ClusterRole", "gpushare-dra-driver")
    assert role["rules"] == [
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"],
         "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]
    binding = by_name(objects, "ClusterRoleBinding", "gpushare-dra-driver")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": "gpushare-dra-driver"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gpushare-dra-driver",
                                    "namespace": NS}]

    dc = by_name(objects, "DeviceClass", "gpushare.dev")
    assert dc["apiVersion"] == "resource.k8s.io/v1"
    assert dc["spec"] == {"selectors": [{"cel": {"expression": 'device.driver == "gpu.gpushare.dev"'}}]}

    # One driver per node: no labels put both DaemonSets on a node.
    for plugin_label in (None, "aliyun", "dra", "gpushare"):
        for shared in (None, "true"):
            labels = {k: v for k, v in (("gpushare.io/device-plugin", plugin_label),
                                        ("gpushare", shared)) if v is not None}
            assert not (runs_on(spec, labels) and runs_on(dp, labels)), labels
    assert runs_on(spec, {"gpushare.io/device-plugin": "dra"})
    assert runs_on(dp, {"gpushare": "true"}) and not runs_on(spec, {"gpushare": "true"})


def test_dra_values_reach_the_driver(cluster):
    objects = render(cluster, "--set", "dra.enabled=true", "--set", "dra.memoryUnit=MiB",
                     "--set", "dra.extendedResourceName=nvidia.com/gpu",
                     "--set", "dra.hostPaths.plugins=/data/kubelet/plugins",
                     "--set", "dra.runtimeClassName=nvidia", "--set", "dra.extraArgs={--health-interval-ms=1000}",
                     "--set", "dra.nodeSelector.pool=a100")
    spec = by_name(objects, "DaemonSet", "gpushare-dra-driver")["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert "--memory-unit=MiB" in c["args"] and c["args"][-1] == "--health-interval-ms=1000", c["args"]
    assert "--plugin-dir=/data/kubelet/plugins/gpu.gpushare.dev" in c["args"], c["args"]
    assert {"name": "plugins", "mountPath": "/data/kubelet/plugins"} in c["volumeMounts"]
    assert spec["runtimeClassName"] == "nvidia" and spec["nodeSelector"] == {"pool": "a100"}
    # The extra selector narrows; the label still decides (one driver per node).
    assert not runs_on(spec, {"pool": "a100"}) and runs_on(spec, {"pool": "a100", "gpushare.io/device-plugin": "dra"})
    whole = by_name(objects, "DeviceClass", "gpushare.dev-whole")
    assert whole["spec"] == {"selectors": [{"cel": {"expression": 'device.driver == "gpu.gpushare.dev"'}}],
                             "extendedResourceName": "nvidia.com/gpu"}


def test_the_dra_examples_pass_the_api_servers_validation(cluster):
    """deploy/dra-examples/: 8 GiB of one GPU, 16 GiB on each of two distinct
    GPUs of a node, a whole GPU; each a ResourceClaimTemplate of the class
    gpushare.dev and a pod using it, checked by kube-apiserver's dry run."""
    requests = {}
    for name in sorted(os.listdir(DRA_EXAMPLES)):
        with open(os.path.join(DRA_EXAMPLES, name)) as f:
            docs = [d for d in yaml.safe_load_all(f) if d]
        assert [d["kind"] for d in docs] == ["ResourceClaimTemplate", "Pod"], name
        template, pod = docs
        assert template["apiVersion"] == "resource.k8s.io/v1", name
        assert pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == \
            template["metadata"]["name"], name
        devices = template["spec"]["spec"]["devices"]
        (req,) = devices["requests"]
        assert req["exactly"]["deviceClassName"] == "gpushare.dev", name
        requests[name] = (req["exactly"], devices.get("constraints"))
        r = kubectl(cluster, "apply", "--server-side", "--dry-run=server", "-n", "default",
                    "-f", os.path.join(DRA_EXAMPLES, name), check=False)
        assert r.returncode == 0, (name, r.stderr)
        assert r.stdout.count("(server dry run)") == 2, (name, r.stdout)
    assert requests == {
        "one-gpu-8gi.yaml": ({"deviceClassName": "gpushare.dev",
                              "capacity": {"requests": {"memory": "8Gi"}}}, None),
        "two-gpus-16gi.yaml": ({"deviceClassName": "gpushare.dev", "allocationMode": "ExactCount",
                                "count": 2, "capacity": {"requests": {"memory": "16Gi"}}},
                               [{"requests": ["gpus"], "distinctAttribute": "gpu.gpushare.dev/uuid"}]),
        "whole-gpu.yaml": ({"deviceClassName": "gpushare.dev"}, None),
    }, requests


def test_the_manifests_of_deploy_are_rendered_from_the_chart(cluster):
    env = {**os.environ, "HELM": helm_bin(cluster)}
    r = subprocess.run([os.path.join(ROOT, "deploy", "render.sh"), "--check"], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def openssl(*args, stdin=None):
    return subprocess.run(["openssl", *args], input=stdin, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=30)


def secret_files(cluster, name):
    out = kubectl(cluster, "-n", NS, "get", "secret", name, "-o", "yaml").stdout
    return {k: base64.b64decode(v).decode() for k, v in yaml.safe_load(out)["data"].items()}


def test_install_upgrade_and_uninstall_leave_nothing_behind(cluster):
    expected = render(cluster)
    try:
        helm(cluster, "install", "gpushare", CHART, "-n", NS)
        for kind, name in names(expected):
            scope = [] if kind.startswith("Cluster") or kind.startswith("Validating") else ["-n", NS]
            assert kubectl(cluster, "get", kind, name, *scope, check=False).returncode == 0, (kind, name)
        # The generated certificates: the extender's names its Service and every
        # replica, kube-scheduler's is a client certificate; both chain to the CA.
        server = secret_files(cluster, "gpushare-extender-tls")
        client = secret_files(cluster, "gpushare-extender-tls-scheduler")
        with tempfile.TemporaryDirectory() as d:
            paths = {}
            for n, text in (("ca", server["ca.crt"]), ("server", server["tls.crt"]),
                            ("client", client["tls.crt"])):
                paths[n] = os.path.join(d, n + ".crt")
                with open(paths[n], "w") as f:
                    f.write(text)
            for n in ("server", "client"):
                r = openssl("verify", "-CAfile", paths["ca"], paths[n])
                assert r.returncode == 0, r.stdout + r.stderr
            text = openssl("x509", "-in", paths["server"], "-noout", "-text").stdout
            assert "DNS:gpushare-extender.kube-system.svc" in text, text
            assert "DNS:*.gpushare-extender-peers.kube-system.svc" in text, text
            assert "TLS Web Server Authentication" in text and "TLS Web Client Authentication" in text
        assert client["ca.crt"] == server["ca.crt"]
        # The key matches the certificate.
        pub = openssl("x509", "-pubkey", "-noout", stdin=server["tls.crt"]).stdout
        key = openssl("pkey", "-pubout", stdin=server["tls.key"]).stdout
        assert pub and pub == key

        # An upgrade changes what it is told and keeps the certificates, so
        # kube-scheduler's copies stay valid.
        helm(cluster, "upgrade", "gpushare", CHART, "-n", NS, "--reuse-values",
             "--set", "extender.replicas=3", "--set", "policy=spread")
        d = yaml.safe_load(kubectl(cluster, "-n", NS, "get", "deployment", "gpushare-extender",
                                   "-o", "yaml").stdout)
        assert d["spec"]["replicas"] == 3
        assert "--policy=spread" in d["spec"]["template"]["spec"]["containers"][0]["args"]
        assert secret_files(cluster, "gpushare-extender-tls") == server
        assert secret_files(cluster, "gpushare-extender-tls-scheduler") == client
        assert "deployed" in helm(cluster, "status", "gpushare", "-n", NS).stdout
    finally:
        r = helm(cluster, "uninstall", "gpushare", "-n", NS, "--wait", "--timeout", "60s", check=False)
    assert r.returncode == 0, r.stderr
    left = []
    for kind, name in names(expected):
        scope = [] if kind.startswith("Cluster") or kind.startswith("Validating") else ["-n", NS]
        if kubectl(cluster, "get", kind, name, *scope, check=False).returncode == 0:
            left.append((kind, name))
    assert not left, left
    # Nor Helm's own record of the release.
    secrets = kubectl(cluster, "-n", NS, "get", "secrets", "-l", "owner=helm", "-o", "name").stdout
    assert secrets.strip() == "", secrets
