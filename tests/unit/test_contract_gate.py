"""The contract gate's verdict (contract/gate.py, versions.py, changelog.py, __main__.py): every change
needs its version (patch for documentation, minor for additions, major for breaks), the changelog
names what changed, a break is written under `### Breaking`, and a release records both."""

from __future__ import annotations

import json

import pytest

from contract import gate
from contract.__main__ import main
from contract.changes import Level
from tests.support.contract_specs import CHANGELOG, PATH, edited, operation, schemas, small_spec, write_repository


def notes(*lines: str, breaking: tuple[str, ...] = ()) -> str:
    """The small changelog with `lines` under [Unreleased] (and `breaking` under ### Breaking)."""
    added = "\n".join(["### Changed", "", *lines, *(["", "### Breaking", "", *breaking] if breaking else [])])
    return CHANGELOG.replace("## [Unreleased]\n", f"## [Unreleased]\n\n{added}\n")


def add_field(spec):
    schemas(spec)["Request"]["properties"]["seed"] = {"type": "integer"}


def narrow_enum(spec):
    schemas(spec)["Request"]["properties"]["effort"]["enum"] = ["low"]


def describe(spec):
    operation(spec)["description"] = "Makes a thing."


def test_the_released_contract_itself_passes():
    verdict = gate.judge(small_spec(), small_spec(), CHANGELOG)
    assert verdict.passes and verdict.needed == Level.NONE and verdict.changes == []


def test_an_addition_with_a_minor_version_and_its_entry_passes():
    verdict = gate.judge(small_spec(), edited(add_field, "1.1.0"), notes("- `seed` for repeatable answers."))
    assert verdict.passes, verdict.problems
    assert verdict.needed == Level.ADDITIVE and [c.kind for c in verdict.changes] == ["request-field-added"]


def test_an_addition_without_a_version_is_refused_naming_it():
    verdict = gate.judge(small_spec(), edited(add_field), notes("- `seed` for repeatable answers."))
    assert verdict.problems == ["openapi.json differs from the released contract 1.0.0 (contract/released.json) but "
                                "info.version is still 1.0.0: its 1 change(s) need 1.1.0 (minor)"]
    assert verdict.changes[0].line() == ("additive  #/components/schemas/Request/properties/seed: request field `seed` "
                                         "added [POST /things/{thing_id} request body application/json]")


def test_an_addition_with_a_patch_version_is_refused():
    verdict = gate.judge(small_spec(), edited(add_field, "1.0.1"), notes("- `seed`."))
    assert verdict.problems == ["info.version 1.0.1 is a patch version, but an additive change needs 1.1.0 (minor)"]


def test_an_addition_may_come_with_a_major_version():
    assert gate.judge(small_spec(), edited(add_field, "2.0.0"), notes("- `seed`.")).passes


def test_a_break_needs_a_major_version():
    verdict = gate.judge(small_spec(), edited(narrow_enum, "1.1.0"), notes("- `effort`.", breaking=("- `effort`",)))
    assert verdict.problems == ["info.version 1.1.0 is a minor version, but a breaking change needs 2.0.0 (major)"]


def test_a_break_needs_its_decision_written_under_breaking():
    verdict = gate.judge(small_spec(), edited(narrow_enum, "2.0.0"), notes("- `effort` takes `low` only."))
    assert verdict.problems == ["contract/CHANGELOG.md ## [Unreleased] has no ### Breaking section: a breaking "
                                "change is an explicit decision, written there with what clients must do"]


def test_the_breaking_section_names_each_break():
    verdict = gate.judge(small_spec(), edited(lambda s: (narrow_enum(s), s["paths"][PATH].pop("get")), "2.0.0"),
                         notes("- Less.", breaking=("- `effort` takes `low` only: send `low`.",)))
    assert verdict.problems == ["contract/CHANGELOG.md ## [Unreleased] does not name GET /things/{thing_id} "
                                "(operation GET /things/{thing_id} removed)",
                                "contract/CHANGELOG.md ### Breaking does not name GET /things/{thing_id} "
                                "(operation GET /things/{thing_id} removed)"]
    written = notes("- Less.", breaking=("- `effort` takes `low` only; GET /things/{thing_id} is gone: use POST.",))
    assert gate.judge(small_spec(), edited(lambda s: (narrow_enum(s), s["paths"][PATH].pop("get")), "2.0.0"),
                      written).passes


def test_the_changelog_names_what_was_added():
    verdict = gate.judge(small_spec(), edited(add_field, "1.1.0"), notes("- A field for repeatable answers."))
    assert verdict.problems == ["contract/CHANGELOG.md ## [Unreleased] does not name `seed` "
                                "(request field `seed` added)"]
    assert not gate.judge(small_spec(), edited(add_field, "1.1.0"), notes("- seeds, and `seeds`.")).passes


