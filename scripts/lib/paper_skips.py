#!/usr/bin/env python3
"""Says aloud which tests skipped because the FGD paper's data is absent.

    python3 scripts/lib/paper_skips.py REPORT.xml...

The tests that compare gpushare with the FGD paper need data the repository
does not hold (docs/simulator.md): the openb traces, and the golden
fragmentation vectors of the paper's simulator. Without it they skip, so that
a plain clone passes. This reads the JUnit reports of the runs (ctest
--output-junit, pytest --junitxml; a report that does not exist is passed
over), counts the distinct tests that skipped for each of those reasons, and
prints one NOTE line per reason that occurred, naming where the tests looked.
It prints nothing when every such test ran, and always exits 0: the note
informs, it does not fail a run.
"""

from __future__ import annotations

import os
import pathlib
import sys
import xml.etree.ElementTree as ET

ROOT = pathlib.Path(__file__).resolve().parents[2]

# The skip reason the tests give (tests/*.cc, bindings/python/tests/), what
# skipped, the path under the shared folder that was missing, and what to say
# about it.
REASONS = [
    ("openb traces not found", "that need the openb traces (the FGD paper's numbers among them)",
     "traces/openb", "the traces are not in {path} (docs/simulator.md says how to get them)"),
    ("golden vectors not found", "against the golden fragmentation values of the FGD paper's "
     "simulator", "fgd/frag_test_vectors.json", "{path} is absent (docs/simulator.md)"),
]


def skipped_tests(report: pathlib.Path) -> dict[str, set[str]]:
    """For each reason, the tests in `report` that skipped with it."""
    found: dict[str, set[str]] = {reason: set() for reason, *_ in REASONS}
    try:
        tree = ET.parse(report)
    except (OSError, ET.ParseError) as e:
        print(f"paper_skips: cannot read {report}: {e}", file=sys.stderr)
        return found
    for case in tree.iter("testcase"):
        skip = case.find("skipped")
        if skip is None:
            continue
        # pytest puts the reason in the message; ctest puts GoogleTest's
        # output, which holds the GTEST_SKIP() text, in system-out.
        text = " ".join([skip.get("message") or "", skip.text or "",
                         *(out.text or "" for out in case.iter("system-out"))])
        for reason in found:
            if reason in text:
                found[reason].add(f"{case.get('classname', '')}::{case.get('name', '')}")
    return found


def shared_path(sub: str) -> str:
    """Where the tests look, as tests/testing/sim_fixtures.h says."""
    shared = os.environ.get("GPUSHARE_SHARED_DIR")
    if shared:
        return str(pathlib.Path(shared) / sub)
    # ../shared beside the source tree, named from the repository root.
    return os.path.relpath(ROOT.parent / "shared" / sub, ROOT)


def main(argv: list[str]) -> int:
    skipped: dict[str, set[str]] = {reason: set() for reason, *_ in REASONS}
    for name in argv:
        report = pathlib.Path(name)
        if report.is_file():
            for reason, tests in skipped_tests(report).items():
                skipped[reason] |= tests
    for reason, what, sub, missing in REASONS:
        n = len(skipped[reason])
        if n:
            print(f"NOTE: {n} {'check' if n == 1 else 'checks'} {what} "
                  f"{'was' if n == 1 else 'were'} skipped: "
                  f"{missing.format(path=shared_path(sub))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
