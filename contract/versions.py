"""`info.version` is semver (MAJOR.MINOR.PATCH): the version a set of changes needs after the one
released. A breaking change needs the next major, an additive one the next minor, a change to the
documentation alone the next patch; a version that skips ahead or goes back is refused."""

from __future__ import annotations

import re

from contract.changes import Level

SEMVER = re.compile(r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)")


def parse(text: object) -> tuple[int, int, int]:
    match = SEMVER.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"info.version {text!r} is not a version MAJOR.MINOR.PATCH (semver, without a pre-release)")
    return int(match[1]), int(match[2]), int(match[3])


def following(released: str) -> dict[Level, str]:
    """The versions that may follow `released`, by the level of change each allows."""
    major, minor, patch = parse(released)
    return {Level.DOC: f"{major}.{minor}.{patch + 1}", Level.ADDITIVE: f"{major}.{minor + 1}.0",
            Level.BREAKING: f"{major + 1}.0.0"}


def bump(released: str, version: str) -> Level | None:
    """The level of change `version` allows after `released`: NONE when they are equal, None when
    it does not follow it."""
    if parse(version) == parse(released):
        return Level.NONE
    return next((level for level, follower in following(released).items() if follower == version), None)
