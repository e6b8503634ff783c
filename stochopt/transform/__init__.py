"""What changes a kernel: node-list edits, meaning-keeping rewrite rules (local ones as
patterns, whole-kernel ones as functions), tiling, layout propagation, list scheduling,
blind mutations and the greedy rewrite to a fixpoint. The search (stochopt/search) draws
from these; nothing here imports the search."""
