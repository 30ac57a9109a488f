#!/usr/bin/env bash
# The README's main command: installs what is missing, builds, and runs every
# scenario in scenarios/ on the emulator, showing the placement, warnings and
# errors of each (the table, then each warning and error in full). Extra arguments go to `engramlab scenario run`.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh build
if [ $# -eq 0 ]; then set -- --details scenarios/; fi
exec build/apps/engramlab scenario run "$@"
