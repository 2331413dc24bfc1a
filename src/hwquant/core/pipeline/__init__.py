"""The ordered stages every facade runs and what they hand to each other: the stages, their state and
report, per-node candidates, layers left float, resource figures, the representative data, runs across
processes, the model's metadata and the facades' shared steps."""
