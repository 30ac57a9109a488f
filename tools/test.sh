#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, and runs every
# test (unit, property, multi-process, GPU tests skipped visibly where no GPU
# is present, each scenario, a fixed-seed swarm, the Python module's pytest
# files), then the tests whose code the release build cannot vouch for
# (emulator, real processes, commands: memory ownership) again under
# AddressSanitizer + UndefinedBehaviorSanitizer. Quiet on success: one line a
# stage; the full log of a failing stage.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="$(nproc 2>/dev/null || echo 2)"
mkdir -p build-logs

# Runs a stage with its output in build-logs/<name>.log; prints the log's
# tail and stops on failure.
# Each stage's wall time, for the closing line (CI's budget is 20 minutes).
stage_times=""
took() { stage_times="$stage_times $1 $(($2 / 60))m$(($2 % 60))s,"; }
stage() {
  local name="$1"; shift
  local log="build-logs/$name.log" started="$SECONDS"
  if ! "$@" >"$log" 2>&1; then
    tail -n 150 "$log"
    echo "test.sh: stage '$name' failed; full log: $log" >&2
    exit 1
  fi
  took "$name" $((SECONDS - started))
}

# ctest with its summary shown: the skipped GPU tests are named, so a run
# without a GPU says so.
run_ctest() {
  local dir="$1" name="$2" started="$SECONDS"
  if ! ctest --test-dir "$dir" -j"$jobs" --output-on-failure --timeout 900 >"build-logs/$name.log" 2>&1; then
    # The summary alone does not say why: the failing tests run again, one
    # at a time, and their own output is shown (and whether they failed
    # again, which tells a flaky test from a broken one).
    tail -n 40 "build-logs/$name.log"
    echo "test.sh: the failing tests again, alone, with their output:" >&2
    ctest --test-dir "$dir" --rerun-failed --output-on-failure --timeout 900 >"build-logs/$name-rerun.log" 2>&1 || true
    tail -n 200 "build-logs/$name-rerun.log"
    echo "test.sh: stage '$name' failed; full logs: build-logs/$name.log, build-logs/$name-rerun.log" >&2
    exit 1
  fi
  took "$name" $((SECONDS - started))
  local log="build-logs/$name.log" skipped
  skipped="$(grep -c '\*\*\*Skipped' "$log" || true)"
  grep -E 'tests passed' "$log"
  if [ "$skipped" -gt 0 ]; then
    echo "[$name] $skipped skipped (each says why in $log; a GPU test needs a GPU):" \
      "$(grep '\*\*\*Skipped' "$log" | sed -E 's/.*Test +#[0-9]+: ([^ ]+) .*/\1/' | tr '\n' ' ')"
  fi
}

# What engramlab names in /tmp, /dev/shm and /run (socket directories,
# segments, test scratch), one path a line.
engramlab_paths() {
  find /tmp /dev/shm /run -maxdepth 1 -name 'engramlab*' 2>/dev/null | sort
}
paths_before="$(engramlab_paths)"

# Both builds compile with line tables (-g1: file and line in every backtrace
# and sanitizer report) instead of full debug info, which makes each compile
# about a third dearer (docs/perf_notes.md, "CI time").

# Each test file is compiled once a run, in one of the two builds
# (tests/CMakeLists.txt, ENGRAM_TEST_BINARIES): every case runs in one of
# them.
# 1. Release build and its suite: core_tests (plans, layouts, names: values
# from values), cli_tests (what each command prints and exits with, through
# the built binary; the hostile inputs of input_tests run sanitized below),
# unsanitized_tests (the files whose cases skip under the
# sanitizers: memory peaks and limits; and ENGRAM_RELEASE_BUILD_TESTS, what
# long emulator runs print), the emulated driver's tests, the GPU
# tests (skipped without a GPU) and a ctest test per scenario file; with the
# CUDA parts, the benchmarks and the Python module, which the sanitizer build
# leaves out. Both builds compile the tests with one shared precompiled
# header (ENGRAM_TEST_PCH: faster from cold) and the libraries in unity
# batches (ENGRAM_UNITY_BUILD: the heavy headers parsed once a batch).
# Both builds compile the libraries and commands at -O1 (a third less CPU
# than -O2 for a compile, docs/perf_notes.md "CI time"; the release build is
# CI's, not what users run: tools/setup.sh and tools/run.sh build their own)
# and the test sources at -O0 (ENGRAM_TEST_OPTIMIZATION): the suites spend
# their time in the code under test, not in the tests' own.
# The GPU probes of benchmarks/ are left to the GPU machines, which build
# what they run (tools/lib/gpu_build.sh): CI has no GPU to run them on.
stage setup tools/setup.sh build -DENGRAM_TEST_PCH=ON -DENGRAM_UNITY_BUILD=ON -DENGRAM_BUILD_GPU_PROBES=OFF \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DENGRAM_TEST_OPTIMIZATION=-O0 \
  -DENGRAM_TEST_BINARIES="core_tests;cli_tests;unsanitized_tests"
