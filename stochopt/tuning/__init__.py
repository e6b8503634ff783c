"""The tuning database: every kernel a run proves, remembered per spec and machine, so
that the next run starts from the best one, a spec at new shapes starts from the plans
that won on its neighbours, and the LLM sees slow -> fast pairs from earlier runs
(docs/database.md).

    schema.py        the tables and their migrations
    store.py         TuningDB: the SQLite file, plain methods on plain values
    database.py      Database: a TuningDB with the commands (list, show, export, ...)
    fingerprints.py  what makes two specs, machines or verifiers the same
    transfer.py      plans and move weights from similar specs
    memory.py        slow -> fast pairs for the LLM's prompt
    exchange.py      export, import, prune
    runs.py          a run's side: where it starts, what it writes
"""

from stochopt.tuning.store import DatabaseUnavailable, TuningDB, default_path

__all__ = ["TuningDB", "DatabaseUnavailable", "default_path"]
