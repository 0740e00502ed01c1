#!/usr/bin/env bash
# Checks gpushare-device-plugin's GPU discovery against nvidia-smi on a machine
# with NVIDIA GPUs: runs `gpushare-device-plugin --discover` (the real NVML)
# and `nvidia-smi -q -x`, and compares, GPU by GPU, the UUID, the model, the
# total memory, the PCI bus id and the MIG mode, and the driver version.
# Prints one line per GPU; exits 1 on any difference, 77 when there is
# nothing to compare with (no nvidia-smi).
#
#   device-plugin/check-real-gpu.sh [--binary PATH] [--nvml-library LIB]
#                                   [--nvidia-smi-xml FILE]
#
# --nvidia-smi-xml compares with a recorded `nvidia-smi -q -x` instead of
# running nvidia-smi: the tests check the script itself that way, with the
# stand-in NVML and the H200 record of ../shared/nvml/.
set -euo pipefail
binary="$(cd "$(dirname "$0")/.." && pwd)/build/device-plugin/gpushare-device-plugin"
nvml_args=()
xml=""
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary="$2"; shift 2 ;;
    --nvml-library) nvml_args=(--nvml-library "$2"); shift 2 ;;
    --nvidia-smi-xml) xml="$2"; shift 2 ;;
    *) echo "check-real-gpu: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -x "$binary" ] || { echo "check-real-gpu: $binary is not built" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -z "$xml" ]; then
  command -v nvidia-smi >/dev/null 2>&1 || { echo "check-real-gpu: no nvidia-smi here" >&2; exit 77; }
  nvidia-smi -q -x > "$tmp/smi.xml"
  xml="$tmp/smi.xml"
fi
"$binary" --discover "${nvml_args[@]}" > "$tmp/discover.json"
python3 - "$tmp/discover.json" "$xml" <<'PY'
import json, sys
import xml.etree.ElementTree as ET

discovered = json.load(open(sys.argv[1]))
smi = ET.parse(sys.argv[2]).getroot()
wrong = []

def check(what, ours, theirs):
    if ours != theirs:
        wrong.append(f"{what}: gpushare-device-plugin {ours!r}, nvidia-smi {theirs!r}")

check("driver version", discovered["driver_version"], smi.findtext("driver_version"))
gpus = smi.findall("gpu")
check("GPU count", len(discovered["gpus"]), len(gpus))
for ours, theirs in zip(discovered["gpus"], gpus):
    i = ours["index"]
    check(f"GPU {i} UUID", ours["uuid"], theirs.findtext("uuid"))
    check(f"GPU {i} model", ours["name"], theirs.findtext("product_name"))
    check(f"GPU {i} PCI bus id", ours["pci_bus_id"].upper(), theirs.findtext("pci/pci_bus_id").upper())
    total = theirs.findtext("fb_memory_usage/total")  # "143771 MiB"
    check(f"GPU {i} memory (MiB)", ours["memory_bytes"] // 2**20, int(total.split()[0]))
    mig = theirs.findtext("mig_mode/current_mig")
    if mig not in (None, "N/A"):
        check(f"GPU {i} MIG mode", ours["mig_enabled"], mig == "Enabled")
    print(f"GPU {i} {ours['uuid']} {ours['name']}: {ours['units']} {discovered['memory_unit']}, "
          f"bus {ours['pci_bus_id']}")
for w in wrong:
    print("MISMATCH " + w)
if wrong:
    sys.exit(1)
print(f"check-real-gpu: {len(gpus)} GPU(s) agree with nvidia-smi (driver {discovered['driver_version']})")
PY