run_ctest build ctest

# 2. Under ASan + UBSan, the binaries of the layers that own memory and start
# processes: the emulator's (sim_tests), the real processes'
# (real_process_tests), hostile input through the binary (input_tests:
# random YAML, raw bytes, sizes past 64 bits), and each scenario once more.
# The other command tests (cli_tests) ran in the release build: under the
# sanitizers each case starts engramlab several times, which cost 142 s of
# the suite's 537 s of test time (docs/perf_notes.md, "CI time").
# The code under test at -O1 (the suite 5m52s instead of 8m39s at -O0), with
# the three UBSan checks that made -O1 compiles dearest left out
# (ENGRAM_SANITIZE_SKIP; CMakeLists.txt says why each may go).
stage setup-asan tools/setup.sh build-asan -DENGRAM_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" -DENGRAM_TEST_OPTIMIZATION=-O0 -DENGRAM_SANITIZE_SKIP=null,alignment,vptr \
  -DENGRAM_BUILD_BENCHMARKS=OFF -DENGRAM_TEST_PCH=ON -DENGRAM_UNITY_BUILD=ON \
  -DENGRAM_TEST_BINARIES="sim_tests;real_process_tests;input_tests;status_contract_test"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  run_ctest build-asan ctest-asan

# 3. The swarm through the CLI (release build), past the seeds that ctest's
# Swarm.FixedSeedSweepHoldsEveryInvariantDeterministically ran
# (harness::kEverySiteSweepSeeds, 500): each seed once a build. The scenarios
# ran in ctest (Scenario.*), one test a file.
stage fuzz build/apps/engramlab fuzz --seeds 1500 --seed 501 --check-determinism
tail -n 1 build-logs/fuzz.log | sed "s/^/[fuzz] /"

# 4. The Python module (python/, built by the release build): its pytest
# files (tests/python) against build/python. pytest's exit 5 (no test
# collected) is a failure like any other; GPU tests are skipped by name
# without a GPU.
python_tests() {
  if [ ! -f build/python/python_env.sh ]; then
    echo "the release build has no Python module (no build/python/python_env.sh): its configure found no pybind11" \
      "or no Python headers (tools/setup.sh installs pybind11-dev and python3-dev)"
    return 1
  fi
  . build/python/python_env.sh
  PYTHONPATH="$PWD/build/python" "$ENGRAM_PYTHON" -m pytest -q -rs -p no:cacheprovider tests/python &&
    # The README's `pytest scenarios/`: every scenario file collected as a
    # test through the plugin (each file ran once in ctest, Scenario.*; the
    # plugin's runs and failures are tests/python/test_pytest_plugin.py's).
    PYTHONPATH="$PWD/build/python" "$ENGRAM_PYTHON" -m pytest -q --collect-only -p no:cacheprovider scenarios/ \
      >build-logs/python-scenarios.log 2>&1 || { cat build-logs/python-scenarios.log; return 1; }
  local files collected
  files="$(find scenarios -maxdepth 1 -name '*.yaml' | wc -l)"
  collected="$(grep -cE '^scenarios/.+::' build-logs/python-scenarios.log || true)"
  if [ "$collected" -ne "$files" ]; then
    echo "pytest scenarios/ collected $collected tests for $files scenario files:"; cat build-logs/python-scenarios.log
    return 1
  fi
}
stage python python_tests
echo "[python] tests/python: $(tail -n 1 build-logs/python.log | sed 's/^=* *//; s/ *=*$//')" \
  "(skipped ones say why in build-logs/python.log); pytest scenarios/:" \
  "$(tail -n 1 build-logs/python-scenarios.log | sed 's/^=* *//; s/ *=*$//'), one a file"

