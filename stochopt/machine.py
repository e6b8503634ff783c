"""Machine presets as data: the tree, memories, bandwidths, lanes and latencies.

Every constant the cost model uses lives here and in docs/machine.md; a user can pass a
TOML file with the same keys to cost kernels on a machine of their own.
"""

from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass, field, fields, replace
from math import prod
from pathlib import Path

from stochopt.errors import StochoptError

# the machine's tree, outermost first: a layout spreads a tensor's axes over these levels
LEVELS = ("L2B", "L1B", "MAB", "PE")


@dataclass(frozen=True)
class Machine:
    name: str
    fanout: dict[str, int]                 # units of each level per parent (L2B, L1B, MAB, PE)
    clock_mhz: float = 750.0
    pe_local_bytes: int = 32 * 1024        # LM0 + LM1 per PE
    l1bm_bytes: int = 64 * 1024            # per L1B
    l2bm_bytes: int = 256 * 1024           # per L2B
    dram_groups: int = 4                   # each serves l2b_per_group L2Bs
    dram_bytes_per_cycle_per_group: float = 128e9 / 750e6  # 128 GB/s at 750 MHz ~ 170.7
    word_bytes: int = 8                    # one PE ALU word per cycle
    l1b_link_words: int = 64               # distribute / gather, per L1B per cycle
    l2b_link_words: int = 16               # broadcast / reduce, per L2B per cycle
    mau_bf16: tuple[int, int] = (16, 16)   # MACs per cycle per MAU: tile rows x cols
    mau_f32: tuple[int, int] = (8, 4)
    latency: dict[str, int] = field(default_factory=lambda: {
        "dma": 200, "tree": 24, "vector": 4, "matrix": 16})
    dma_issue: int = 32                    # cycles the DMA queue spends issuing a transfer
    dram_burst_bytes: int = 64             # a DRAM group reads and writes whole bursts
    dma_runs_per_cycle: int = 2            # contiguous runs a group's DMA engine starts per cycle
    pe_port_words: int = 1                 # words per cycle a PE takes from / gives to the tree
    dma_descriptors: int = 4               # transfers a DMA engine keeps in flight at once
    copy_run_issue: int = 1                # cycles a local move spends starting each run

    @property
    def pes(self) -> int:
        return prod(self.fanout[lv] for lv in LEVELS)

    @property
    def mabs(self) -> int:
        return self.fanout["L2B"] * self.fanout["L1B"] * self.fanout["MAB"]

    @property
    def l2b_per_group(self) -> int:
        return max(1, -(-self.fanout["L2B"] // self.dram_groups))

    @property
    def dram_bytes_per_cycle(self) -> float:
        """Whole-chip DRAM bandwidth, every group busy."""
        return self.dram_groups * self.dram_bytes_per_cycle_per_group

    @property
    def pe_port_bytes(self) -> int:
        """Bytes per cycle one PE's local memory takes from or gives to the tree."""
        return self.pe_port_words * self.word_bytes

    def summary(self) -> dict:
        return asdict(self)

    def __hash__(self) -> int:  # the dict fields would make the generated hash fail
        return hash((self.name, tuple(self.fanout.items()), self.pe_local_bytes))


MNCORE2 = Machine(name="mncore2", fanout={"L2B": 8, "L1B": 8, "MAB": 16, "PE": 4})

# A few dozen PEs: same rules and rates, small enough for fast tests.
SMALL = Machine(name="small", fanout={"L2B": 2, "L1B": 2, "MAB": 4, "PE": 4},
                dram_groups=1)

PRESETS = {m.name: m for m in (MNCORE2, SMALL)}


def load_machine(name_or_path: str | Path | Machine | None) -> Machine:
    """A preset by name, a TOML file with Machine's keys, or a Machine as is."""
    if name_or_path is None:
        return MNCORE2
    if isinstance(name_or_path, Machine):
        return name_or_path
    if isinstance(name_or_path, str) and name_or_path in PRESETS:
        return PRESETS[name_or_path]
    path = Path(name_or_path)
    if path.suffix != ".toml":
        raise StochoptError(f"unknown machine {str(name_or_path)!r}",
                            hint=f"use one of {', '.join(PRESETS)} or a .toml file")
    if not path.is_file():
        raise StochoptError(f"machine file {path} does not exist",
                            hint=f"give a path to a .toml file, or one of {', '.join(PRESETS)}")
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, OSError, UnicodeDecodeError) as e:
        raise StochoptError(f"cannot read machine file {path}: {e}") from None
    try:
        return machine_from_dict(data, default_name=path.stem)
    except StochoptError as e:
        raise StochoptError(e.message, hint=e.hint, source=str(path)) from None


# fields that may be fractional; every other number is a whole count of bytes or words
_REAL_FIELDS = ("clock_mhz", "dram_bytes_per_cycle_per_group")


def machine_from_dict(data: dict, default_name: str = "custom") -> Machine:
    """A Machine from a preset (key ``base``, default mncore2) with some keys replaced."""
    data = dict(data)
    base_name = data.pop("base", "mncore2")
    if base_name not in PRESETS:
        raise StochoptError(f"machine file: unknown base {base_name!r}",
                            hint=f"use one of {', '.join(PRESETS)}")
    known = {f.name: f for f in fields(Machine)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise StochoptError(f"machine file: unknown keys {', '.join(unknown)}",
                            hint=f"known keys are base, {', '.join(known)}")
    name = data.pop("name", default_name)
    if not isinstance(name, str) or not name:
        raise StochoptError("machine file: name must be a non-empty string")
    base = PRESETS[base_name]
    merged = replace(base, name=name)
    for key, value in data.items():
        current = getattr(base, key)
        if isinstance(current, dict):
            if not isinstance(value, dict) or set(value) - set(current):
                raise StochoptError(f"machine file: {key} is a table with keys "
                                    f"{', '.join(current)}",
                                    hint=f"e.g. [{key}] {next(iter(current))} = "
                                    f"{next(iter(current.values()))}")
            value = {**current, **value}
            bad = [k for k, v in value.items() if not _positive_int(v)]
            if bad:
                raise StochoptError(f"machine file: {key}.{bad[0]} must be a positive integer, "
                                    f"got {value[bad[0]]!r}")
        elif isinstance(current, tuple):
            if not (isinstance(value, list) and len(value) == 2
                    and all(_positive_int(v) for v in value)):
                raise StochoptError(f"machine file: {key} is a pair of positive integers, "
                                    f"got {value!r}", hint=f"e.g. {key} = {list(current)}")
        elif key in _REAL_FIELDS:
            if not isinstance(value, int | float) or isinstance(value, bool) or not value > 0:
                raise StochoptError(f"machine file: {key} must be a positive number, "
                                    f"got {value!r}")
        elif not _positive_int(value):
            raise StochoptError(f"machine file: {key} must be a positive integer, "
                                f"got {value!r}")
        merged = replace(merged, **{key: tuple(value) if isinstance(value, list) else value})
    if merged.dram_groups > merged.fanout["L2B"]:
        raise StochoptError(f"machine file: dram_groups ({merged.dram_groups}) exceeds the "
                            f"{merged.fanout['L2B']} L2Bs", hint="each group serves its own L2Bs")
    return merged


def run_machine(run: dict) -> Machine:
    """The machine a run searched on, rebuilt from its run.json (a preset by its name)."""
    name = run.get("machine_name") or run["machine"].get("name")
    if name in PRESETS:
        return PRESETS[name]
    data = {k: v for k, v in run["machine"].items() if k != "name"}
    return machine_from_dict({**data, "name": name}, name)


def _positive_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0
