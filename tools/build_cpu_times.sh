#!/usr/bin/env bash
# CPU time (user + sys) of a clean build, per compiled file and per link, and
# in total: the figures docs/perf_notes.md ("CI time") compares. CPU time,
# not wall time, because the build machines are shared and contention
# inflates wall time far more than CPU time.
#
#   tools/build_cpu_times.sh <new build dir> [extra cmake arguments]
#   tools/build_cpu_times.sh --summary <build dir>
#
# Configures as tools/setup.sh does (RelWithDebInfo unless the arguments say
# otherwise), with ccache off and this script as the compiler and linker
# launcher, builds with -j$(nproc), and prints the summary: the 25 dearest
# files, totals by folder, the links, and the whole build (which also counts
# what no launcher sees: archiving, test discovery, CMake itself).
set -euo pipefail

if [ "${1:-}" = "--launch" ]; then
  # Launcher mode: time one compiler or linker command, logging
  # "user_s sys_s wall_s max_rss_kib output" to $ENGRAM_TIME_LOG, the
  # output's path as the build dir's Makefiles give it: from the folder
  # the command runs in.
  shift
  out="" prev=""
  for a in "$@"; do
    [ "$prev" = "-o" ] && out="$a"
    prev="$a"
  done
  case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
  exec /usr/bin/time -a -o "$ENGRAM_TIME_LOG" -f "%U %S %e %M $out" "$@"
fi

summary() {
  local dir="$1"
  python3 - "$dir" <<'PY'
import collections, os, sys
d = sys.argv[1]
rows = []
for line in open(os.path.join(d, "cpu_times.log")):
    p = line.split()
    if len(p) < 5 or not p[0].replace(".", "").isdigit():
        continue  # /usr/bin/time's "Command exited with non-zero status" lines
    out = p[4]
    rows.append((float(p[0]) + float(p[1]), float(p[2]), int(p[3]), os.path.relpath(out, d) if out.startswith("/") else out))

# Each target's folder, for outputs logged without one (a name alone).
folder_of = {}
for root, dirs, _ in os.walk(d):
    if os.path.basename(root) == "CMakeFiles":
        for x in dirs:
            if x.endswith(".dir"):
                folder_of[x[:-4]] = os.path.relpath(os.path.dirname(root), d)

def area(out):
    parts = out.split("/")
    if "CMakeFiles" in parts:
        # <folder>/CMakeFiles/<target>.dir/...
        i = parts.index("CMakeFiles")
        folder = "/".join(parts[:i]) if i > 0 else folder_of.get(parts[i + 1][:-4], "?")
    else:
        folder = "/".join(parts[:-1]) if len(parts) > 1 else folder_of.get(parts[0], "?")
    return folder.split("/")[0]

def is_compile(out):
    return out.endswith(".o") or out.endswith(".obj")

comp = [r for r in rows if is_compile(r[3])]
links = [r for r in rows if not is_compile(r[3])]
print(f"{len(comp)} compiles, CPU {sum(r[0] for r in comp):.0f} s; {len(links)} links, CPU {sum(r[0] for r in links):.0f} s")
print("\ntop 25 compiles (CPU s, peak RSS MiB, file):")
for cpu, wall, rss, out in sorted(comp, reverse=True)[:25]:
    print(f"  {cpu:7.1f} {rss // 1024:6d}  {out}")
print("\nby folder: compiles (n, CPU s), links (n, CPU s):")
c = collections.defaultdict(lambda: [0, 0.0, 0, 0.0])
for cpu, _, _, out in comp:
    c[area(out)][0] += 1; c[area(out)][1] += cpu
for cpu, _, _, out in links:
    c[area(out)][2] += 1; c[area(out)][3] += cpu
for k, v in sorted(c.items(), key=lambda kv: -(kv[1][1] + kv[1][3])):
    print(f"  {k:18s} {v[0]:4d} {v[1]:8.1f}   {v[2]:4d} {v[3]:7.1f}")
print("\ntop 10 links (CPU s, peak RSS MiB, file):")
for cpu, wall, rss, out in sorted(links, reverse=True)[:10]:
    print(f"  {cpu:7.1f} {rss // 1024:6d}  {out}")
total = os.path.join(d, "cpu_times.total")
if os.path.exists(total) and open(total).read().split():
    u, s, e = open(total).read().split()[:3]
    print(f"\nwhole build: CPU {float(u) + float(s):.0f} s (user {u}, sys {s}), wall {e} s")
PY
}

if [ "${1:-}" = "--summary" ]; then
  summary "$2"
  exit 0
fi

cd "$(dirname "$0")/.."
dir="${1:?usage: tools/build_cpu_times.sh <new build dir> [cmake arguments]}"
shift
if [ -e "$dir" ]; then
  echo "build_cpu_times: $dir exists; give a new folder (a clean build is what is measured)" >&2
  exit 2
fi
self="$PWD/tools/build_cpu_times.sh"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" \
  "-DCCACHE_PROGRAM=$self;--launch" "-DCMAKE_CXX_LINKER_LAUNCHER=$self;--launch" \
  "-DCMAKE_CUDA_LINKER_LAUNCHER=$self;--launch" >"$dir.configure.log" 2>&1 ||
  { cat "$dir.configure.log" >&2; exit 1; }
CCACHE_DISABLE=1 ENGRAM_TIME_LOG="$dir/cpu_times.log" \
  /usr/bin/time -o "$dir/cpu_times.total" -f "%U %S %e" \
  cmake --build "$dir" -j"$(nproc 2>/dev/null || echo 2)" >"$dir.build.log" 2>&1 ||
  { tail -50 "$dir.build.log" >&2; exit 1; }
summary "$dir"
