"""The verdict on `openapi.json` against the released contract, and the release itself.

It passes when the contract is the released one, or when every change comes with the version it
needs (contract/versions.py) and contract/CHANGELOG.md's `[Unreleased]` section names it; a
breaking change also needs its own entry under `### Breaking`. Anything that differs but that no
rule judges still needs a minor version: no change goes unversioned."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from contract import changelog, versions
from contract.changes import Change, Level, canonical, differences, without_docs
from contract.operations import compare_documents

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "openapi.json"
RELEASED = ROOT / "contract" / "released.json"
CHANGELOG = ROOT / "contract" / "CHANGELOG.md"


@dataclasses.dataclass
class Verdict:
    released: str
    version: str
    changes: list[Change]
    needed: Level
    problems: list[str]

    @property
    def passes(self) -> bool:
        return not self.problems


def judge(released: dict, current: dict, notes: str | None, notes_name: str = "contract/CHANGELOG.md") -> Verdict:
    """`notes` is contract/CHANGELOG.md's text (None to leave the changelog unchecked)."""
    old_version, new_version = released.get("info", {}).get("version"), current.get("info", {}).get("version")
    changes = compare_documents(released, current)
    old, new = _unversioned(released), _unversioned(current)
    if canonical(old) == canonical(new):
        needed = Level.NONE
    elif canonical(without_docs(old)) == canonical(without_docs(new)):
        needed = Level.DOC
        changes = [Change(Level.DOC, "documentation", where, f"documentation {what}", "")
                   for where, what in differences(old, new)]
    else:
        needed = max([Level.ADDITIVE, *(change.level for change in changes)])
        if not changes:  # a difference no rule judges: versioned all the same
            changes = [Change(Level.ADDITIVE, "other", where, f"{what}, which no rule of the check judges (a minor "
                              "version)", "") for where, what in differences(without_docs(old), without_docs(new))]
    problems = _version_problems(old_version, new_version, needed, changes)
    if notes is not None:
        problems += _changelog_problems(notes, notes_name, old_version, needed, changes)
    return Verdict(str(old_version), str(new_version), changes, needed, problems)


def check(spec: Path = SPEC, released: Path = RELEASED, notes: Path = CHANGELOG) -> Verdict:
    return judge(_load(released), _load(spec), notes.read_text(), _shown(notes))


def release(date: str, spec: Path = SPEC, released: Path = RELEASED, notes: Path = CHANGELOG) -> str:
    """Marks `spec` released: it becomes `released`, and the changelog's `[Unreleased]` section its
    version's, dated `date`. Refuses what `check` refuses, and a contract already released."""
    current = _load(spec)
    version = current.get("info", {}).get("version")
    text = notes.read_text()
    if released.exists():
        verdict = judge(_load(released), current, text, _shown(notes))
        if not verdict.passes:
            raise ReleaseRefused(verdict.problems)
        if verdict.needed == Level.NONE and verdict.version == verdict.released:
            raise ReleaseRefused([f"openapi.json is the released contract {verdict.released} already: "
                                  "nothing to release"])
    else:  # the first release
        try:
            versions.parse(version)
        except ValueError as exc:
            raise ReleaseRefused([str(exc)]) from None
    if not changelog.unreleased(text):
        raise ReleaseRefused([f"{_shown(notes)} has nothing under {changelog.UNRELEASED}: say what the release "
                              "changes"])
    released.write_bytes(spec.read_bytes())
    notes.write_text(changelog.stamp(text, version, date))
    return version


class ReleaseRefused(Exception):
    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def _version_problems(released: object, version: object, needed: Level, changes: list[Change]) -> list[str]:
    try:
        versions.parse(released)
        versions.parse(version)
    except ValueError as exc:
        return [str(exc)]
    allowed = versions.following(str(released))
    bump = versions.bump(str(released), str(version))
    if bump is None:
        return [f"info.version {version} does not follow the released {released}: the next versions are "
                f"{allowed[Level.DOC]} (documentation), {allowed[Level.ADDITIVE]} (additive) and "
                f"{allowed[Level.BREAKING]} (breaking)"]
    if bump >= needed:
        return []
    if bump == Level.NONE:
        return [f"openapi.json differs from the released contract {released} (contract/released.json) but "
                f"info.version is still {released}: its {len(changes)} change(s) need {allowed[needed]} "
                f"({needed.bump})"]
    worst = {Level.BREAKING: "a breaking", Level.ADDITIVE: "an additive"}.get(needed, "a documentation")
    return [f"info.version {version} is a {bump.bump} version, but {worst} change needs {allowed[needed]} "
            f"({needed.bump})"]


def _changelog_problems(text: str, where: str, released: object, needed: Level, changes: list[Change]) -> list[str]:
    problems = []
    latest = changelog.latest_release(text)
    if latest != released:
        problems.append(f"{where}'s latest release is {latest}, but contract/released.json is {released}: "
                        "release with `make release-contract`, which writes both")
    if needed == Level.NONE:
        return problems
    section = changelog.unreleased(text)
    if not section:
        return [*problems, f"{where} has nothing under {changelog.UNRELEASED}: say what changed in the contract"]
    for change in changes:
        if change.named and not changelog.names(section, change.subject):
            problems.append(f"{where} {changelog.UNRELEASED} does not name {_subject(change)} ({change.message})")
    breaking = [change for change in changes if change.level == Level.BREAKING]
    if breaking:
        decided = changelog.breaking(section)
        if decided is None:
            problems.append(f"{where} {changelog.UNRELEASED} has no {changelog.BREAKING} section: a breaking change "
                            "is an explicit decision, written there with what clients must do")
        else:
            for change in breaking:
                if not changelog.names(decided, change.subject):
                    problems.append(f"{where} {changelog.BREAKING} does not name {_subject(change)} ({change.message})")
    return problems


def _subject(change: Change) -> str:
    return change.subject if " /" in change.subject else f"`{change.subject}`"


def _unversioned(document: dict) -> dict:
    info = {key: value for key, value in (document.get("info") or {}).items() if key != "version"}
    return {**document, "info": info}


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)