# 5. Installed like a library: the release build installed into a temporary
# prefix, a small engine-side consumer (tests/install_consumer) configured
# with find_package(engramlab) against it, built and run, and the installed
# `engramlab --version`. The prefix is removed, passing or failing.
install_check() {
  local dir version rc=0
  dir="$(mktemp -d "${TMPDIR:-/tmp}/install-check.XXXXXX")"
  . build/python/python_env.sh
  cmake --install build --prefix "$dir/prefix" &&
    cmake -S tests/install_consumer -B "$dir/consumer" -DCMAKE_PREFIX_PATH="$dir/prefix" &&
    cmake --build "$dir/consumer" -j"$jobs" &&
    "$dir/consumer/install_consumer" &&
    version="$("$dir/prefix/bin/engramlab" --version)" &&
    (cd "$dir" && PYTHONPATH="$dir/prefix/$ENGRAM_PYTHON_INSTALL_DIR" "$ENGRAM_PYTHON" -c "
import engramlab
assert engramlab.__file__.startswith('$dir/prefix/'), engramlab.__file__
assert engramlab.cli_path == '$dir/prefix/bin/engramlab', engramlab.cli_path
print(engramlab.plan({'hosts': [{'name': 'h', 'gpus': 4, 'gpu_model': 'GB200', 'shm_size': '190GiB'}],
                      'layout': {'tp': 1, 'dp': 4}, 'config': {'cpu_offload': True}})['ranks'][0]['placement'])
" >"$dir/python.out") || rc=$?
  rm -rf "$dir"
  if [ "$rc" -ne 0 ]; then return "$rc"; fi
  echo "consumer built against the installed tree with find_package(engramlab) and run; the installed Python" \
    "package imported and planned; installed: $version"
}
stage install install_check
echo "[install] $(tail -n 1 build-logs/install.log)"

# 6. Nothing left behind: every test, scenario and run removes its sockets,
# socket directories and segments, passing or failing. (Paths that were
# there before this script started are not ours to judge.)
left_behind() {
  local left
  left="$(comm -13 <(printf '%s\n' "$paths_before") <(engramlab_paths) | sed '/^$/d')"
  if [ -n "$left" ]; then
    echo "left behind after the suite:"
    printf '%s\n' "$left" | while read -r p; do ls -ld "$p"; done
    return 1
  fi
  echo "nothing left in /tmp, /dev/shm or /run"
}
stage leftovers left_behind
echo "[leftovers] $(tail -n 1 build-logs/leftovers.log)"

# One closing line over every stage (ctest counts skipped tests as passed;
# they are subtracted and shown apart; the fuzz and install stages count one
# each).
total_tests=0; total_failed=0; total_skipped=0
for log in build-logs/ctest.log build-logs/ctest-asan.log; do
  n="$(grep -E 'tests passed' "$log" | sed -E 's/.* out of ([0-9]+).*/\1/')"
  f="$(grep -E 'tests passed' "$log" | sed -E 's/.*, ([0-9]+) tests failed.*/\1/')"
  s="$(grep -c '\*\*\*Skipped' "$log" || true)"
  total_tests=$((total_tests + n)); total_failed=$((total_failed + f)); total_skipped=$((total_skipped + s))
done
python_passed="$(tail -n 1 build-logs/python.log | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+' || echo 0)"
python_skipped="$(tail -n 1 build-logs/python.log | grep -oE '[0-9]+ skipped' | grep -oE '[0-9]+' || echo 0)"
total_skipped=$((total_skipped + python_skipped))
echo "total: $((total_tests - total_failed - total_skipped + python_skipped + python_passed + 2)) passed, $total_failed failed, $total_skipped skipped"
echo "time: $((SECONDS / 60))m$((SECONDS % 60))s in all;${stage_times%,}"
