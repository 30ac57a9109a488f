# Sourced by tools/setup.sh and tools/run.sh: the Debian packages engramlab
# builds with, and install_missing PACKAGE... (installs only what dpkg does
# not list as installed; apt-get, as root or through sudo).

# What the engramlab command alone needs (tools/run.sh: no tests, no CUDA
# parts, no benchmarks, no Python module).
engram_cli_packages=(cmake g++ make ccache libboost-dev libboost-system-dev libboost-context-dev libfmt-dev
                     libyaml-cpp-dev nlohmann-json3-dev libcli11-dev iproute2 util-linux mount hostname
                     lld)  # the linker, where present: faster links (CMakeLists.txt, ENGRAM_USE_LLD)
# Everything (tools/setup.sh, tools/test.sh): the CLI's, then the tests'.
engram_all_packages=("${engram_cli_packages[@]}" libgtest-dev libgmock-dev librapidcheck-dev libbenchmark-dev
                     python3-numpy   # numpy: the hash ids' reference vectors (tests/hashing_numpy_test.cc)
                     # The Python module (python/) and its tests (tests/python): torch for tensors through DLPack on the CPU.
                     pybind11-dev python3-dev python3-pytest python3-torch
                     librsvg2-bin)   # rsvg-convert: renders the SVGs the tests write (tests/plan_step_time_test.cc)

install_missing() {
  local missing=() p
  if command -v dpkg-query >/dev/null 2>&1; then
    for p in "$@"; do
      dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
  fi
  [ ${#missing[@]} -eq 0 ] && return 0
  if command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing ${missing[*]}" >&2
    local sudo_cmd=""
    [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "setup: missing ${missing[*]} and no apt-get; install them by hand" >&2
  fi
}
