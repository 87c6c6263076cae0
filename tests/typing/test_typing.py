"""Typed tasks: mypy and pyright check enqueue calls, workflow steps
(``s``) and ``enqueue_many`` items (``args``) against the task.

``cases/positives.py`` must type-check cleanly (its ``assert_type`` calls pin the
types); every line of ``cases/negatives.py`` marked ``# expect: mypy[...] pyright[...]``
must raise exactly those errors and no line may raise others. pyright is basedpyright,
whose wheel brings its own Node.js (no download at run time), in pyright's "standard"
mode, the default of pyright and of editors using it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CASES = HERE / "cases"
EXPECT = re.compile(r"#\s*expect:\s*mypy\[(?P<mypy>[^\]]*)\]\s*pyright\[(?P<pyright>[^\]]*)\]")
MYPY_LINE = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+): error: .*\[(?P<code>[a-z-]+)\]$")

Found = dict[tuple[str, int], set[str]]


def expected(checker: str) -> Found:
    """``{(file name, line): {code, ...}}`` from the ``# expect:`` comments."""
    found: Found = {}
    for path in sorted(CASES.glob("*.py")):
        for number, text in enumerate(path.read_text().splitlines(), start=1):
            match = EXPECT.search(text)
            if match:
                found[(path.name, number)] = {
                    code.strip() for code in match[checker].split(",") if code.strip()
                }
    return found


def run(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=240,
                          check=False)


def test_the_cases_expect_errors_of_every_kind() -> None:
    # The negatives cover wrong types, missing and unexpected arguments, on sync, async
    # and using(...) calls, workflow steps (s, overloaded) and enqueue_many's items: a
    # file of expectations that lost them would pass vacuously.
    codes = set().union(*expected("mypy").values())
    assert {"arg-type", "call-arg", "assignment", "call-overload", "list-item"} <= codes
    assert expected("pyright").keys() == expected("mypy").keys()
    assert len(expected("pyright")) >= 30


def test_mypy_reports_exactly_the_expected_errors() -> None:
    result = run([sys.executable, "-m", "mypy", "--config-file", str(HERE / "mypy.ini"),
                  "--cache-dir", str(ROOT / ".mypy_cache" / "typing-cases"),
                  "--no-pretty", "--no-error-summary", str(CASES.relative_to(ROOT))])
    reported: Found = defaultdict(set)
    for line in result.stdout.splitlines():
        match = MYPY_LINE.match(line)
        if match:
            reported[(Path(match["path"]).name, int(match["line"]))].add(match["code"])
        else:
            assert ": note: " in line, f"unexpected mypy output: {line}\n{result.stderr}"
    assert dict(reported) == expected("mypy"), result.stdout


def test_pyright_reports_exactly_the_expected_errors() -> None:
    basedpyright = Path(sys.executable).parent / "basedpyright"
    result = run([str(basedpyright), "--outputjson", "-p", str(HERE / "pyrightconfig.json"),
                  "--pythonpath", sys.executable])
    report = json.loads(result.stdout)
    reported: Found = defaultdict(set)
    for diagnostic in report["generalDiagnostics"]:
        assert diagnostic["severity"] == "error", diagnostic
        key = (Path(diagnostic["file"]).name, diagnostic["range"]["start"]["line"] + 1)
        reported[key].add(diagnostic.get("rule", diagnostic["message"]))
    assert report["summary"]["filesAnalyzed"] == 3
    assert dict(reported) == expected("pyright"), json.dumps(report, indent=1)
