"""The endpoints' units (gateway/endpoints/<name>/): each endpoint's shapes, rules and stream shape,
apart from the planner and the vendors (docs/development.md; the endpoints issue)."""
