#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, and runs every
# test (unit, property, multi-process, scenarios, swarm), then the same suite
# under AddressSanitizer + UndefinedBehaviorSanitizer. Quiet on success.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="$(nproc 2>/dev/null || echo 2)"

tools/setup.sh build
ctest --test-dir build -j"$jobs" --output-on-failure --timeout 600 2>&1 | tail -n 3
