#!/usr/bin/env bash
# On a GPU machine, the device placements against the one-process kernels
# at the one-layer V4.1 size, run after run, in one call: builds engramlab and
# benchmarks/table_memory_probe (tools/lib/gpu_build.sh), runs the probe
# (gather_peer over each kind of device memory, cycled twice; PROBE=0 skips
# it), then `bench --placements $PLACEMENTS` (default
# device_peer,device_collective) once for each number of id draws in DRAWS
# (default "8 8 8"), REPLAYS replays each (default 200, bench's own) and
# `--reference-order $ORDER` (default both), so the run-to-run spread of the
# ratios shows.
# Logs to $OUT (or build-gpu/out); prints each run's ratios.
set -uo pipefail
cd "$(dirname "$0")/.."
. tools/lib/gpu_script.sh
draws_list="${DRAWS:-8 8 8}"
replays="${REPLAYS:-200}"
placements="${PLACEMENTS:-device_peer,device_collective}"
order="${ORDER:-both}"
. tools/lib/gpu_build.sh
gpu_build ratio_runs engramlab table_memory_probe || exit 1
lab="$PWD/$build/apps/engramlab"

probe_rc=127
if [ "${PROBE:-1}" = 1 ] && [ -x "$build/benchmarks/table_memory_probe" ]; then
  timeout 200 "$build/benchmarks/table_memory_probe" "$replays" > "$out/table_memory_probe.txt" 2>&1
  probe_rc=$?
  cat "$out/table_memory_probe.txt"
fi
echo "ratio_runs: probe rc $probe_rc at $(elapsed) s"

run=0
for draws in $draws_list; do
  run=$((run + 1))
  [ $(( 570 - $(elapsed) )) -gt 45 ] || { echo "ratio_runs: no time left for run $run"; break; }
  timeout $(( 570 - $(elapsed) )) "$lab" launch -n 1 -- "$lab" bench --model deepseek-v4.1-flash-layer1 \
    --placements "$placements" --replays "$replays" --id-draws "$draws" --reference-order "$order" \
    --csv "$out/bench_$run.csv" \
    --svg "$out/bench_$run.svg" > "$out/bench_$run.txt" 2> "$out/bench_$run.err"
  echo "ratio_runs: bench run $run (--id-draws $draws) rc $? at $(elapsed) s"
  grep -A9 "runtime / one-process" "$out/bench_$run.txt"
done
# On the device machine ($OUT set) the logs come back as one archive: it
# returns only so many files.
if [ -n "${OUT:-}" ]; then
  tar -czf "$build/ratio_runs_logs.tgz" -C "$out" . && find "$out" -mindepth 1 -delete &&
    mv "$build/ratio_runs_logs.tgz" "$out/logs.tgz"
fi
