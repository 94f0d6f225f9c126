"""A drop-in replacement for lshcurator 0.2.3, on neardup's engine.

Change one import line::

    from lshcurator import Curator, CuratorConfig          # before
    from neardup.lshcurator import Curator, CuratorConfig  # after

and the same calls give the same results: :meth:`Curator.process_corpus` yields lshcurator's
``(text, keep)`` pairs in lshcurator's order with lshcurator's decisions (its MinHash with seed
36, its blake2b band keys, its frequency filter, its representatives and threshold: the
``--compat lshcurator`` preset, ``docs/compatibility.md``), :meth:`Curator.compute_bucket_keys`
its ``(samples, bands)`` key array and file mapping, :meth:`Curator.init_deduper` its callable
deduper. ``CuratorConfig``, ``DeduperConfig`` and ``Deduper`` have lshcurator's fields,
defaults and signatures.

Differences (``docs/python.md``, "Moving from lshcurator"): ``max_workers`` is a thread count
(lshcurator starts processes) and ``chunk_elements`` is accepted and unused; a null or
non-string field is skipped where lshcurator raises; on a corpus mixing JSONL and Parquet,
Parquet texts are stripped before signing (lshcurator strips only JSONL ones; an all-Parquet
corpus is signed unstripped, as lshcurator does); ``Curator.deduper`` is only set by
``init_deduper``, not by ``process_corpus``; the multiprocessing helpers ``Bucket`` and
``BucketWorkerManager`` are not provided.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Literal, Optional, Tuple, Union

import numpy

from . import _native

__version__ = "0.2.3"

__all__ = [
    "BucketKeyChunk",
    "Curator",
    "CuratorConfig",
    "Deduper",
    "DeduperConfig",
]

ComputeMode = Literal["char", "byte"]
ComputeModeSet = {"char", "byte"}

# lshcurator's dataclasses use slots (and keyword-only fields) where Python has them (3.10+).
_SLOTS = {"slots": True} if sys.version_info >= (3, 10) else {}
_KW_ONLY = {"kw_only": True} if sys.version_info >= (3, 10) else {}


@dataclass(frozen=True, **_SLOTS)
class CuratorConfig:
    """lshcurator's ``CuratorConfig``: the same fields, order and defaults.

    Args:
        shingle_k: shingle size (characters, or bytes with ``compute_mode="byte"``).
        shingle_step: step between shingles.
        bands: LSH bands.
        rows_per_band: signature positions per band (``num_perm = bands * rows_per_band``).
        compute_mode: ``"char"`` or ``"byte"`` shingles.
        max_workers: threads neardup works on (lshcurator: worker processes).
        chunk_elements: lshcurator's shared-memory chunk size; accepted, unused.
        similarity_threshold: estimated similarity at which a text is a duplicate (needed by
            ``process_corpus`` and ``init_deduper``).
        max_representatives_per_bucket: representatives kept per bucket (None: unbounded).
    """

    shingle_k: int
    shingle_step: int
    bands: int
    rows_per_band: int
    compute_mode: ComputeMode = "char"

    max_workers: int = 1
    chunk_elements: int = 1_000_000

    similarity_threshold: Optional[float] = None
    max_representatives_per_bucket: Optional[int] = None

    @property
    def shm_chunk_nbytes(self) -> int:
        """Bytes of one lshcurator shared-memory chunk (``chunk_elements`` uint64 keys)."""
        return self.chunk_elements * numpy.dtype("uint64").itemsize


@dataclass(frozen=True, **_SLOTS)
class DeduperConfig:
    """lshcurator's ``DeduperConfig``: the settings of a :class:`Deduper`."""

    bands: int
    rows_per_band: int
    shingle_k: int
    shingle_step: int
    similarity_threshold: float
    compute_mode: ComputeMode = "char"
    max_representatives_per_bucket: Optional[int] = None

    @property
    def num_perm(self) -> int:
        """Signature width: ``bands * rows_per_band``."""
        return self.bands * self.rows_per_band


@dataclass(frozen=True, **_SLOTS, **_KW_ONLY)
class BucketKeyChunk:
    """A run of rows (or keys, in the ``flat`` layout) of one file in the bucket-key array."""

    start_position: int
    size: int


def _deduper_settings(config: DeduperConfig) -> dict:
    """neardup settings that sign and decide as lshcurator's ``Deduper`` does: the
    ``compat="lshcurator"`` preset spelled out, without its ``trim`` (this deduper signs texts
    as given)."""
    if config.compute_mode not in ComputeModeSet:
        raise ValueError(
            f"Invalid compute_mode: {config.compute_mode}. Must be one of {ComputeModeSet}"
        )
    max_reps = config.max_representatives_per_bucket
    return {
        "hash": "datasketch",
        "seed": 36,
        "band_keys": "lshcurator",
        "num_perm": config.num_perm,
        "bands": config.bands,
        "rows": config.rows_per_band,
        "shingle": config.shingle_k,
        "step": config.shingle_step,
        "tokenize": config.compute_mode,
        "trim": False,
        "exact": False,
        "short_texts": "empty_signature",
        "verify": "estimate",
        "threshold": config.similarity_threshold,
        # A bucket gets its first representative whatever the bound.
        "max_reps": None if max_reps is None else max(max_reps, 1),
    }


