#!/usr/bin/env bash
# Renders the plain manifests of deploy/ from the Helm chart deploy/chart/,
# so that `kubectl apply -k deploy/...` and `helm install` create the same
# objects: each template of deploy/chart/templates/<dir>/<file> becomes
# deploy/<dir>/<file> (base/, device-plugin/, admission/, monitoring/ from
# mode=extender; scheduler/ from mode=scheduler), with the certificates left
# to deploy/make-certs.sh (extender.tls.source=secret) and every monitoring
# object on. The kustomization.yaml files and the overlays are not rendered.
#
#   deploy/render.sh            write the files
#   deploy/render.sh --check    write nothing; fail, with the diff, when a
#                               file differs from what the chart renders
#
# Helm: $HELM, else the one tests/kube/build-kube.sh builds (the release
# tests/kube/go.mod pins).
set -euo pipefail
cd "$(dirname "$0")"
check=false
case "${1:-}" in
  --check) check=true ;;
  "") ;;
  *) echo "render.sh: unknown argument '$1' (usage: deploy/render.sh [--check])" >&2; exit 2 ;;
esac
helm=${HELM:-}
if [ -z "$helm" ]; then helm="$(../tests/kube/build-kube.sh helm)/helm"; fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
common=(--namespace kube-system --set extender.tls.source=secret
        --set monitoring.serviceMonitor=true --set monitoring.podMonitor=true
        --set monitoring.prometheusRule=true --set monitoring.dashboard=true)
"$helm" template gpushare chart "${common[@]}" --set mode=extender > "$out/extender.yaml"
"$helm" template gpushare chart "${common[@]}" --set mode=scheduler > "$out/scheduler.yaml"

# split STREAM DIRS...: writes each "# Source: gpushare/templates/<dir>/<file>"
# document of STREAM whose <dir> is one of DIRS to $out/tree/<dir>/<file>.
split() {
  python3 - "$out/tree" "$@" <<'PY'
import os, re, sys
root, stream, dirs = sys.argv[1], sys.argv[2], set(sys.argv[3:])
docs = {}
for doc in re.split(r"^---\n", open(stream).read(), flags=re.M):
    m = re.match(r"# Source: gpushare/templates/([^/\n]+)/([^\n]+)\n", doc)
    if not m or m.group(1) not in dirs:
        continue
    docs.setdefault((m.group(1), m.group(2)), []).append(doc[m.end():].strip("\n") + "\n")
for (d, f), parts in docs.items():
    os.makedirs(os.path.join(root, d), exist_ok=True)
    with open(os.path.join(root, d, f), "w") as out:
        out.write(f"# Rendered from deploy/chart/templates/{d}/{f} by deploy/render.sh:\n"
                  "# edit the template and run deploy/render.sh again.\n")
        out.write("---\n".join(parts))
PY
}
split "$out/extender.yaml" base device-plugin admission monitoring
split "$out/scheduler.yaml" scheduler

status=0
for f in $(cd "$out/tree" && find . -type f | sort); do
  f=${f#./}
  if $check; then
    if ! diff -u "$f" "$out/tree/$f"; then
      echo "render.sh: deploy/$f differs from what deploy/chart renders (run deploy/render.sh)" >&2
      status=1
    fi
  else
    cp "$out/tree/$f" "$f"
  fi
done
# A rendered file whose template is gone.
for f in $(grep -l '^# Rendered from deploy/chart/' -- */*.yaml 2>/dev/null); do
  if [ ! -e "$out/tree/$f" ]; then
    echo "render.sh: deploy/$f says it is rendered, but deploy/chart renders no such file" >&2
    status=1
  fi
done
$check || echo "render.sh: wrote $(cd "$out/tree" && find . -type f | wc -l) files of deploy/"
exit $status
