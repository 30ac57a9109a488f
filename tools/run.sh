#!/usr/bin/env bash
# The main job: what each engine builds for a deployment and what it costs,
# then that deployment on the emulator under each engine and with faults
# drawn around it. Builds only the engramlab command first (build-run/),
# showing progress while it builds.
#
#   tools/run.sh                          the example: DEP8 over two GB300 nodes
#                                         (scenarios/deployments/dep8_gb300_two_nodes.yaml)
#   tools/run.sh my_cluster.yaml          your deployment file instead
#   tools/run.sh --from "vllm serve deepseek-ai/DeepSeek-V4.1-Flash -tp 1 -dp 8 ..."
#                                         your engine's command line (flags of plan may follow)
#   tools/run.sh --seeds 50 ...           how many fault seeds to draw (default 16)
#   tools/run.sh --engramlab PATH ...     use that engramlab binary (e.g. build/apps/engramlab,
#                                         which tools/test.sh built) instead of building one
#   tools/run.sh --scenarios [ARGS...]    the built-in scenarios (scenarios/; ARGS go to
#                                         `engramlab scenario run`, default --details scenarios/)
#
# Why build-run/ and not build/: the first answer needs the command alone,
# so it is built without tests, CUDA parts, benchmarks or the Python module,
# at -O1 without debug info (about half the compile time of build/'s
# RelWithDebInfo; the emulator's runs here take well under a second either
# way), the libraries in unity batches (ENGRAM_UNITY_BUILD). tools/test.sh
# builds everything else, in build/.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; }

file="" from="" seeds=16 scenarios=0 plan_args=() given_bin=""
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --scenarios) scenarios=1; shift; break ;;
    --from) [ $# -ge 2 ] || { echo "run.sh: --from needs the engine's command line, quoted" >&2; exit 2; }
            from="$2"; shift 2 ;;
    --seeds) [ $# -ge 2 ] || { echo "run.sh: --seeds needs a number, e.g. --seeds 50" >&2; exit 2; }
             seeds="$2"; shift 2 ;;
    --engramlab) [ $# -ge 2 ] && [ -x "$2" ] || {
                   echo "run.sh: --engramlab needs an engramlab binary, e.g. --engramlab build/apps/engramlab" >&2; exit 2; }
                 given_bin="$2"; shift 2 ;;
    --*) # plan's own flags (e.g. --environment kubernetes): a word after one that is neither
         # a flag nor a file is its value
         plan_args+=("$1"); shift
         if [ $# -gt 0 ] && [ "${1#-}" = "$1" ] && [ ! -e "$1" ]; then plan_args+=("$1"); shift; fi ;;
    *) if [ -n "$file" ]; then plan_args+=("$1")
       elif [ -e "$1" ]; then file="$1"
       else echo "run.sh: '$1' is not a file; give a deployment file (YAML), --from \"COMMAND LINE\" or --scenarios" >&2
            exit 2
       fi
       shift ;;
  esac
done
if [ -n "$file" ] && [ -n "$from" ]; then
  echo "run.sh: give a deployment file or --from \"COMMAND LINE\", not both" >&2; exit 2
fi
if [ -z "$file" ] && [ -z "$from" ]; then file=scenarios/deployments/dep8_gb300_two_nodes.yaml; fi

build_dir=build-run
bin="$build_dir/apps/engramlab"
start=$(date +%s)
elapsed() { echo "$(( $(date +%s) - start )) s"; }

