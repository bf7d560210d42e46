#!/usr/bin/env bash
# Installs what the benchmarks (bench/run.sh) need on top of install-deps.sh:
# matplotlib for the chart and rclone, the peer FUSE mount they compare with.
# Idempotent and quiet. Run as root.
set -euo pipefail
exec bash "$(dirname "$0")/install-deps.sh" python3-matplotlib rclone