class Deduper:
    """lshcurator's ``Deduper``: ``deduper(text)`` is True for a text seen for the first time,
    False for a near duplicate of an earlier kept one, considering only the buckets whose key is
    in ``bucket_keys``.

    Built on neardup's in-memory :class:`neardup.Deduper` with lshcurator's settings; texts are
    signed as given (lshcurator's ``Deduper`` does not strip them). ``bucket_keys`` is sorted in
    place, as lshcurator does.
    """

    def __init__(self, bucket_keys: numpy.ndarray, config: DeduperConfig):
        self.config = config
        if not (0 <= self.config.similarity_threshold <= 1):
            raise ValueError(
                f"similarity_threshold must be in [0, 1], got {self.config.similarity_threshold}"
            )
        self._bucket_keys = bucket_keys
        self._bucket_keys.sort()
        self._deduper = _native.Deduper(
            hot_keys=numpy.ascontiguousarray(bucket_keys, dtype=numpy.uint64).reshape(-1),
            sign_blank=True,
            **_deduper_settings(config),
        )

    @property
    def bucket_keys(self) -> numpy.ndarray:
        """The keys whose buckets count, sorted."""
        return self._bucket_keys

    @property
    def num_buckets(self) -> int:
        """Buckets holding at least one representative."""
        return self._deduper.stats["buckets"]

    @property
    def num_bucket_keys(self) -> int:
        """Number of bucket keys given."""
        return self._bucket_keys.size

    def __call__(self, text: str) -> bool:
        """True when ``text`` is new (kept), False when it duplicates an earlier kept text."""
        return self._deduper(text)


def _path_normalize(path: Union[str, Path, List[Union[str, Path]]]) -> List[Path]:
    """lshcurator's ``path_normalize``: one path or a list of them, as ``Path`` objects."""
    if isinstance(path, str):
        return [Path(path)]
    if isinstance(path, Path):
        return [path]
    if isinstance(path, list):
        normalized = []
        for idx, p in enumerate(path):
            if isinstance(p, str):
                normalized.append(Path(p))
            elif isinstance(p, Path):
                normalized.append(p)
            else:
                raise ValueError(
                    f"Invalid path type at index {idx}: {type(p)}. Expected str or Path."
                )
        return normalized
    raise ValueError(
        f"Invalid path type: {type(path)}. Expected str, Path, or list of str/Path."
    )


