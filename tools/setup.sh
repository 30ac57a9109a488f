#!/usr/bin/env bash
# Installs the Debian packages engramlab builds with (only what is missing),
# then configures and builds into $1 (default: build) with any extra CMake
# arguments after it. Safe to run again: a finished build is reused.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${1:-build}"
shift || true

packages=(cmake g++ make ccache libboost-dev libboost-system-dev libboost-context-dev libfmt-dev libgtest-dev
          libgmock-dev libyaml-cpp-dev nlohmann-json3-dev libcli11-dev librapidcheck-dev libbenchmark-dev iproute2
          util-linux mount hostname
          lld   # the linker, where present: faster links (CMakeLists.txt, ENGRAM_USE_LLD)
          python3-numpy   # numpy: the hash ids' reference vectors (tests/hashing_numpy_test.cc)
          # The Python module (python/) and its tests (tests/python): torch for tensors through DLPack on the CPU.
          pybind11-dev python3-dev python3-pytest python3-torch)
missing=()
if command -v dpkg-query >/dev/null 2>&1; then
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
fi
if [ ${#missing[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing ${missing[*]}" >&2
    sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "setup: missing ${missing[*]} and no apt-get; install them by hand" >&2
  fi
fi

jobs="$(nproc 2>/dev/null || echo 2)"
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >"$build_dir.configure.log" 2>&1 ||
    { cat "$build_dir.configure.log" >&2; exit 1; }
fi
cmake --build "$build_dir" -j"$jobs" >"$build_dir.build.log" 2>&1 || { tail -50 "$build_dir.build.log" >&2; exit 1; }
