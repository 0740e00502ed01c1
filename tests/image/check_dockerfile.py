"""Checks deploy/Dockerfile against the tree, without building it (no
registry is reachable where the tests run, so its base images cannot be
pulled): the parts of it that the tree can contradict.

  - it has the stages extender, device-plugin and scheduler, and the last one
    (what `docker build` without --target builds) is the extender;
  - every COPY from the build context names a file of the tree, and every
    COPY --from=<stage> names a folder that stage's RUNs fill;
  - gpushare-dra-driver: a stage builds it static (CGO_ENABLED=0) from
    ./cmd/gpushare-dra-driver of the tree's dra-driver/ module, with a Go
    image at least as new as that module's go.mod asks, and the
    device-plugin image copies that binary beside gpushare-device-plugin;
  - every target of the build stage's `cmake --build` exists when the tree is
    configured with the build stage's own -D options;
  - each image stage installs exactly the Debian packages of the shared
    libraries its programs load (as ldd lists them for the programs of
    $BUILD, packages found with dpkg -S), besides what debian:bookworm-slim
    has: a missing one is an image that does not start, an extra one weight;
  - each image runs as the user the chart's pods expect, its entrypoint one of
    the programs it copies.

Usage: python check_dockerfile.py ROOT BUILD SCHEDULER
  ROOT       the repository; BUILD its CMake build folder (programs built)
  SCHEDULER  kube-scheduler with GpuShare (scheduler-plugin/build.sh)
Prints one line per check; exits 1 naming every mismatch.
"""

import os
import re
import shlex
import subprocess
import sys
import tempfile

from dockerfile_parse import DockerfileParser

# Packages every debian:bookworm-slim has (priority required).
SLIM = {"libc6", "libgcc-s1", "libstdc++6", "zlib1g"}
# The user each image runs as: the chart's securityContexts (deploy/chart).
USERS = {"extender": "65532:65532", "scheduler": "65532:65532", "device-plugin": "0:0"}


def stages(parser):
    """[(name, [instruction dicts])] in order; name is the AS name or ''."""
    out = []
    for ins in parser.structure:
        if ins["instruction"] == "FROM":
            m = re.match(r"\S+(?:\s+AS\s+(\S+))?\s*$", ins["value"], re.I)
            out.append((m.group(1) or "" if m else "", []))
        elif out:
            out[-1][1].append(ins)
    return out


def copy_args(value):
    """(flags, sources, destination) of a COPY instruction's value."""
    words = shlex.split(value)
    flags = [w for w in words if w.startswith("--")]
    rest = [w for w in words if not w.startswith("--")]
    return flags, rest[:-1], rest[-1]


def packages_of(programs):
    """The Debian packages owning the shared libraries `programs` load."""
    libs = set()
    for p in programs:
        out = subprocess.run(["ldd", p], check=True, capture_output=True, text=True).stdout
        for line in out.splitlines():
            m = re.search(r"=>\s+(/\S+)", line)
            if m:
                libs.add(m.group(1))
    pkgs, unowned = set(), set()
    for lib in sorted(libs):
        owner = None
        for path in (lib, os.path.realpath(lib)):
            r = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True)
            if r.returncode == 0:
                owner = r.stdout.split(":")[0].strip()
                break
        if owner:
            pkgs.add(owner)
        else:
            unowned.add(lib)
    return pkgs, unowned


def check_dra_driver(root, parser, by_name, run_text):
    """gpushare-dra-driver: built static from the tree's package by a Go
    image new enough for its go.mod, copied into the device-plugin image."""
    problems = []
    ins = by_name.get("dra-driver", [])
    workdir = next((i["value"].strip() for i in reversed(ins) if i["instruction"] == "WORKDIR"), "")
    module = os.path.join(root, os.path.basename(workdir))  # /src/dra-driver -> dra-driver/
    text = run_text.get("dra-driver", "")
    m = re.search(r"go build\b.*?-o\s+(\S+)\s+(\./\S+)", text)
    if not m:
        problems.append("dra-driver: the stage runs no `go build ... -o OUT ./PACKAGE`")
        return problems
    out, package = m.groups()
    if os.path.basename(out) != "gpushare-dra-driver":
        problems.append(f"dra-driver: go build writes {out}, not .../gpushare-dra-driver")
    if not os.path.isfile(os.path.join(module, package, "main.go")):
        problems.append(f"dra-driver: go build {package} in {workdir}: the tree has no "
                        f"{os.path.relpath(os.path.join(module, package), root)}/main.go")
    if not re.search(r"\bCGO_ENABLED=0\b[^&]*go build", text):
        problems.append("dra-driver: go build without CGO_ENABLED=0 (a cgo build links the Go "
                        "image's glibc; the static binary needs nothing from the runtime image)")
    # The Go image's minor version against the module's `go` line.
    try:
        with open(os.path.join(module, "go.mod")) as f:
            want = re.search(r"^go (\d+)\.(\d+)", f.read(), re.M)
    except OSError:
        want = None
    # The Go stage's image: the default of the ARG GO_IMAGE it is FROM.
    arg = re.search(r"^ARG GO_IMAGE=(\S+)", parser.content, re.M)
    image = arg.group(1) if arg else ""
    have = re.search(r":(\d+)\.(\d+)", image)
    if not want:
        problems.append(f"dra-driver: no go.mod with a `go` line in {os.path.relpath(module, root)}/")
    elif not have or tuple(map(int, have.groups())) < tuple(map(int, want.groups())):
        problems.append(f"dra-driver: GO_IMAGE {image!r} is older than go {'.'.join(want.groups())} "
                        "of dra-driver/go.mod")
    # The device-plugin image carries the binary.
    copied = False
    for i in by_name.get("device-plugin", []):
        if i["instruction"] != "COPY":
            continue
        flags, sources, dest = copy_args(i["value"])
        if "--from=dra-driver" in flags and any(s.rstrip("/") in (out, os.path.dirname(out)) for s in sources):
            copied = dest.rstrip("/") == "/usr/local/bin" or dest == "/usr/local/bin/gpushare-dra-driver"
    if not copied:
        problems.append(f"device-plugin: no COPY --from=dra-driver {out} /usr/local/bin/ "
                        "(the chart's DRA DaemonSet runs gpushare-dra-driver from this image)")
    print(f"check_dockerfile: gpushare-dra-driver: go build {package} in {workdir} -> {out}")
    return problems


