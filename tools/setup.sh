#!/usr/bin/env bash
# Installs the Debian packages engramlab builds with (only what is missing),
# then configures and builds into $1 (default: build) with any extra CMake
# arguments after it. Safe to run again: a finished build is reused.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${1:-build}"
shift || true

. tools/lib/packages.sh
install_missing "${engram_all_packages[@]}"

jobs="$(nproc 2>/dev/null || echo 2)"
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >"$build_dir.configure.log" 2>&1 ||
    { cat "$build_dir.configure.log" >&2; exit 1; }
fi
cmake --build "$build_dir" -j"$jobs" >"$build_dir.build.log" 2>&1 || { tail -50 "$build_dir.build.log" >&2; exit 1; }
