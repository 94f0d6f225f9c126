"""The checks of what a call that reads files was given: data held in memory (a list of texts, a
DataFrame, an Arrow table, a Hugging Face dataset) is refused with a ``TypeError`` that says what
was given and which call takes it, before any of it is taken for a path."""

from __future__ import annotations

import os
from typing import Any, List, Optional

#: Longest path Linux takes (PATH_MAX): a longer string is a text, not a file name.
_PATH_MAX = 4096
#: Characters of a text quoted back in a message.
_QUOTED = 40

_TABLE_CALLS = (
    'neardup.drop_duplicates(data, column="text") returns the kept rows as the type it was given, '
    'neardup.dedup_table(data, column="text") the decisions, one row per row'
)
_TEXT_CALLS = (
    "texts in memory are decided by neardup.Deduper() one by one (`keep = deduper(text)`), or "
    'all at once by neardup.dedup_table(pyarrow.table({"text": texts}), column="text")'
)


def _type_name(value: Any) -> str:
    """``pandas.DataFrame`` rather than ``pandas.core.frame.DataFrame``: the package, then the
    class."""
    kind = type(value)
    package = kind.__module__.split(".")[0]
    return kind.__qualname__ if package == "builtins" else f"{package}.{kind.__qualname__}"


def _in_memory(value: Any) -> Optional[str]:
    """What a table-like value is and which calls take it; None for anything else."""
    kind = type(value)
    package = kind.__module__.split(".")[0]
    name = _type_name(value)
    if package == "datasets" and kind.__name__ in ("DatasetDict", "IterableDatasetDict"):
        return (
            f"a {name} (its split names would be taken for paths); pass one split: "
            'neardup.drop_duplicates(data["train"], column="text")'
        )
    if package == "ray" and kind.__name__ in ("Dataset", "MaterializedDataset"):
        return (
            f"a ray.data.{kind.__name__}; neardup.ray.drop_duplicates(ds, column=\"text\") "
            "returns the deduplicated dataset"
        )
    if package in ("pandas", "polars", "pyarrow", "datasets", "duckdb") or any(
        hasattr(value, a) for a in ("__arrow_c_stream__", "__arrow_c_array__", "__dataframe__")
    ):
        return f"a {name}; {_TABLE_CALLS}"
    return None


def _looks_like_text(path: str) -> bool:
    return "\n" in path or "\0" in path or len(path) > _PATH_MAX


def _quoted(text: str) -> str:
    head = text[:_QUOTED].replace("\n", " ")
    return repr(head) + "…" if len(text) > _QUOTED else repr(head)


def check_paths(inputs: Any, call: str) -> Any:
    """``inputs`` as the native call takes them (an iterator read into a list), or a
    ``TypeError`` naming what ``call`` (``"neardup.dedup"``) was given instead of paths."""
    reads = f"{call}() reads files: its inputs are paths (files, directories, glob patterns)"
    given = _in_memory(inputs)
    if given is not None:
        raise TypeError(f"{reads}, but it was given {given}")
    one = isinstance(inputs, (str, bytes, os.PathLike))
    if one:
        items: List[Any] = [inputs]
    elif isinstance(inputs, dict):
        raise TypeError(f"{reads}, but it was given a dict (a row?); {_TABLE_CALLS}")
    else:
        try:
            items = list(inputs)
        except TypeError:
            raise TypeError(
                f"{reads}, but it was given an object of type {_type_name(inputs)}"
            ) from None
        inputs = items
    for i, item in enumerate(items):
        where = "" if one else f" (input {i})"
        if isinstance(item, str) and _looks_like_text(item):
            raise TypeError(
                f"{reads}, but it was given texts: {_quoted(item)}{where}, {len(item):,} "
                f"characters, is no path; {_TEXT_CALLS}"
            )
        if isinstance(item, (str, bytes, os.PathLike)):
            continue
        if isinstance(item, dict):
            raise TypeError(
                f"{reads}, but it was given rows (dicts, as iterating a datasets.Dataset gives); "
                f"{_TABLE_CALLS}"
            )
        raise TypeError(f"{reads}, but input {i} is of type {_type_name(item)}")
    return inputs
