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
}


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
