"""`python -m contract check | diff OLD NEW | release [--date YYYY-MM-DD]` (docs/contract.md)."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

from contract import gate
from contract.changes import Level
from contract.operations import compare_documents


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m contract", description="the contract's gate (docs/contract.md)")
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check", help="openapi.json against the released contract: versions, changelog")
    release = commands.add_parser("release", help="mark openapi.json released (after `check` passes)")
    for command in (check, release):
        command.add_argument("--spec", type=Path, default=gate.SPEC)
        command.add_argument("--released", type=Path, default=gate.RELEASED)
        command.add_argument("--changelog", type=Path, default=gate.CHANGELOG)
    release.add_argument("--date", default=datetime.now(UTC).date().isoformat(), help="the release's date (today)")
    diff = commands.add_parser("diff", help="the changes from one document to another, with their levels")
    diff.add_argument("old", type=Path)
    diff.add_argument("new", type=Path)
    args = parser.parse_args(argv)
    if args.command == "diff":
        changes = compare_documents(*(json.loads(path.read_text()) for path in (args.old, args.new)))
        print("\n".join(change.line() for change in changes) or "no change any rule judges")
        return 0
    if args.command == "release":
        try:
            version = gate.release(args.date, args.spec, args.released, args.changelog)
        except gate.ReleaseRefused as refused:
            print("contract: not released:\n" + "\n".join(f"  - {problem}" for problem in refused.problems),
                  file=sys.stderr)
            return 1
        print(f"contract: {version} released ({args.released.name} and {args.changelog.name}, dated {args.date}); "
              "commit both")
        return 0
    verdict = gate.check(args.spec, args.released, args.changelog)
    needs = "" if verdict.needed == Level.NONE else f", needing a {verdict.needed.bump} version"
    print(f"contract: openapi.json {verdict.version} against the released {verdict.released}: "
          f"{len(verdict.changes)} change(s){needs}")
    for change in verdict.changes:
        print(f"  {change.line()}")
    if verdict.passes:
        print("contract: passes")
        return 0
    print("contract: refused:\n" + "\n".join(f"  - {problem}" for problem in verdict.problems), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
