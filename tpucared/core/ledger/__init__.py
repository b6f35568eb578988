"""The badput ledger (issue 42): where every second of a slot went, and what it cost.

Pure functions over what the store records for a slot: its incarnations' phase times, its
workload attempts and its create attempts. From the slot's first create to `now`, every instant
falls in exactly one category (`categories.Category`: productive, Google's
`INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION`, and ours where Google's `BadputType` has no name),
with the loss cause, the zone and the node. The CLI's `tpucared goodput` (cli/goodput.py) reads
the records (store/ledger_reads.py) and prints what `cost.py` sums.

Modules, in the order a slot's records go through them:
- `categories.py`: the vocabulary (categories, sub-phases) and the records' ledger view;
- `tiling.py`: the intervals that tile [first create, now];
- `cost.py`: chips per type, the price table, totals, cost and the headline.
"""
