#!/usr/bin/env python3
"""Every repository path named in a comment or a doc exists.

Scans the tracked sources, scripts and docs for words that start with one of
the repository's top-level folders (core/..., docs/..., tests/...) and fails,
listing file:line and the path, for each one that names nothing in the clone.
In code only comments are read (string literals there are test data); docs
are read whole. Not paths of this clone: words with a wildcard or a
placeholder (*, <name>, {h,cc}, NN, one-letter names like x.yaml), a
command's output after `>`, and paths on a line that names an engine or
library (vLLM, SGLang, NCCL: or in the four lines before), which are that
repository's. tests/python/test_named_paths.py runs it on the clone and on planted
mistakes.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
TOP = sorted(d for d in os.listdir(ROOT) if os.path.isdir(os.path.join(ROOT, d)) and not d.startswith(".")
             and not d.startswith("build") and os.path.exists(os.path.join(ROOT, d, ".")))
SCANNED = re.compile(r"(\.(md|cc|h|cu|cuh|cmake|sh|py|yaml|txt|toml)|CMakeLists\.txt|/run)$")
WORD = re.compile(r"(?<![A-Za-z0-9_./-])((?:%s)/[A-Za-z0-9_.+/-]*[A-Za-z0-9_])" % "|".join(map(re.escape, TOP)))
PLACEHOLDER = re.compile(r"[*<>{}]|\.\.\.|(^|[/_.-])(NN|N|X|XX|name|NAME|FILE|file_name)([/_.-]|$)|/[A-Za-z](\.[a-z]+)?$")
UPSTREAM = re.compile(r"vllm|sglang|nccl|pytorch|torch/", re.IGNORECASE)
CODE = re.compile(r"\.(cc|h|cu|cuh)$")
HASH_COMMENTS = re.compile(r"(\.(cmake|sh|py|yaml|toml)|CMakeLists\.txt|/run)$")


def comment_text(rel, line, in_block):
    """The part of `line` a reader sees as prose: all of a doc, a code file's comments."""
    if CODE.search(rel):
        text = ""
        if in_block:
            end = line.find("*/")
            if end < 0:
                return line, True
            text, line, in_block = line[:end], line[end + 2:], False
        at = line.find("//")
        start = line.find("/*")
        if start >= 0 and (at < 0 or start < at):
            end = line.find("*/", start + 2)
            if end < 0:
                return text + line[start:], True
            return text + line[start:end], False
        return (text + line[at:] if at >= 0 else text), in_block
    if HASH_COMMENTS.search(rel):
        at = line.find("#")
        return (line[at:] if at >= 0 else ""), False
    return line, False


def tracked_files():
    try:
        out = subprocess.run(["git", "-C", ROOT, "ls-files"], check=True, capture_output=True, text=True).stdout
        return [f for f in out.splitlines() if SCANNED.search(f)]
    except (OSError, subprocess.CalledProcessError):
        found = []
        for base, dirs, files in os.walk(ROOT):
            dirs[:] = [d for d in dirs if not d.startswith((".", "build"))]
            found += [os.path.relpath(os.path.join(base, f), ROOT) for f in files if SCANNED.search(f)]
        return found


def exists(path):
    if os.path.exists(os.path.join(ROOT, path)):
        return True
    # A path named with the extension left off (core/base/status: the .h/.cc pair).
    # A built binary named by its source (tests/host_worker: host_worker_main.cc).
    parent, stem = os.path.split(os.path.join(ROOT, path))
    return os.path.isdir(parent) and any(f.startswith((stem + ".", stem + "_main.")) for f in os.listdir(parent))


def main():
    missing = []
    for rel in tracked_files():
        try:
            with open(os.path.join(ROOT, rel), encoding="utf-8", errors="replace") as f:
                lines = f.readlines()
        except OSError:
            continue
        in_block = False
        for number, whole_line in enumerate(lines, 1):
            line, in_block = comment_text(rel, whole_line, in_block)
            nearby = "".join(lines[max(0, number - 5):number])
            for match in WORD.finditer(line):
                path = match.group(1).rstrip(".")
                after = line[match.end(1):match.end(1) + 1]
                before = line[:match.start(1)].rstrip()
                if PLACEHOLDER.search(path) or after in ("*", "<", "{") or before.endswith(">"):
                    continue
                if UPSTREAM.search(nearby):
                    continue
                if not exists(path):
                    missing.append(f"{rel}:{number}: {path}")
    if missing:
        print(f"{len(missing)} named paths that do not exist in the clone (fix the text or the path):")
        print("\n".join(missing))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
