#!/usr/bin/env python3
"""CPU time (user + sys, the test's process and every process it waited
for) of each ctest test of a build dir, run as ctest runs it: the same
command, working directory and environment properties, its own process
group, N tests at a time. The figures docs/perf_notes.md ("CI time")
compares.

  tools/test_cpu_times.py <build dir> [-j N] [-o times.tsv] [-R regex]
  tools/test_cpu_times.py <build dir A> --compare <build dir B> [...]

Run it with the environment the suite gets (tools/test.sh sets ASAN_OPTIONS
and UBSAN_OPTIONS for the sanitizer build). Prints the 25 dearest tests,
the totals per test binary and in all; writes every test's figures to -o.

With --compare, each test that both build dirs have runs in A and then in
B (B first for every other test), so that both see the same load: on a
shared virtual machine the CPU time of the same work moves by a fifth or
more with the load, and only runs side by side compare.
"""
import argparse
import collections
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import time


def ctest_tests(build_dir):
    out = subprocess.run(["ctest", "--test-dir", build_dir, "-N", "--show-only=json-v1"], check=True,
                         capture_output=True, text=True).stdout
    for t in json.loads(out)["tests"]:
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        yield t["name"], t["command"], props


def run_test(command, props, default_timeout):
    """(cpu_s, wall_s, exit code, skipped) of one test."""
    env = dict(os.environ)
    for kv in props.get("ENVIRONMENT", []) or []:
        k, _, v = kv.partition("=")
        env[k] = v
    timeout = float(props.get("TIMEOUT", default_timeout) or default_timeout)
    start = time.monotonic()
    with open(os.devnull, "wb") as devnull:
        # Its own process group, as ctest gives each test (tests signal
        # their own group).
        p = subprocess.Popen(command, cwd=props.get("WORKING_DIRECTORY"), env=env, stdin=subprocess.DEVNULL,
                             stdout=devnull, stderr=devnull, process_group=0)
        deadline = start + timeout
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                p.kill()
                pid, status, ru = os.wait4(p.pid, 0)
                break
            time.sleep(0.02)
    p.returncode = os.waitstatus_to_exitcode(status)
    skip = props.get("SKIP_RETURN_CODE")
    return (ru.ru_utime + ru.ru_stime, time.monotonic() - start, p.returncode,
            skip is not None and p.returncode == int(skip))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build_dir")
    ap.add_argument("--compare", default=None, help="a second build dir, each test run in both side by side")
    ap.add_argument("-j", type=int, default=os.cpu_count() or 2)
    ap.add_argument("-o", default=None)
    ap.add_argument("-R", default=None, help="only tests whose name matches")
    ap.add_argument("--timeout", type=float, default=900)
    args = ap.parse_args()
    dirs = [args.build_dir] + ([args.compare] if args.compare else [])
    # Keyed by the name without gtest's "  # GetParam() = ..." tail, which can
    # print addresses that differ between builds.
    by_dir = [{name.split("  # GetParam()")[0]: (command, props) for name, command, props in ctest_tests(d)}
              for d in dirs]
    names = [n for n in by_dir[0] if all(n in b for b in by_dir) and (not args.R or re.search(args.R, n))]
    one_side = set(by_dir[0]) ^ set(by_dir[-1])  # tests only one of the two build dirs has

    def run(indexed):
        i, name = indexed
        order = list(range(len(dirs)))
        if i % 2:
            order.reverse()
        got = [None] * len(dirs)
        for d in order:
            command, props = by_dir[d][name]
            got[d] = run_test(command, props, args.timeout)
        return name, by_dir[0][name][0][0].split("/")[-1], got

    rows = []
    with concurrent.futures.ThreadPoolExecutor(args.j) as pool:
        for r in pool.map(run, enumerate(names)):
            rows.append(r)
    if args.o:
        with open(args.o, "w") as f:
            f.write("test\tbinary" + "".join(f"\tcpu_s[{d}]\twall_s[{d}]\texit[{d}]" for d in dirs) + "\n")
            for name, binary, got in rows:
                f.write(f"{name}\t{binary}" + "".join(f"\t{c:.2f}\t{w:.2f}\t{rc}" for c, w, rc, _ in got) + "\n")
    status = 0
    for d, label in enumerate(dirs):
        failed = [name for name, _, got in rows if got[d][2] != 0 and not got[d][3]]
        status |= bool(failed)
        print(f"{label}: {len(rows)} tests, CPU {sum(g[d][0] for _, _, g in rows):.0f} s, "
              f"wall sum {sum(g[d][1] for _, _, g in rows):.0f} s; {len(failed)} exited non-zero"
              + (": " + " ".join(failed[:20]) if failed else ""))
    if args.compare and one_side:
        print(f"not compared (in one build dir only): {len(one_side)} tests: " + " ".join(sorted(one_side)[:10]))
    header = "  ".join(f"CPU s [{d}]" for d in dirs)
    print(f"\ntop 25 tests ({header}, wall s [{dirs[0]}]):")
    for name, _, got in sorted(rows, key=lambda r: -r[2][0][0])[:25]:
        print("  " + " ".join(f"{g[0]:7.1f}" for g in got) + f" {got[0][1]:7.1f}  {name}")
    per = collections.defaultdict(lambda: [0] + [0.0] * len(dirs))
    for _, binary, got in rows:
        per[binary][0] += 1
        for d in range(len(dirs)):
            per[binary][d + 1] += got[d][0]
    print(f"\nby binary (tests, {header}), top 25:")
    for b, v in sorted(per.items(), key=lambda kv: -kv[1][1])[:25]:
        print(f"  {b:40s} {v[0]:4d} " + " ".join(f"{x:8.1f}" for x in v[1:]))
    return status


if __name__ == "__main__":
    sys.exit(main())
