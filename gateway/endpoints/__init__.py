"""One unit per endpoint: its shapes, its rules, its stream's shape (docs: "Where the house goes
next" in the architecture notes). Between http above and the planner below."""
