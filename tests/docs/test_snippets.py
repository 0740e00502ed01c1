"""The documentation's commands run as written.

Every fenced ```sh, ```bash and ```python block of README.md and docs/*.md
(docs/research/ is a record, not instructions) is one test case, named
FILE:L<line of the opening fence>. Python blocks run, each on its own, with
the interpreter running pytest (the 20-python stage's virtual environment,
where gpushare is installed); shell blocks run with bash from the repository
root, using the programs of build/. A block that is not run must be named in
SKIP with the reason; a block that is neither run nor named fails, and so does
a SKIP entry that names no block. Blocks that read the openb traces skip when
the traces are absent. Blocks meant to be read, not run, are fenced as text.

  python3 -m pytest tests/docs --collect-only -q   # what there is
  bash scripts/test.d/27-docs.sh                   # run them (after the build)

GPUSHARE_DOCS_STRICT=1 (set by 27-docs.sh) turns a missing gpushare package
or build/ program into a failure instead of a skip.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys
from typing import NamedTuple

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
RUN_LANGS = {"sh", "bash", "python"}
TIMEOUT_S = 60
STRICT = os.environ.get("GPUSHARE_DOCS_STRICT", "") == "1"
SHARED = pathlib.Path(os.environ.get("GPUSHARE_SHARED_DIR") or ROOT.parent / "shared")
OPENB = SHARED / "traces" / "openb"


class Block(NamedTuple):
    path: str    # relative to the repository root
    line: int    # of the opening fence, 1-based
    lang: str
    text: str

    @property
    def id(self) -> str:
        return f"{self.path}:L{self.line}"

    @property
    def key(self) -> tuple[str, str]:
        """(file, first line that is neither blank nor a comment): stable under edits elsewhere."""
        for raw in self.text.splitlines():
            s = raw.strip()
            if s and not s.startswith("#"):
                return (self.path, s)
        return (self.path, "")


# Blocks not run, by (file, first command line), with why. Keep it small: a
# new example should run.
SKIP: dict[tuple[str, str], str] = {
    ("README.md", "make demo   # installs what is missing, builds, runs the demo"):
        "is the quick start itself: installs packages and builds everything",
    ("README.md", "python3 -m pip install .   # builds the extension; needs the C++ dependencies above"):
        "builds and installs the package: the 20-python stage does exactly this",
    ("README.md", "make images FROM_SOURCE=1 REGISTRY=REGISTRY               # the three images from source, pushed"):
        "needs a registry and a Kubernetes cluster: covered by scripts/test.d/50-kube.sh and 55-image.sh "
        "(which checks deploy/Dockerfile against the tree)",
    ("README.md", "cmake -S . -B build -G Ninja && cmake --build build && ctest --test-dir build"):
        "a full build and test run: the C++ stage of make test",
    ("docs/python.md", "python3 -m pip install .   # from the repository: builds the extension with scikit-build-core"):
        "builds and installs the package: the 20-python stage does exactly this",
    ("docs/python.md", "make wheel"):
        "builds the wheel: covered by scripts/test.d/22-wheel.sh",
    ("docs/python.md", "from dask.distributed import Client"):
        "needs a Dask scheduler at tcp://scheduler:8786",
    ("docs/python.md", "python3 examples/python/quickstart.py"):
        "run by the 20-python stage against the installed package",
    ("docs/device-plugin.md", "kubectl label node gpu-node-1 gpushare=true"):
        "needs a cluster with a GPU node: the node stage (scripts/test.d/52-node.sh) runs the plugin under a real kubelet",
    ("docs/migration.md", "kubectl label node -l gpushare=true gpushare.io/device-plugin=aliyun"):
        "needs a cluster running the Go original: tests/kube/test_migration.py checks what it relies on",
    ("docs/migration.md", "kubectl label node gpu-node-1 gpushare.io/device-plugin=gpushare --overwrite"):
        "needs a cluster with GPU nodes: tests/kube/test_migration.py checks the DaemonSet's affinity",
    ("docs/scheduler-plugin.md", "BUILD=build deploy/build-image-local.sh --scheduler REGISTRY/gpushare-scheduler:0.1.0   # buildah"):
        "builds kube-scheduler and an image (minutes): the 55-image stage builds and checks it",
    ("README.md", "BUILD=build deploy/build-image-local.sh --scheduler REGISTRY/gpushare-scheduler:0.1.0 && buildah push REGISTRY/gpushare-scheduler:0.1.0"):
        "builds kube-scheduler and an image (minutes) and pushes it: the 55-image stage builds and checks it",
    ("docs/operations.md", "kubectl apply --server-side -k deploy/monitoring/"):
        "needs a cluster with the Prometheus Operator's CRDs: the kube test applies metrics-reader.yaml and scrapes with its token",
    ("docs/scheduler-plugin.md", "cmake -S . -B build -G Ninja && ninja -C build gpushare_c   # the C ABI library and its .pc"):
        "builds kube-scheduler with cgo (minutes): the 51-scheduler-plugin stage runs these scripts",
    ("README.md", "make images REGISTRY=registry.example.com/gpushare"):
        "builds and pushes images to a registry, then installs on a cluster: 52-node builds the images "
        "and installs the chart on a real kubelet (tests/install/)",
    ("docs/helm.md", "helm install gpushare deploy/chart -n kube-system --set mode=scheduler \\"):
        "needs a cluster and a registry: tests/install/ installs the chart in both modes on a real kubelet",
    ("docs/helm.md", "ns=kube-system s=gpushare-extender-tls-scheduler"):
        "needs a cluster with the chart installed: tests/install/ reads the same Secret for its kube-scheduler",
    ("docs/helm.md", "helm upgrade --install gpushare deploy/chart -n kube-system --reuse-values --set dra.enabled=true"):
        "needs a cluster with GPU nodes: tests/kube/test_chart.py renders and dry-runs the DRA objects and "
        "tests/dra-node runs the driver with the chart's RBAC and classes under a real kubelet",
    ("docs/helm.md", "helm uninstall gpushare -n kube-system"):
        "needs a cluster: tests/kube/test_chart.py and tests/install/ uninstall and check nothing is left",
    ("docs/topology.md", "cmake -S . -B build-rel -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build build-rel --target topology_benchmark"):
        "a Release build and a benchmark of minutes: make bench",
    ("docs/topology.md", "PYTHONPATH=build/bindings/python python3 bench/topology_quality.py --traces ../shared/traces/openb --seeds 42 43 44 45 46 47 48 49 50 51"):
        "twenty experiments on the full trace, minutes: a measurement, not a check",
    ("docs/batch-and-defrag.md", "cmake -S . -B build-rel -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build build-rel --target batch_benchmark"):
        "a Release build and a benchmark of minutes: make bench",
}

# Words that mark a shell block as too costly or not self-contained to run
# unless SKIP names it: a new block with one of them fails until it is
# listed (or changed).
COSTLY = re.compile(r"\b(make|sudo|apt-get|kubectl|docker|buildah|kustomize|cmake|pip)\b")


def extract(path: pathlib.Path) -> list[Block]:
    rel = path.relative_to(ROOT).as_posix()
    blocks: list[Block] = []
    fence = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([A-Za-z0-9_+-]*)")
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = fence.match(lines[i])
        if not m:
            i += 1
            continue
        indent, marker, lang = m.group(1), m.group(2), m.group(3).lower()
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(marker):
            line = lines[i]
            body.append(line[len(indent):] if line.startswith(indent) else line)
            i += 1
        i += 1  # the closing fence
        if lang in RUN_LANGS:
            blocks.append(Block(rel, start + 1, lang, "\n".join(body) + "\n"))
    return blocks


BLOCKS = [b for p in DOCS for b in extract(p)]


def needs_traces(block: Block) -> bool:
    return "shared/traces" in block.text or "GPUSHARE_SHARED_DIR" in block.text


def missing_prerequisite(block: Block) -> str:
    """Why the block cannot run here, or "" when it can."""
    if block.lang == "python":
        probe = subprocess.run([sys.executable, "-c", "import gpushare"], capture_output=True)
        if probe.returncode != 0:
            return f"gpushare is not importable by {sys.executable}"
        return ""
    for program in sorted(set(re.findall(r"\bbuild/[\w./-]+", block.text))):
        if program.endswith((".json", ".csv", ".txt")):
            continue
        if not (ROOT / program).exists():
            return f"{program} is not built"
    return ""


def test_blocks_were_found() -> None:
    assert any(b.path == "README.md" for b in BLOCKS)
    assert len(BLOCKS) >= 10, [b.id for b in BLOCKS]


def test_every_skip_entry_names_a_block() -> None:
    keys = {b.key for b in BLOCKS}
    stale = [k for k in SKIP if k not in keys]
    assert not stale, f"SKIP entries that name no block (edit or remove them): {stale}"


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_snippet_runs(block: Block) -> None:
    reason = SKIP.get(block.key)
    if reason is not None:
        pytest.skip(f"listed in SKIP: {reason}")
    if block.lang != "python" and COSTLY.search(block.text):
        pytest.fail(f"{block.id} looks costly or not self-contained ({COSTLY.search(block.text).group(0)}): "
                    f"make it cheap, or name it in SKIP with the reason; key {block.key!r}")
    if needs_traces(block) and not (OPENB / "openb_node_list_gpu_node.csv").exists():
        pytest.skip(f"the openb traces are not in {OPENB}")
    why = missing_prerequisite(block)
    if why:
        if STRICT:
            pytest.fail(why)
        pytest.skip(why)
    env = dict(os.environ)
    env.setdefault("GPUSHARE_SHARED_DIR", str(SHARED))
    env.setdefault("MPLBACKEND", "Agg")
    if block.lang == "python":
        cmd = [sys.executable, "-c", block.text]
    else:
        if "curl " in block.text and shutil.which("curl") is None:
            pytest.skip("curl is not installed")
        cmd = ["bash", "-euo", "pipefail", "-c", block.text]
    try:
        r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{block.id} ran over {TIMEOUT_S} s")
    assert r.returncode == 0, (
        f"{block.id} exited {r.returncode}\n--- block ---\n{block.text}"
        f"--- stdout ---\n{r.stdout[-3000:]}\n--- stderr ---\n{r.stderr[-3000:]}")
