"""A training manifest held in flat arrays, as a SpeechBrain dataset that forked workers share.

One dict per row (``DynamicItemDataset.from_csv``) at 800k rows is copied into every worker as
reference counts are touched; integer codes into each column's distinct values are not.

>>> import tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "train.csv")
>>> _ = open(path, "w").write("ID,utt_id,wav,duration,spk_id\\nu1@0,u1,a.wav,7.5,s1\\nu1@1,u1,a.wav,7.5,s1\\n")
>>> rows = read_manifest(path)
>>> len(rows), rows.ids[1], rows["u1@1"]
(2, 'u1@1', {'utt_id': 'u1', 'wav': 'a.wav', 'duration': 7.5, 'spk_id': 's1'})
>>> rows.distinct("spk_id"), rows.distinct("utt_id", "spk_id")
(['s1'], [('u1', 's1')])
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence

import numpy as np
import speechbrain as sb
from speechbrain.utils.data_pipeline import DataPipeline

from ..errors import UserError


class ManifestError(UserError, ValueError):
    """A manifest is malformed or empty; the message names the file and line."""


class RowIds(Sequence):
    """The row ids, decoded from one byte buffer on access."""

    def __init__(self, buffer: np.ndarray, offsets: np.ndarray):
        self._buffer = buffer
        self._offsets = offsets

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[k] for k in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self._buffer[self._offsets[index] : self._offsets[index + 1]].tobytes().decode("utf-8")


class ManifestRows(Mapping):
    """``ID -> row`` of a manifest (the data ``DynamicItemDataset`` takes), stored as arrays."""

    def __init__(self, ids: list[str], columns: dict[str, tuple[np.ndarray, list]]):
        encoded = [utt.encode("utf-8") for utt in ids]
        self.ids = RowIds(
            np.frombuffer(b"".join(encoded), dtype=np.uint8),
            np.concatenate([[0], np.cumsum([len(e) for e in encoded], dtype=np.int64)]),
        )
        self.columns = list(columns)
        self._columns = [(name, codes, values) for name, (codes, values) in columns.items()]
        self._position: dict[str, int] | None = None

    def row(self, index: int) -> tuple[str, dict]:
        return self.ids[index], {name: values[codes[index]] for name, codes, values in self._columns}

    def distinct(self, column: str, *more: str) -> list:
        """The distinct values of a column, sorted; of several columns, their distinct tuples, sorted."""
        coded = {name: (codes, values) for name, codes, values in self._columns}
        for name in (column, *more):
            if name not in coded:
                raise KeyError(name)
        if not more:
            codes, values = coded[column]
            return sorted({values[k] for k in np.unique(codes).tolist()})
        names = (column, *more)
        combinations = np.unique(np.stack([coded[name][0] for name in names], axis=1), axis=0)
        return sorted(
            tuple(coded[name][1][k] for name, k in zip(names, row)) for row in combinations.tolist()
        )

    def __len__(self) -> int:
        return len(self.ids)

    def __iter__(self):
        return iter(self.ids)

    def __getitem__(self, data_id: str) -> dict:
        if self._position is None:
            self._position = {data_id: k for k, data_id in enumerate(self.ids)}
        return self.row(self._position[data_id])[1]


def read_manifest(path, float_columns=("duration",)) -> ManifestRows:
    """Read a CSV manifest (an ``ID`` column, then any) in one pass; ``float_columns`` become floats."""
    ids: list[str] = []
    seen: set[str] = set()
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if not header or "ID" not in header:
            raise ManifestError(f"{path}: not a manifest (no header with an ID column)")
        key = header.index("ID")
        fields = [(k, name) for k, name in enumerate(header) if k != key]
        coded: list[dict] = [{} for _ in fields]  # per column: value -> code
        codes: list[list[int]] = [[] for _ in fields]
        for number, row in enumerate(reader, start=2):
            if len(row) != len(header):
                raise ManifestError(f"{path}:{number}: {len(row)} fields, the header has {len(header)}")
            if row[key] in seen:
                raise ManifestError(f"{path}:{number}: duplicate ID {row[key]!r}")
            seen.add(row[key])
            ids.append(row[key])
            for j, (k, _) in enumerate(fields):
                codes[j].append(coded[j].setdefault(row[k], len(coded[j])))
    columns = {}
    for j, (_, name) in enumerate(fields):
        values = list(coded[j])
        if name in float_columns:
            try:
                values = [float(value) for value in values]
            except ValueError as err:
                raise ManifestError(
                    f"{path}: column {name!r} holds a value that is not a number ({err})"
                ) from None
        columns[name] = (np.asarray(codes[j], dtype=np.int32), values)
    if not ids:
        raise ManifestError(f"{path}: no rows after the header: an empty manifest trains nothing")
    return ManifestRows(ids, columns)


class ManifestDataset(sb.dataio.dataset.DynamicItemDataset):
    """A ``DynamicItemDataset`` over :class:`ManifestRows`: the same items, no Python object per row."""

    def __init__(self, rows: ManifestRows, dynamic_items=None, output_keys=None):
        # DynamicItemDataset.__init__ would list every id; the rest is what it sets up.
        self.data = rows
        self.data_ids = rows.ids
        self.pipeline = DataPipeline([*rows.columns, "id"], dynamic_items or [])
        self.set_output_keys(output_keys or [])

    def __getitem__(self, index):
        data_id, point = self.data.row(index)
        return self.pipeline.compute_outputs({"id": data_id, **point})