def main(root, build, scheduler):
    problems = []
    parser = DockerfileParser(path=os.path.join(root, "deploy", "Dockerfile"))
    st = stages(parser)
    names = [n for n, _ in st]
    for want in ("build", "dra-driver", "extender", "device-plugin", "scheduler"):
        if want not in names:
            problems.append(f"no stage '{want}' (stages: {names})")
    if names and names[-1] != "extender":
        problems.append(f"the last stage is '{names[-1]}', not extender")
    by_name = dict(st)

    # COPY sources from the context, and what the building stages fill.
    run_text = {n: " ".join(i["value"] for i in ins if i["instruction"] == "RUN") for n, ins in st}
    build_text = run_text.get("build", "")
    for name, instructions in st:
        for ins in instructions:
            if ins["instruction"] != "COPY":
                continue
            flags, sources, _ = copy_args(ins["value"])
            source_stage = next((f.split("=", 1)[1] for f in flags if f.startswith("--from=")), None)
            for src in sources:
                if source_stage is None and not os.path.exists(os.path.join(root, src)):
                    problems.append(f"line {ins['startline'] + 1}: COPY {src}: no such file")
                if run_text.get(source_stage):  # A stage of this file that builds.
                    folder = "/".join(src.rstrip("/").split("/")[:3])  # /out/<dir>
                    if folder not in run_text[source_stage]:
                        problems.append(f"line {ins['startline'] + 1}: COPY --from={source_stage} {src}: "
                                        f"the {source_stage} stage writes no {folder}")
    print(f"check_dockerfile: stages {names}")

    # The build stage's CMake options and targets, configured here.
    options = re.findall(r"(-D\w+=\S+)", build_text)
    m = re.search(r"cmake --build \S+ --target ((?:[\w.-]+\s+)+?)(?:&&|$)", build_text)
    targets = m.group(1).split() if m else []
    if not targets:
        problems.append("the build stage runs no `cmake --build ... --target`")
    with tempfile.TemporaryDirectory(dir=build) as scratch:
        r = subprocess.run(["cmake", "-S", root, "-B", scratch, "-G", "Ninja", *options],
                           capture_output=True, text=True)
        if r.returncode != 0:
            problems.append(f"cmake with the build stage's options {options} fails:\n{r.stderr[-2000:]}")
        else:
            listed = subprocess.run(["ninja", "-C", scratch, "-t", "targets", "all"], check=True,
                                    capture_output=True, text=True).stdout
            known = {line.split(":")[0] for line in listed.splitlines()}
            for t in targets:
                if t not in known:
                    problems.append(f"cmake --build --target {t}: no such target with {options}")
    print(f"check_dockerfile: build stage options {options}, targets {targets}")

    problems += check_dra_driver(root, parser, by_name, run_text)

    # Each image's packages, user and entrypoint.
    programs = {
        "extender": [f"{build}/extender/gpushare-extender", f"{build}/extender/kubectl-inspect-gpushare"],
        "device-plugin": [f"{build}/device-plugin/gpushare-device-plugin"],
        "scheduler": [scheduler, f"{build}/bindings/c/libgpushare_c.so"],
    }
    for image, progs in programs.items():
        instructions = by_name.get(image, [])
        installed = set()
        for ins in instructions:
            if ins["instruction"] == "RUN" and "apt-get install" in ins["value"]:
                after = ins["value"].split("apt-get install", 1)[1].split("&&")[0]
                installed |= {w for w in after.split() if not w.startswith("-")}
        installed.discard("ca-certificates")
        needed, unowned = packages_of(progs)
        unowned = {u for u in unowned if "libgpushare_c" not in u}
        if unowned:
            problems.append(f"{image}: libraries no Debian package owns: {sorted(unowned)}")
        needed -= SLIM
        if needed - installed:
            problems.append(f"{image}: the stage does not install {sorted(needed - installed)}, "
                            "which its programs load")
        if installed - needed:
            problems.append(f"{image}: the stage installs {sorted(installed - needed)}, "
                            "which none of its programs loads")
        print(f"check_dockerfile: {image} installs {sorted(installed)}")
        user = next((i["value"].strip() for i in reversed(instructions) if i["instruction"] == "USER"), None)
        if user != USERS[image]:
            problems.append(f"{image}: runs as {user}, not {USERS[image]}")
        entry = next((i["value"] for i in reversed(instructions) if i["instruction"] == "ENTRYPOINT"), "")
        entry_program = os.path.basename(re.sub(r'[\[\]"]', "", entry).split(",")[0].strip())
        copied = {os.path.basename(p) for p in progs}
        if entry_program not in copied:
            problems.append(f"{image}: the entrypoint {entry!r} is none of {sorted(copied)}")
    for p in problems:
        print(f"check_dockerfile: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(*sys.argv[1:]))
