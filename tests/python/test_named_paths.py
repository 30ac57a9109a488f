"""tools/check_named_paths.py: the clone passes, and a planted stale path in
a comment or a doc fails, named by file and line; string literals, upstream
paths and placeholders are not paths of the clone."""

import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
CHECK = REPO / "tools" / "check_named_paths.py"


def run_check(root):
    return subprocess.run([sys.executable, str(CHECK), str(root)], capture_output=True, text=True)


def test_the_clone_names_only_paths_that_exist():
    result = run_check(REPO)
    assert result.returncode == 0, result.stdout


def small_clone(tmp_path, files):
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_a_stale_path_in_a_comment_or_a_doc_fails_with_file_and_line(tmp_path):
    root = small_clone(tmp_path, {
        "core/base/units.h": "// Sizes: see core/base/units.cc and core/base/gone.h\n",
        "core/base/units.cc": "int x;\n",
        "docs/reference.md": "Intro.\nRead docs/missing.md first.\n",
    })
    result = run_check(root)
    assert result.returncode == 1
    assert "core/base/units.h:1: core/base/gone.h" in result.stdout
    assert "docs/reference.md:2: docs/missing.md" in result.stdout
    assert "core/base/units.cc" not in result.stdout.split("\n", 1)[1]
    assert result.stdout.startswith("2 named paths")


def test_literals_upstream_paths_and_placeholders_are_not_checked(tmp_path):
    root = small_clone(tmp_path, {
        "tests/a_test.cc": 'auto p = "scenarios/not_here.yaml";\n'
                           "// vLLM's tests/distributed/test_engram_dp_shard.py\n"
                           "// core/placements/<name>.{h,cc} and scenarios/x.yaml\n",
        "docs/guide.md": "engramlab fuzz --emit-scenario 3 > scenarios/seed3.yaml\n",
    })
    result = run_check(root)
    assert result.returncode == 0, result.stdout