def _first_record_fields(path: Path) -> List[str]:
    """The fields lshcurator takes when ``fields=None``: the first record's keys (JSONL) or
    every column (Parquet)."""
    name = path.name.lower()
    if name.endswith(".parquet"):
        try:
            import pyarrow.parquet  # type: ignore[import-untyped]
        except ImportError:
            raise ImportError(
                "fields=None on Parquet needs pyarrow to read the columns: pip install pyarrow"
            ) from None
        return list(pyarrow.parquet.read_schema(path).names)
    opener: Any = open
    if name.endswith(".gz"):
        import gzip

        opener = gzip.open
    with opener(path, "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                return list(json.loads(line).keys())
    return []


class Curator:
    """lshcurator's ``Curator``: deduplicates a corpus with MinHash LSH."""

    def __init__(self, config: CuratorConfig):
        self.config = config
        self.deduper: Deduper

    def init_deduper(self, bucket_keys: numpy.ndarray) -> Deduper:
        """Makes ``self.deduper``: a :class:`Deduper` over ``bucket_keys`` (1-D, or the 2-D
        ``(samples, bands)`` array of :meth:`compute_bucket_keys`, flattened)."""
        if bucket_keys.ndim == 2:
            bucket_keys = bucket_keys.reshape(-1)
        elif bucket_keys.ndim != 1:
            raise ValueError(
                "Expected bucket_keys to be either a 1D array with shape (num_keys,) or a 2D "
                f"array with shape (num_samples, bands), but got shape {bucket_keys.shape}."
            )
        self.deduper = Deduper(
            bucket_keys=bucket_keys,
            config=DeduperConfig(
                bands=self.config.bands,
                rows_per_band=self.config.rows_per_band,
                shingle_k=self.config.shingle_k,
                shingle_step=self.config.shingle_step,
                # None fails in Deduper, as in lshcurator.
                similarity_threshold=self.config.similarity_threshold,  # type: ignore[arg-type]
                compute_mode=self.config.compute_mode,
                max_representatives_per_bucket=self.config.max_representatives_per_bucket,
            ),
        )
        return self.deduper

    @staticmethod
    def select_deduper_bucket_keys(
        bucket_keys: numpy.ndarray,
        filter_freq: int = 1,
    ) -> Tuple[numpy.ndarray, numpy.ndarray]:
        """The keys seen more than ``filter_freq`` times (sorted), and for each row whether it
        holds one of them."""
        if bucket_keys.ndim != 2:
            raise ValueError(
                "Expected bucket_keys to be a 2D array with shape (num_samples, bands), but got "
                f"shape {bucket_keys.shape}."
            )
        num_samples, _bands = bucket_keys.shape
        if num_samples == 0:
            return numpy.empty(0, dtype=numpy.uint64), numpy.empty(0, dtype=numpy.bool_)
        if filter_freq < 0:
            raise ValueError(f"filter_freq must be a non-negative integer, but got {filter_freq}.")
        unique_keys, key_counts = numpy.unique(bucket_keys, return_counts=True)
        hot = unique_keys[key_counts > filter_freq].astype(numpy.uint64, copy=False)
        mask = numpy.asarray(numpy.isin(bucket_keys, hot).any(axis=-1))
        return hot, mask

    def _settings(
        self,
        files: List[Path],
        fields: Union[str, List[str], None],
        filter_low_freq_bucket_keys: int = 1,
    ) -> dict:
        c = self.config
        if c.compute_mode not in ComputeModeSet:
            raise ValueError(f"Invalid compute_mode: {c.compute_mode}. Must be one of {ComputeModeSet}")
        if isinstance(fields, str):
            fields = [fields]
        if not fields:
            fields = _first_record_fields(files[0]) if files else []
        return {
            "inputs": [str(p) for p in files],
            "fields": list(fields),
            "shingle_k": c.shingle_k,
            "shingle_step": c.shingle_step,
            "bands": c.bands,
            "rows_per_band": c.rows_per_band,
            "compute_mode": c.compute_mode,
            "similarity_threshold": 0.0 if c.similarity_threshold is None else c.similarity_threshold,
            "max_representatives_per_bucket": c.max_representatives_per_bucket,
            "filter_low_freq_bucket_keys": filter_low_freq_bucket_keys,
            "max_workers": c.max_workers,
        }

    def process_corpus(
        self,
        files_path: Union[str, Path, List[Union[str, Path]]],
        fields: Union[str, List[str], None] = None,
        filter_low_freq_bucket_keys: int = 1,
        **kwargs: Any,
    ) -> Iterator[Tuple[str, bool]]:
        """Deduplicates the corpus: yields ``(text, keep)`` for every non-empty text (JSONL values
        stripped), in file, record and field order; ``keep`` is False for a near duplicate of an
        earlier kept text.

        Args:
            files_path: a JSONL or Parquet file, or a list of them.
            fields: text field(s); several fields give one text each. None: the fields of the
                first record (JSONL) or every column (Parquet).
            filter_low_freq_bucket_keys: a bucket key counts when seen more often than this.
            **kwargs: ``batch_size`` (lshcurator's Parquet batch size) is accepted and unused.

        When no bucket key passes the filter, nothing is yielded (as lshcurator does).
        """
        if self.config.similarity_threshold is None:
            raise ValueError("similarity_threshold must be set in config for deduplication")
        if not isinstance(filter_low_freq_bucket_keys, int) or filter_low_freq_bucket_keys < 0:
            raise ValueError("filter_low_freq_bucket_keys must be a non-negative integer.")
        kwargs.pop("batch_size", None)
        if kwargs:
            raise TypeError(f"unexpected keyword arguments: {', '.join(sorted(kwargs))}")
        files = _path_normalize(files_path)
        run = _native.process_corpus(self._settings(files, fields, filter_low_freq_bucket_keys))
        if not run.has_hot_keys():
            print(
                "All bucket keys are low frequency and will be filtered out. No deduplication "
                "will be performed."
            )
            return
        yield from run

    def compute_bucket_keys(
        self,
        files_path: Union[str, Path, List[Union[str, Path]]],
        fields: Union[str, List[str], None] = None,
        **kwargs: Any,
    ) -> Tuple[numpy.ndarray, Dict[Path, List[BucketKeyChunk]]]:
        """Every non-empty text's band keys, and where each file's rows are.

        Returns:
            ``numpy.uint64`` keys, shape ``(samples, bands)`` (``key_layout="row_bands"``, the
            default) or ``(samples * bands,)`` (``key_layout="flat"``), rows in file order; and
            ``{path: [BucketKeyChunk(start_position, size)]}`` for every file, in rows (or keys
            for ``flat``).
        """
        key_layout = kwargs.pop("key_layout", "row_bands")
        if key_layout not in {"flat", "row_bands"}:
            raise ValueError(f"Invalid key_layout: {key_layout}")
        kwargs.pop("batch_size", None)
        if kwargs:
            raise TypeError(f"unexpected keyword arguments: {', '.join(sorted(kwargs))}")
        files = _path_normalize(files_path)
        keys, per_file = _native.compute_bucket_keys(self._settings(files, fields))
        # Name files as the caller did when discovery found exactly the files given.
        given = files if len(files) == len(per_file) else [Path(p) for p, _ in per_file]
        unit = self.config.bands if key_layout == "flat" else 1
        mapping: Dict[Path, List[BucketKeyChunk]] = {}
        start = 0
        for path, (_, rows) in zip(given, per_file):
            chunks = mapping.setdefault(path, [])
            if rows:
                chunks.append(BucketKeyChunk(start_position=start * unit, size=rows * unit))
            start += rows
        if key_layout == "flat":
            keys = keys.reshape(-1)
        return keys, mapping
