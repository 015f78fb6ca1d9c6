"""contract/CHANGELOG.md: the contract's own changelog, in Keep a Changelog's shape. What is not
yet released is under `## [Unreleased]`; each release is `## [X.Y.Z] - YYYY-MM-DD`. A breaking
change is written under `### Breaking` in the version that makes it.

Named means: an operation as `METHOD /path`, anywhere in the section; a field, parameter or header
by its name inside a code span (`` `top_k` ``, or `` `stream_options.include_usage` ``)."""

from __future__ import annotations

import re

UNRELEASED = "## [Unreleased]"
BREAKING = "### Breaking"
RELEASE = re.compile(r"^## \[([^\]]+)\]", re.MULTILINE)
SPAN = re.compile(r"`([^`\n]+)`")


def unreleased(text: str) -> str | None:
    """The text under `## [Unreleased]` (None without that heading)."""
    return _under(text, UNRELEASED, "## ")


def breaking(section: str) -> str | None:
    """The text under `### Breaking` in a version's section."""
    return _under(section, BREAKING, "### ", "## ")


def latest_release(text: str) -> str | None:
    return next((version for version in RELEASE.findall(text) if version != "Unreleased"), None)


def names(text: str, subject: str) -> bool:
    if " /" in subject:  # an operation: "GET /v5/models"
        return subject in text
    word = re.compile(rf"(?<![\w-]){re.escape(subject)}(?![\w-])")
    return any(word.search(span) for span in SPAN.findall(text))


def stamp(text: str, version: str, date: str) -> str:
    """What was unreleased becomes `version`, released on `date`, under a new empty `[Unreleased]`."""
    lines = text.splitlines(keepends=True)
    index = next(i for i, line in enumerate(lines) if line.rstrip() == UNRELEASED)
    lines[index] = f"{UNRELEASED}\n\n## [{version}] - {date}\n"
    return "".join(lines)


def _under(text: str, heading: str, *ends: str) -> str | None:
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.rstrip() == heading]
    if not starts:
        return None
    body = []
    for line in lines[starts[0] + 1:]:
        if line.startswith(ends):
            break
        body.append(line)
    return "\n".join(body).strip()
