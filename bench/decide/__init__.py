"""Decision statistics: when a head-to-head is settled, and what would settle it.

`rule` is the sequential rule (Welch's interval on log throughput at a fixed schedule
of looks, alpha spread over them) with its allocation of launches and its give-up
rule; `pairs` the head-to-heads of one comparison and each one's decision from its
launches; `bound` a lower bound on the launches that would settle the open ones;
`simulate` the rule's error rates on a cell's own launches. Importable by tables,
sweeps and the CLI, not by runners; above measure (its intervals) only.
"""
