"""Checks deploy/Dockerfile against the tree, without building it (no
registry is reachable where the tests run, so its base images cannot be
pulled): the parts of it that the tree can contradict.

  - it has the stages extender, device-plugin and scheduler, and the last one
    (what `docker build` without --target builds) is the extender;
  - every COPY from the build context names a file of the tree, and every
    COPY --from=build names a folder the build stage fills;
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


def main(root, build, scheduler):
    problems = []
    parser = DockerfileParser(path=os.path.join(root, "deploy", "Dockerfile"))
    st = stages(parser)
    names = [n for n, _ in st]
    for want in ("build", "extender", "device-plugin", "scheduler"):
        if want not in names:
            problems.append(f"no stage '{want}' (stages: {names})")
    if names and names[-1] != "extender":
        problems.append(f"the last stage is '{names[-1]}', not extender")
    by_name = dict(st)

    # COPY sources from the context, and what the build stage fills.
    build_text = " ".join(i["value"] for i in by_name.get("build", []) if i["instruction"] == "RUN")
    for name, instructions in st:
        for ins in instructions:
            if ins["instruction"] != "COPY":
                continue
            flags, sources, _ = copy_args(ins["value"])
            source_stage = next((f.split("=", 1)[1] for f in flags if f.startswith("--from=")), None)
            for src in sources:
                if source_stage is None and not os.path.exists(os.path.join(root, src)):
                    problems.append(f"line {ins['startline'] + 1}: COPY {src}: no such file")
                if source_stage == "build":
                    folder = "/".join(src.rstrip("/").split("/")[:3])  # /out/<dir>
                    if folder not in build_text:
                        problems.append(f"line {ins['startline'] + 1}: COPY --from=build {src}: "
                                        f"the build stage writes no {folder}")
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
