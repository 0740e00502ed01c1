#!/usr/bin/env python3
"""Says aloud which tests skipped because the openb traces are absent.

    python3 scripts/lib/paper_skips.py REPORT.xml...

The tests that compare the simulator with the FGD paper's numbers need the
openb traces (docs/simulator.md) and skip without them, so that a plain clone
passes. This reads the JUnit reports of the runs (ctest --output-junit,
pytest --junitxml; a report that does not exist is passed over), counts the
distinct tests that skipped with the reason "openb traces not found", and if
there are any prints one NOTE line naming the folder. It prints nothing when
none skipped, and always exits 0: the note informs, it does not fail a run.
"""

from __future__ import annotations

import os
import pathlib
import sys
import xml.etree.ElementTree as ET

REASON = "openb traces not found"
ROOT = pathlib.Path(__file__).resolve().parents[2]


def skipped_tests(report: pathlib.Path) -> set[str]:
    """The names of the tests in `report` that skipped for want of the traces."""
    try:
        tree = ET.parse(report)
    except (OSError, ET.ParseError) as e:
        print(f"paper_skips: cannot read {report}: {e}", file=sys.stderr)
        return set()
    found = set()
    for case in tree.iter("testcase"):
        skip = case.find("skipped")
        if skip is None:
            continue
        # pytest puts the reason in the message; ctest puts GoogleTest's
        # output, which holds the GTEST_SKIP() text, in system-out.
        text = " ".join([skip.get("message") or "", skip.text or "",
                         *(out.text or "" for out in case.iter("system-out"))])
        if REASON in text:
            found.add(f"{case.get('classname', '')}::{case.get('name', '')}")
    return found


def traces_folder() -> str:
    """Where the tests look for the traces, as tests/testing/sim_fixtures.h says."""
    shared = os.environ.get("GPUSHARE_SHARED_DIR")
    if shared:
        return str(pathlib.Path(shared) / "traces" / "openb")
    # ../shared beside the source tree, named from the repository root.
    return os.path.relpath(ROOT.parent / "shared" / "traces" / "openb", ROOT)


def main(argv: list[str]) -> int:
    skipped: set[str] = set()
    for name in argv:
        report = pathlib.Path(name)
        if report.is_file():
            skipped |= skipped_tests(report)
    if skipped:
        n = len(skipped)
        print(f"NOTE: {n} {'check' if n == 1 else 'checks'} that need the openb traces (the FGD "
              f"paper's numbers among them) {'was' if n == 1 else 'were'} skipped: the traces "
              f"are not in {traces_folder()} (docs/simulator.md says how to get them)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
