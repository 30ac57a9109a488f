#!/usr/bin/env python3
"""CPU time (user + sys, the test's process and every process it waited
for) of each ctest test of a build dir, run as ctest runs it: the same
command, working directory and environment properties, N at a time. The
figures docs/perf_notes.md ("CI time") compares: CPU time, because the
machines are shared and contention inflates wall time far more.

  tools/test_cpu_times.py <build dir> [-j N] [-o times.tsv] [-R regex]

Run it with the environment the suite gets (tools/test.sh sets ASAN_OPTIONS
and UBSAN_OPTIONS for the sanitizer build). Prints the 25 dearest tests,
the totals per test binary and in all; writes every test's figures to -o.
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build_dir")
    ap.add_argument("-j", type=int, default=os.cpu_count() or 2)
    ap.add_argument("-o", default=None)
    ap.add_argument("-R", default=None, help="only tests whose name matches")
    ap.add_argument("--timeout", type=float, default=900)
    args = ap.parse_args()
    tests = [t for t in ctest_tests(args.build_dir) if not args.R or re.search(args.R, t[0])]

    def run(t):
        name, command, props = t
        env = dict(os.environ)
        for kv in props.get("ENVIRONMENT", []) or []:
            k, _, v = kv.partition("=")
            env[k] = v
        timeout = float(props.get("TIMEOUT", args.timeout) or args.timeout)
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
        return (name, command[0].split("/")[-1], ru.ru_utime + ru.ru_stime, time.monotonic() - start,
                p.returncode, skip is not None and p.returncode == int(skip))

    rows = []
    with concurrent.futures.ThreadPoolExecutor(args.j) as pool:
        for r in pool.map(run, tests):
            rows.append(r)
    if args.o:
        with open(args.o, "w") as f:
            f.write("test\tbinary\tcpu_s\twall_s\texit\n")
            for name, binary, cpu, wall, rc, _ in rows:
                f.write(f"{name}\t{binary}\t{cpu:.2f}\t{wall:.2f}\t{rc}\n")
    failed = [r for r in rows if r[4] != 0 and not r[5]]
    print(f"{len(rows)} tests, CPU {sum(r[2] for r in rows):.0f} s, wall sum {sum(r[3] for r in rows):.0f} s; "
          f"{len(failed)} exited non-zero" + (": " + " ".join(r[0] for r in failed[:20]) if failed else ""))
    print("\ntop 25 tests (CPU s, wall s):")
    for name, binary, cpu, wall, rc, _ in sorted(rows, key=lambda r: -r[2])[:25]:
        print(f"  {cpu:7.1f} {wall:7.1f}  {name}")
    per = collections.defaultdict(lambda: [0, 0.0])
    for _, binary, cpu, *_ in rows:
        per[binary][0] += 1
        per[binary][1] += cpu
    print("\nby binary (tests, CPU s), top 25:")
    for b, (n, cpu) in sorted(per.items(), key=lambda kv: -kv[1][1])[:25]:
        print(f"  {b:40s} {n:4d} {cpu:8.1f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
