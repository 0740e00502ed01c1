#!/usr/bin/env bash
# Prints the Go build tags for the Kubernetes release scheduler-plugin/go.mod
# pins (build.sh and test.sh pass them to go): kube_pre136 before 1.36, where
# the framework's PreBindPreFlight returned a status only (plugin/preflight*.go).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
version="$(awk '$1 == "k8s.io/kubernetes" {print $2; exit}' "$here/go.mod")"
minor="${version#v1.}"; minor="${minor%%.*}"
if [ -n "$minor" ] && [ "$minor" -lt 36 ]; then echo "kube_pre136"; fi
