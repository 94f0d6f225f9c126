"""Deduplicating data where it already lives: Arrow tables, polars and pandas DataFrames, Hugging
Face datasets, DuckDB results (re-exported as :func:`neardup.dedup_table` and
:func:`neardup.drop_duplicates`).

The table's Arrow data is read in place through the Arrow PyCapsule stream interface
(``__arrow_c_stream__``): its batches are imported once, without copying their buffers, and both
stages read them in Rust with the GIL released. A pandas DataFrame goes through
``pyarrow.Table.from_pandas`` (pandas' own memory is not Arrow's); a ``datasets.Dataset`` through
its Arrow table (no row becomes a Python object).

A stream too large for memory is handed in as a callable that returns a fresh stream each time it
is called (e.g. ``lambda: dataset.scanner(columns=["text"]).to_reader()``): each stage opens it
and reads it batch by batch, so only the batches being worked on are held.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Sequence, Tuple, Union

from . import _native

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ._report_types import Report
    from ._settings import Settings

__all__ = ["dedup_table", "drop_duplicates", "report_of"]

Columns = Union[str, Sequence[str]]


def _fields(column: Columns, settings: Mapping[str, Any]) -> Dict[str, Any]:
    """The settings with ``fields`` set to the text column(s)."""
    if "fields" in settings:
        raise TypeError("give the text columns as column=, not fields=")
    columns: List[str] = [column] if isinstance(column, str) else list(column)
    if not columns or not all(isinstance(c, str) for c in columns):
        raise TypeError("column= must be a column name or a list of column names")
    return dict(settings, fields=columns)


def _module_of(data: Any) -> str:
    return type(data).__module__.split(".", 1)[0]


def _as_arrow(data: Any) -> Tuple[Any, Callable[[Any], Any]]:
    """What the engine reads for ``data`` (an object exporting an Arrow stream), and how to
    give back the rows a boolean numpy mask keeps, in the type ``data`` has."""
    module = _module_of(data)
    name = type(data).__name__
    if module == "datasets" and hasattr(data, "data") and hasattr(data, "select"):
        # A Dataset's rows are its Arrow table's, unless an indices mapping (from select, shuffle,
        # filter) reorders them: then the rows it shows are taken once, in its order.
        ds = data if getattr(data, "_indices", None) is None else data.flatten_indices()
        table = ds.data.table

        def kept_dataset(mask: Any) -> Any:
            import numpy as np

            return ds.select(np.flatnonzero(mask))

        return table, kept_dataset
    if module == "pandas" and name == "DataFrame":
        import pyarrow as pa

        table = pa.Table.from_pandas(data, preserve_index=False)
        return table, lambda mask: data[mask]
    if module == "polars" and name == "DataFrame":
        import polars as pl

        source = data if hasattr(data, "__arrow_c_stream__") else data.to_arrow()
        return source, lambda mask: data.filter(pl.Series(mask))
    if module == "pyarrow":
        import pyarrow as pa

        if isinstance(data, pa.Table):
            return data, lambda mask: data.filter(pa.array(mask))
        if isinstance(data, pa.RecordBatch):
            table = pa.Table.from_batches([data])
            return table, lambda mask: data.filter(pa.array(mask))
        if isinstance(data, pa.RecordBatchReader):
            # One pass over a stream: its batches are kept for the second stage and the filter.
            table = data.read_all()
            return table, lambda mask: table.filter(pa.array(mask))
    if hasattr(data, "__arrow_c_stream__"):
        import pyarrow as pa

        # Any other exporter (a DuckDB relation, …): its rows as a pyarrow Table.
        table = pa.table(data)
        return table, lambda mask: table.filter(pa.array(mask))
    raise TypeError(
        "data must be a pyarrow Table, RecordBatch or RecordBatchReader, a polars or pandas "
        "DataFrame, a datasets.Dataset, or any object with __arrow_c_stream__; got "
        f"{type(data).__module__}.{name}"
    )


def _is_reopenable(data: Any) -> bool:
    """Whether ``data`` is a callable that opens a stream (rather than a table itself)."""
    return callable(data) and not hasattr(data, "__arrow_c_stream__") and not hasattr(
        data, "to_arrow"
    )


def _kept_stream(open_stream: Callable[[], Any], mask: Any) -> Any:
    """The rows a boolean mask keeps of a fresh pass over a stream, as a lazy
    ``pyarrow.RecordBatchReader`` (one more pass, batch by batch)."""
    import pyarrow as pa

    reader = pa.RecordBatchReader.from_stream(open_stream())

    def batches() -> Any:
        start = 0
        for batch in reader:
            end = start + batch.num_rows
            if end > len(mask):
                raise ValueError(
                    f"the stream gave more than the {len(mask)} rows it gave when it was "
                    "deduplicated: it must give the same rows each time it is opened"
                )
            yield batch.filter(pa.array(mask[start:end]))
            start = end
        if start != len(mask):
            raise ValueError(
                f"the stream gave {start} rows, not the {len(mask)} it gave when it was "
                "deduplicated: it must give the same rows each time it is opened"
            )

    return pa.RecordBatchReader.from_batches(reader.schema, batches())


def _decisions(source: Any, progress: Any, settings: Dict[str, Any]) -> Any:
    """Runs both stages over ``source`` (a table, or a callable opening a stream) and builds
    the decisions table."""
    from . import _finish

    stream = _is_reopenable(source)
    if stream:
        run = _native.start_dedup_stream(source, settings)
    else:
        run = _native.start_dedup_table(source, settings)
    _finish(run, progress)
    columns, indexed, report = _native.table_result(run)
    keep, codes, names, dup_of, similarity, cluster, ids = columns
    if stream:
        # A file the runner cannot read to its end is reported and the rest decided; a stream
        # that fails part-way has rows nobody can name, so its decisions would not line up
        # with the caller's rows.
        lost = json.loads(report)["totals"]["unreadable"]
        if lost:
            raise OSError(
                f"the stream could not be read to its end (from row {lost[0]['first_record']}): "
                f"{lost[0]['reason']}"
            )
    return _decisions_table(
        keep, codes, names, dup_of, similarity, cluster, ids, indexed, report,
        bool(settings.get("against")),
    )


def _decisions_table(
    keep: Any,
    codes: Any,
    names: List[str],
    dup_of: Any,
    similarity: Any,
    cluster: Any,
    ids: Any,
    indexed: List[Tuple[int, str, int]],
    report: str,
    against: bool,
) -> Any:
    """The decisions table of the native columns (numpy arrays; -1 and NaN for none)."""
    import numpy as np
    import pyarrow as pa

    reason = pa.DictionaryArray.from_arrays(
        pa.array(codes.astype(np.int8)), pa.array(names)
    ).dictionary_decode()
    columns: Dict[str, Any] = {
        "keep": pa.array(keep),
        "reason": reason,
        "dup_of": pa.array(dup_of, mask=dup_of < 0),
        "similarity": pa.array(similarity, mask=np.isnan(similarity)),
        "cluster": pa.array(cluster, mask=cluster < 0),
    }
    if ids is not None:
        columns["id"] = pa.array(ids[0], pa.string())
        columns["dup_of_id"] = pa.array(ids[1], pa.string())
    if against:
        # A duplicate of a record of an indexed run names that run's file and record.
        files: List[Any] = [None] * len(keep)
        records: List[Any] = [None] * len(keep)
        for row, file, record in indexed:
            files[row] = file
            records[row] = record
        columns["dup_of_file"] = pa.array(files, pa.string())
        columns["dup_of_record"] = pa.array(records, pa.int64())
    table = pa.table(columns)
    return table.replace_schema_metadata({"neardup.report": report})


def dedup_table(
    data: Any,
    column: Columns = "text",
    *,
    progress: Any = None,
    **settings: Unpack[Settings],
) -> Any:
    """Finds the near duplicates among a table's rows: one decision per row, in row order.

    Args:
        data: a pyarrow ``Table``, ``RecordBatch`` or ``RecordBatchReader`` (read once: its
            batches are kept for the second stage), a polars or pandas ``DataFrame``, a
            ``datasets.Dataset``, or any object with ``__arrow_c_stream__`` (a DuckDB relation,
            …). Read in place: nothing is copied but a pandas frame's conversion to Arrow.
            Or, for a stream larger than memory, a callable taking no argument that returns a
            fresh Arrow stream (an object with ``__arrow_c_stream__``) each time it is called,
            with the same rows in the same order: it is called once per stage and each stream
            is read batch by batch, so memory holds the batches being worked on, not the
            stream.
        column: the text column, or a list of them (joined into one text per row with
            ``separator``, as ``fields`` are). String, large string, string view and
            dictionary-encoded string columns, chunked or not; a null is decided ``error``
            and kept, as the file runner decides a null field (an empty string is ``empty``).
        progress: tqdm bars, as for :func:`neardup.dedup`.
        **settings: the settings of :func:`neardup.dedup` by name (``threshold``, ``num_perm``,
            ``id_field`` and ``prefer`` naming columns, ``against`` saved indexes, …), none of
            the output ones. ``fields_mode="expand"`` is refused (a row would get several
            decisions).

    Returns:
        A ``pyarrow.Table`` with one row per input row, in order: ``keep`` (bool), ``reason``
        (``unique``, ``near``, ``exact``, ``empty``, ``error``), ``dup_of`` (the row it duplicates, or
        null), ``similarity`` (null when kept), ``cluster`` (the row of the copy its set keeps);
        with ``id_field`` also ``id`` and ``dup_of_id``; with ``against`` also ``dup_of_file``
        and ``dup_of_record`` for duplicates of an indexed run's record (``dup_of`` and
        ``cluster`` are then null). The run report (JSON) is the schema's metadata
        ``neardup.report``.

    Raises:
        KeyError: a column the table does not have (the message lists its columns).
        TypeError: a text column that does not hold strings, an unknown setting.
        ValueError: a bad setting value.
    """
    source = data if _is_reopenable(data) else _as_arrow(data)[0]
    return _decisions(source, progress, _fields(column, settings))


def drop_duplicates(
    data: Any,
    column: Columns = "text",
    *,
    with_decisions: bool = False,
    progress: Any = None,
    **settings: Unpack[Settings],
) -> Any:
    """The rows of ``data`` that :func:`dedup_table` keeps, as the type ``data`` is.

    A pyarrow ``Table`` or ``RecordBatch``, a polars or pandas ``DataFrame`` (its index kept) and
    a ``datasets.Dataset`` come back as the same type (the Dataset through ``select``: an
    indices mapping over the same Arrow table, no row converted); a ``RecordBatchReader`` or
    another Arrow exporter as a pyarrow ``Table``. For a callable opening a stream, the kept
    rows are a ``pyarrow.RecordBatchReader`` over one more fresh stream, filtered batch by
    batch as it is read (it raises if that stream's rows differ in number).

    Args:
        data, column, progress, settings: as for :func:`dedup_table`.
        with_decisions: return ``(kept, decisions)``, the decisions a ``pyarrow.Table`` as
            :func:`dedup_table` returns it (``datasets.Dataset(decisions)`` makes it a dataset).

    Example:
        >>> kept = neardup.drop_duplicates(df, column="text", threshold=0.8)  # doctest: +SKIP
    """
    if _is_reopenable(data):
        decisions = _decisions(data, progress, _fields(column, settings))
        mask = decisions.column("keep").to_numpy(zero_copy_only=False)
        kept = _kept_stream(data, mask)
        return (kept, decisions) if with_decisions else kept
    source, kept_rows = _as_arrow(data)
    decisions = _decisions(source, progress, _fields(column, settings))
    kept = kept_rows(decisions.column("keep").to_numpy(zero_copy_only=False))
    return (kept, decisions) if with_decisions else kept


def report_of(decisions: Any) -> Report:
    """The run report of a decisions table :func:`dedup_table` made (a dict, as
    :func:`neardup.dedup` returns it)."""
    return json.loads(decisions.schema.metadata[b"neardup.report"])
