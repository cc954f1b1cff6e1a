"""Published numbers (``reference_results.csv`` beside this module, each row naming its source): the
paper's Tables 1 and 2, the VPAC 2024 baseline attacker and VPC 2026's own attacker.
"""

from __future__ import annotations

import csv
from pathlib import Path

from ..data.protocols import MIXED_TABLE, VPAC_TABLE

#: Every numeric column reference_results.csv may fill (VPAC 2024's and VPC 2026's).
REFERENCE_COLUMNS = tuple(dict.fromkeys([*VPAC_TABLE.columns, *MIXED_TABLE.columns]))
REFERENCE_FILE = Path(__file__).with_name("reference_results.csv")


def load_reference_results(path=REFERENCE_FILE) -> list[dict]:
    """Published EERs (%): rows with ``source``, ``table``, ``system``, ``attacker`` and the table columns
    of :data:`REFERENCE_COLUMNS` (VPAC 2024's Table 2 and VPC 2026's dev / test mixed); empty cells None.

    >>> rows = load_reference_results()
    >>> [r["avg"] for r in rows if r["table"] == "paper-table2" and r["system"] == "T8-5"]
    [37.39, 25.94]
    >>> [(r["dev_mixed"], r["test_mixed"]) for r in rows if r["table"] == "vpc2026-track1" and r["system"] == "B3"]
    [(16.321, 14.243)]
    """
    rows = []
    lines = [line for line in Path(path).read_text(encoding="utf-8").splitlines() if not line.startswith("#")]
    for row in csv.DictReader(lines):
        for column in REFERENCE_COLUMNS:
            value = (row.get(column) or "").strip()
            row[column] = float(value) if value else None
        rows.append(row)
    return rows


def reference_value(references: list[dict], table: str, system: str, attacker: str, column: str = "avg"):
    """One published number, or None."""
    for row in references:
        if row["table"] == table and row["system"] == system and row["attacker"] == attacker:
            return row[column]
    return None