def test_a_change_needs_an_unreleased_entry():
    verdict = gate.judge(small_spec(), edited(describe, "1.0.1"), CHANGELOG)
    assert verdict.problems == ["contract/CHANGELOG.md has nothing under ## [Unreleased]: say what changed in the "
                                "contract"]


def test_documentation_alone_is_a_patch():
    verdict = gate.judge(small_spec(), edited(describe, "1.0.1"), notes("- Says what `make` does."))
    assert verdict.passes and verdict.needed == Level.DOC
    assert [(c.where, c.message) for c in verdict.changes] == [
        ("#/paths/~1things~1{thing_id}/post/description", "documentation added")]
    assert not gate.judge(small_spec(), edited(describe), notes("- Says what `make` does.")).passes


def test_a_difference_no_rule_judges_still_needs_a_minor_version():
    servers = lambda s: s.update(servers=[{"url": "https://api.example.test"}])  # noqa: E731
    verdict = gate.judge(small_spec(), edited(servers, "1.0.1"), notes("- A server."))
    assert verdict.needed == Level.ADDITIVE and [(c.kind, c.where) for c in verdict.changes] == [("other", "#/servers")]
    assert verdict.problems == ["info.version 1.0.1 is a patch version, but an additive change needs 1.1.0 (minor)"]


@pytest.mark.parametrize("version,said", [
    ("1.2.0", "info.version 1.2.0 does not follow the released 1.0.0: the next versions are 1.0.1 (documentation), "
              "1.1.0 (additive) and 2.0.0 (breaking)"),
    ("0.9.0", "info.version 0.9.0 does not follow the released 1.0.0"),
    ("1.1", "info.version '1.1' is not a version MAJOR.MINOR.PATCH"),
    ("1.1.0-rc.1", "info.version '1.1.0-rc.1' is not a version MAJOR.MINOR.PATCH"),
])
def test_a_version_that_does_not_follow_the_release_is_refused(version, said):
    verdict = gate.judge(small_spec(), edited(add_field, version), notes("- `seed`."))
    assert len(verdict.problems) == 1 and verdict.problems[0].startswith(said), verdict.problems


def test_the_changelogs_latest_release_is_the_released_contract():
    verdict = gate.judge(small_spec(), small_spec(), CHANGELOG.replace("[1.0.0]", "[0.9.0]"))
    assert verdict.problems == ["contract/CHANGELOG.md's latest release is 0.9.0, but contract/released.json is 1.0.0: "
                                "release with `make release-contract`, which writes both"]


def test_a_release_records_the_contract_and_dates_its_entry(tmp_path):
    current = edited(add_field, "1.1.0")
    files = write_repository(tmp_path, small_spec(), current, notes("- `seed`."))
    assert gate.release("2026-12-24", files["spec"], files["released"], files["changelog"]) == "1.1.0"
    assert files["released"].read_bytes() == files["spec"].read_bytes()
    assert "## [Unreleased]\n\n## [1.1.0] - 2026-12-24\n\n### Changed\n\n- `seed`.\n\n## [1.0.0]" in files[
        "changelog"].read_text()
    assert gate.check(files["spec"], files["released"], files["changelog"]).passes
    with pytest.raises(gate.ReleaseRefused, match="is the released contract 1.1.0 already: nothing to release"):
        gate.release("2026-12-25", files["spec"], files["released"], files["changelog"])


def test_a_release_refuses_what_the_check_refuses(tmp_path):
    files = write_repository(tmp_path, small_spec(), edited(add_field), notes("- `seed`."))
    with pytest.raises(gate.ReleaseRefused, match="info.version is still 1.0.0"):
        gate.release("2026-12-24", files["spec"], files["released"], files["changelog"])
    assert json.loads(files["released"].read_text()) == small_spec()


def test_the_first_release_needs_only_a_version_and_an_entry(tmp_path):
    files = write_repository(tmp_path, small_spec(), small_spec(), notes("- Everything."))
    files["released"].unlink()
    assert gate.release("2026-12-24", files["spec"], files["released"], files["changelog"]) == "1.0.0"
    assert files["released"].read_bytes() == files["spec"].read_bytes()


def test_the_command_exits_1_and_says_why(tmp_path, capsys):
    files = write_repository(tmp_path, small_spec(), edited(narrow_enum), notes("- `effort`."))
    paths = ["--spec", str(files["spec"]), "--released", str(files["released"]), "--changelog", str(files["changelog"])]
    assert main(["check", *paths]) == 1
    out, err = capsys.readouterr()
    assert ("breaking  #/components/schemas/Request/properties/effort/enum: request field `effort`: enum narrowed: "
            '"high" removed') in out
    assert "but info.version is still 1.0.0: its 1 change(s) need 2.0.0 (major)" in err
    files["spec"].write_text(json.dumps(small_spec()))
    assert main(["check", *paths]) == 0
    assert capsys.readouterr().out.endswith("contract: passes\n")