build_engramlab() {
  echo "run.sh: checking packages, then building the engramlab command alone into $build_dir/ (no tests, no CUDA parts;" \
       "a few minutes from a fresh clone on 2 cores, seconds once built)"

  . tools/lib/packages.sh
  install_missing "${engram_cli_packages[@]}"

  jobs="$(nproc 2>/dev/null || echo 2)"
  if [ ! -f "$build_dir/CMakeCache.txt" ]; then
    echo "run.sh: configuring $build_dir/ ($(elapsed))"
    cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" -DENGRAM_UNITY_BUILD=ON \
        -DENGRAM_BUILD_TESTS=OFF -DENGRAM_WITH_CUDA=OFF -DENGRAM_BUILD_BENCHMARKS=OFF -DENGRAM_BUILD_PYTHON=OFF \
        >"$build_dir.configure.log" 2>&1 || { cat "$build_dir.configure.log" >&2; exit 1; }
  fi

  # The build in the background, its progress every 10 s: make's percentage
  # and the file it is on.
  log="$build_dir.build.log"
  cmake --build "$build_dir" --target engramlab -j"$jobs" >"$log" 2>&1 &
  build_pid=$!
  trap 'kill "$build_pid" 2>/dev/null || true' EXIT INT TERM
  last="" quiet=0
  while kill -0 "$build_pid" 2>/dev/null; do
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      kill -0 "$build_pid" 2>/dev/null || break
      sleep 1
    done
    line="$(grep -E '^\[ *[0-9]+%\]' "$log" | tail -n 1 || true)"
    quiet=$((quiet + 1))
    if [ -z "$line" ] && [ "$quiet" -ge 2 ]; then
      echo "run.sh: building: the first files are compiling ($(elapsed))"; quiet=0
    elif [ -n "$line" ] && { [ "$line" != "$last" ] || [ "$quiet" -ge 3 ]; }; then
      quiet=0
      pct="$(sed -E 's/^\[ *([0-9]+%)\].*/\1/' <<<"$line")"
      what="$(sed -E 's/^.*(Building CXX object|Linking CXX executable|Linking CXX static library) //; s/\.o$//; s/CMakeFiles\/[^/]*\.dir\///' <<<"$line")"
      echo "run.sh: building $pct  $what ($(elapsed))"
      last="$line"
    fi
  done
  if ! wait "$build_pid"; then
    trap - EXIT INT TERM
    tail -n 40 "$log" >&2
    echo "run.sh: the build failed; full log: $log" >&2
    exit 1
  fi
  trap - EXIT INT TERM
  echo "run.sh: built $bin ($(elapsed))"
  echo
}
if [ -n "$given_bin" ]; then bin="$given_bin"; else build_engramlab; fi

if [ "$scenarios" -eq 1 ]; then
  [ $# -eq 0 ] && set -- --details scenarios/
  exec "$bin" scenario run "$@"
fi

rc=0
if [ -n "$from" ]; then
  echo "== what each engine builds for: $from"
  "$bin" plan --compare-engines --from "$from" ${plan_args[@]+"${plan_args[@]}"} || rc=$?
  # The emulator runs a deployment file: the pasted command line as one,
  # removed when this script ends.
  file="$(mktemp "${TMPDIR:-/tmp}/engramlab-from-command-line.XXXXXX.yaml")"
  trap 'rm -f "$file"' EXIT
  label="the command line's deployment"
  "$bin" plan --from "$from" ${plan_args[@]+"${plan_args[@]}"} --emit-deployment >"$file" 2>/dev/null || {
    echo "run.sh: the command line does not plan, so nothing runs on the emulator (exit $rc)"; exit "$rc"; }
else
  label="$file"
  echo "== what each engine builds for $file and what it costs"
  "$bin" plan --compare-engines --file "$file" ${plan_args[@]+"${plan_args[@]}"} || rc=$?
fi
echo
echo "== $label on the emulator under each engine's plan, $seeds seeds each: a seed draws the faults at the sites"
echo "   the plan reaches, the ranks' order and the timeouts; each run is checked (no leaks, one error kind, lookups right)"
"$bin" fuzz --file "$file" --compare-engines --seeds "$seeds" || rc=1
echo
echo "run.sh: done in $(elapsed). Your own deployment: tools/run.sh FILE.yaml (scenarios/README.md has the fields)," \
     "or tools/run.sh --from \"vllm serve ...\"; the built-in scenarios: tools/run.sh --scenarios"
exit "$rc"
