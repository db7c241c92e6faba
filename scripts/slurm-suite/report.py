#!/usr/bin/env python3
"""Reads the JUnit reports of a run of Slurm's python suite against gsched
(one XML file per test file) and prints each case's result, the skips by
reason, and the pass rate on the applicable cases.

A case is applicable unless its test file is listed, with the reason, in
not-applicable.txt (features gsched does not have on purpose). Cases the
suite itself skips (a configuration the running cluster lacks, in its
local-config mode) are listed with the suite's reason and counted apart:
they are neither passes nor failures.

Usage: report.py [--strict] REPORT_DIR NOT_APPLICABLE_FILE
  --strict  exit 1 unless every applicable case passed (CI's subset)
"""
import collections
import pathlib
import sys
import xml.etree.ElementTree as ET


def not_applicable(path):
    out = {}
    for line in pathlib.Path(path).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, why = line.partition(" ")
        out[name] = why.strip()
    return out


def cases(report_dir):
    """(file, case, outcome, detail) for every case of every report."""
    for xml in sorted(pathlib.Path(report_dir).glob("*.xml")):
        file = xml.stem
        try:
            root = ET.parse(xml).getroot()
        except ET.ParseError as e:
            yield file, "(report)", "error", f"unreadable report: {e}"
            continue
        found = False
        for case in root.iter("testcase"):
            found = True
            name = case.get("name", "?")
            outcome, detail = "passed", ""
            for tag in ("failure", "error", "skipped"):
                el = case.find(tag)
                if el is not None:
                    outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                    detail = (el.get("message") or el.text or "").strip().splitlines()
                    detail = detail[0][:200] if detail else ""
                    break
            yield file, name, outcome, detail
        if not found:
            yield file, "(file)", "error", "no test case ran (collection failed or timed out)"


def main():
    args = sys.argv[1:]
    strict = "--strict" in args
    args = [a for a in args if a != "--strict"]
    report_dir, na_file = args[0], args[1]
    na = not_applicable(na_file)
    counts = collections.Counter()
    skips = collections.Counter()
    for file, name, outcome, detail in cases(report_dir):
        if file in na:
            counts["not applicable"] += 1
            print(f"n/a   {file}::{name}  ({na[file]})")
            continue
        counts[outcome] += 1
        mark = {"passed": "PASS", "failed": "FAIL", "error": "ERROR", "skipped": "skip"}[outcome]
        print(f"{mark:5} {file}::{name}" + (f"  ({detail})" if detail and outcome != "passed" else ""))
        if outcome == "skipped":
            skips[detail] += 1
    applicable = counts["passed"] + counts["failed"] + counts["error"]
    print()
    print("skipped by the suite, by reason:")
    for why, n in skips.most_common():
        print(f"  {n:4}  {why}")
    print()
    print(
        f"passed {counts['passed']}, failed {counts['failed']}, errors {counts['error']}, "
        f"skipped {counts['skipped']}, not applicable {counts['not applicable']}"
    )
    rate = 100.0 * counts["passed"] / applicable if applicable else 0.0
    print(f"pass rate on applicable cases: {counts['passed']}/{applicable} = {rate:.1f}%")
    if strict and counts["passed"] != applicable:
        print("--strict: not every applicable case passed", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
