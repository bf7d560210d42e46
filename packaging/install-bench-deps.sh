#!/usr/bin/env bash
# Installs what the benchmarks (bench/run.sh) need on top of install-deps.sh:
# matplotlib for the chart and rclone, the peer FUSE mount they compare with.
# Idempotent and quiet: does nothing when everything is already installed.
# Run as root.
set -euo pipefail

packages=(
  python3-matplotlib
  rclone
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "installed" ]] || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "install-bench-deps: run as root to install: ${missing[*]}" >&2
  exit 1
fi
echo "install-bench-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
log=$(mktemp)
apt-get install -y -qq --no-install-recommends "${missing[@]}" >"$log" 2>&1 ||
  { cat "$log"; rm -f "$log"; exit 1; }
rm -f "$log"
