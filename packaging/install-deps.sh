#!/usr/bin/env bash
# Installs what tensorfs needs to build, test and run its demo on Debian 12,
# plus any package named on the command line (install-bench-deps.sh uses that).
# Idempotent and quiet: does nothing when everything is already installed.
# Run as root.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config clang git ca-certificates
  libclang-rt-14-dev  # libFuzzer and the sanitizer runtimes for clang (packaging/run-fuzz.sh)
  libfuse3-dev fuse3
  libcurl4-openssl-dev libssl-dev openssl curl
  libexpat1-dev  # the S3 listing's XML (core/store/s3/s3_xml.cc)
  nlohmann-json3-dev libspdlog-dev libfmt-dev libcli11-dev libsystemd-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-numpy
  python3-sentencepiece  # trains the SentencePiece models of tests/core/gguf/tokenizer_test.cc and tests/gguf, and is tests/gguf's reference tokenizer
  man-db groff-base  # man -l checks the generated tensorfs(8) (tests/fs/command_line_test.cc, the .deb test)
  dpkg-dev systemd procps  # cpack (dpkg-shlibdeps), systemd-analyze verify, pgrep in tests
  debootstrap systemd-container bc  # tests/systemd/boot_test.sh: a Debian root, systemd-nspawn -b, timings
  gdb  # a hung tensorfs's threads' backtraces in a test's failure (tests/support/daemon_check.h)
  umoci  # packaging/build-gke-image.sh: the GKE sidecar image as an OCI archive (tests/packaging/gke_image_test.py)
  "$@"
)
# tests/gguf installs node-llama-cpp with npm (install_node_deps.sh): Debian's nodejs and npm,
# unless a node and an npm are already there (NodeSource's nodejs package carries its own npm,
# and Debian's npm package would conflict with it).
if ! command -v npm >/dev/null 2>&1; then
  packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "installed" ]] || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "install-deps: run as root to install: ${missing[*]}" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
