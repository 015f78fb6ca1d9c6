"""The contract's gate: `openapi.json` judged against the contract last released
(`contract/released.json`), change by change, for the version it needs and the changelog entry it
owes (`contract/CHANGELOG.md`). The rules are in docs/contract.md.

A development tool, run by `make check-contract` and `make release-contract` (`python -m contract`);
the gateway never imports it (tests/unit/test_layers.py), and the wheel does not carry it.

    changes.py     what a change is, its level (patch, minor, major) and the document-wide diff
    nodes.py       schemas as compared: `$ref`s followed, null alternatives folded in
    keywords.py    the rules for a schema's own keywords (type, enum, bounds, pattern...)
    structures.py  the rules for what a schema holds (fields, items, alternatives)
    schemas.py     the walk: two schemas in one direction, what a client sends or what it reads
    patterns.py    whether a new regular expression refuses a string an old one took
    operations.py  two documents operation by operation: paths, parameters, bodies, answers
    versions.py    the version a set of changes needs
    changelog.py   contract/CHANGELOG.md: what it must name, and its stamping at a release
    gate.py        the verdict (changes, version, changelog) and the release
"""
