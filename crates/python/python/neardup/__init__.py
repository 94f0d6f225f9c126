"""neardup: find and remove near-duplicate documents in large text corpora.

MinHash + LSH in two streaming stages (stage 1: every sample's bucket keys and the exact count of
the hot ones; stage 2: only samples with a hot key are compared), in Rust, with the GIL released.
Three levels:

- **Whole runs.** :func:`dedup` is the CLI's ``neardup dedup``: it writes the filtered dataset, the
  decisions and the report, and returns the report. :func:`stream` yields every
  :class:`Decision` as it is made and writes nothing.
- **Stage steps**, for schedulers of their own, as the CLI's commands of the same names, over
  values or files, all of one shape: inputs and settings in; without ``output=``, a value out,
  with it the value written where the CLI writes it and the step's report. :func:`keys` (stage
  1 of one shard, a :class:`KeyTable`), :func:`hot_keys` (the counts of all shards and the
  plan, a :class:`HotKeys`), then the distributed stage 2: :func:`sign` (per shard, a
  :class:`Signed`), :func:`decide` (per group, a :class:`Decided`) and :func:`write` (per
  shard: the dataset and decisions, which end the run). Every value saves to and loads from a
  file or directory (the bytes the step with ``output=`` writes), turns into bytes and back,
  and pickles (Ray's object store carries it). :mod:`neardup.ray` runs the steps as Ray tasks.
- **Tables in memory.** :func:`dedup_table` decides the rows of a pyarrow Table, a polars or
  pandas DataFrame, a ``datasets.Dataset`` or any Arrow stream in place, and
  :func:`drop_duplicates` returns the rows it keeps, as the type it was given
  (:mod:`neardup.frames`); :func:`neardup.ray.drop_duplicates` does it for a Ray dataset.
- **Texts in memory.** :class:`Sketcher` turns texts into signatures and band keys (numpy);
  :class:`Deduper` decides texts one by one (first seen kept).
- **Online dedup.** :class:`Index` is an index many documents are checked against, one at a
  time or in batches, with ``neardup dedup``'s decisions (``docs/online.md``).

:mod:`neardup.lshcurator` is a drop-in replacement for lshcurator 0.2.3.

Settings are keyword arguments named as in a settings file (``docs/tuning.md``):
``threshold=0.85``, ``num_perm=256``, ``fields=["title", "body"]``, ``id_field="url"``,
``threads=4``, … plus ``config="neardup.toml"`` (a settings file, applied first) and
``compat="lshcurator"`` (a preset, applied last). An unknown name is a ``TypeError`` that lists
the valid ones; a bad value a ``ValueError``. I/O errors are ``OSError`` subclasses
(``FileNotFoundError``, ``PermissionError``, …) carrying the CLI's messages.
"""

from __future__ import annotations

import os
import sys
import time
from typing import (
    TYPE_CHECKING,
    Any,
    Dict,
    Iterable,
    Iterator,
    List,
    Optional,
    Sequence,
    Union,
    overload,
)

from . import _native
from ._inputs import check_paths
from ._native import (
    CorruptFileError,
    Decided,
    Decision,
    DecisionStream,
    Deduper,
    HotKeys,
    Index,
    IndexDecision,
    InputError,
    KeyTable,
    Signed,
    Sketcher,
    TokenizerError,
)
from ._report_types import DecideReport, HotReport, KeysReport, Report, SignReport
from ._settings import DedupSettings, DeduperSettings, Settings, SketchSettings

if TYPE_CHECKING:
    from typing_extensions import Unpack

__version__: str = _native.__version__

__all__ = [
    "CorruptFileError",
    "Decided",
    "DedupSettings",
    "DeduperSettings",
    "DecideReport",
    "Decision",
    "DecisionStream",
    "Deduper",
    "HotKeys",
    "HotReport",
    "Index",
    "IndexDecision",
    "InputError",
    "KeyTable",
    "KeysReport",
    "Report",
    "Settings",
    "SignReport",
    "Signed",
    "Sketcher",
    "SketchSettings",
    "TokenizerError",
    "compute_keys",
    "decide",
    "dedup",
    "dedup_table",
    "drop_duplicates",
    "defaults",
    "hot_keys",
    "keys",
    "report_of",
    "settings",
    "sign",
    "stream",
    "write",
]

def __dir__() -> List[str]:
    """The package's public names (and its submodules once imported), not the modules and
    typing names it imports for itself."""
    submodules = [m for m in ("lshcurator", "ray") if m in globals()]
    return sorted([*__all__, "__version__", *submodules])


PathLike = Union[str, "os.PathLike[str]"]
Inputs = Union[PathLike, Iterable[PathLike]]


def _from_bytes(kind: str, data: bytes) -> Any:
    """Rebuilds a pickled value (``KeyTable``, ``HotKeys``, ``Signed``, ``Decided``): their
    ``__reduce__`` names this function and the value's :meth:`to_bytes`."""
    return getattr(_native, kind).from_bytes(data)

#: Seconds a run goes before a progress bar appears (a shorter run stays silent).
PROGRESS_AFTER_SECONDS = 2.0
#: Seconds between progress bar updates.
_POLL_SECONDS = 0.2


def settings() -> Dict[str, List[str]]:
    """Every setting's name, by section of the settings file: ``{"sketch": ["tokenize", …], …}``."""
    return _native.settings()


def defaults() -> Dict[str, Any]:
    """Every setting's default value, by name: ``{"threshold": 0.8, "num_perm": 128, …}``."""
    return _native.defaults()


def _tqdm_class(progress: Optional[bool]):
    """tqdm's bar class when bars are wanted and tqdm is installed, else None."""
    if progress is False:
        return None
    try:
        from tqdm.auto import tqdm  # type: ignore[import-untyped]
    except ImportError:
        if progress:
            raise ImportError("progress=True needs tqdm: pip install tqdm") from None
        return None
    return tqdm


#: Seconds between progress lines when stderr is no terminal (a batch job's log).
_LINE_EVERY_SECONDS = 10.0
#: Seconds a stage is watched before a rate is shown (the first look finds the blocks read
#: before it, and a rate over them would be absurd).
_RATE_AFTER_SECONDS = 1.0


def _mb(n: float) -> str:
    mb = n / 1e6
    return f"{mb:.1f} MB" if mb < 10 else f"{mb:.0f} MB"


def _stage_name(stage: int) -> str:
    return "stage 1 keys" if stage == 1 else "stage 2 dedup"


class _Bars:
    """The two stages' progress on stderr once a run has gone on for a while: tqdm bars on a
    terminal or in a notebook (left in place when the run ends), else a line when a stage
    starts and every ten seconds, as the CLI logs them (a log file gets no bar frames)."""

    def __init__(self, tqdm, show_at: float, stream=None):
        self._tqdm = tqdm
        self._show_at = show_at
        self._stream = stream if stream is not None else sys.stderr
        self._bar: Any = None
        self._stage = 0
        self._since = 0.0
        self._done_then = 0
        self._last_line = 0.0
        self._lines = tqdm is not None and not self._is_display(tqdm, self._stream)

    @staticmethod
    def _is_display(tqdm, stream) -> bool:
        """Whether bars can be drawn: a terminal, or a notebook (tqdm.auto's widget class)."""
        if any("notebook" in c.__module__ for c in getattr(tqdm, "__mro__", ())):
            return True
        isatty = getattr(stream, "isatty", None)
        return bool(isatty and isatty())

    def update(self, run) -> None:
        if self._tqdm is None or time.monotonic() < self._show_at:
            return
        stage, done, total, samples = run.progress()
        now = time.monotonic()
        if stage != self._stage:
            self.close()
            self._stage, self._since, self._done_then = stage, now, done
            if self._lines:
                self._line(f"{_stage_name(stage)}: started, ~{_mb(total)} to read")
                self._last_line = now
            else:
                # Counted from what is done already: the rate is over what the bar sees.
                self._bar = self._tqdm(
                    total=max(total, done) or None,
                    initial=done,
                    unit="B",
                    unit_scale=True,
                    unit_divisor=1024,
                    desc=_stage_name(stage).ljust(13),
                    leave=True,
                    file=self._stream,
                )
        if self._lines:
            if now - self._last_line >= _LINE_EVERY_SECONDS:
                self._last_line = now
                self._line(f"{_stage_name(stage)}: {self._describe(done, total, samples, now)}")
            return
        bar = self._bar
        if total and done > total:
            bar.total = done
        bar.n = done
        bar.set_postfix_str(f"{samples} samples", refresh=False)
        bar.refresh()

    def _describe(self, done: int, total: int, samples: int, now: float) -> str:
        s = f"{_mb(done)} of ~{_mb(max(total, done))}"
        if total:
            s += f" ({100 * min(done, total) / total:.0f} %)"
        s += f", {samples} samples"
        elapsed = now - self._since
        if elapsed >= _RATE_AFTER_SECONDS and done > self._done_then:
            rate = (done - self._done_then) / elapsed
            s += f", {_mb(rate)}/s"
            if total > done:
                s += f", ETA {int(-(-(total - done) // rate))} s"
        return s

    def _line(self, text: str) -> None:
        print(f"neardup: {text}", file=self._stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def dedup(
    inputs: Inputs,
    output: Optional[PathLike] = None,
    decisions: Optional[PathLike] = None,
    report: Optional[PathLike] = None,
    *,
    progress: Optional[bool] = None,
    **settings: Unpack[DedupSettings],
) -> Report:
    """Removes near duplicates from a corpus: the CLI's ``neardup dedup``.

    Args:
        inputs: files, directories (read recursively) and glob patterns; JSONL (plain, ``.gz``,
            ``.zst``) and Parquet.
        output: directory for the filtered dataset (same relative paths and formats as the
            inputs); it must not exist unless ``overwrite=True``.
        decisions: decisions file, one row per sample (``.jsonl`` or ``.parquet``).
        report: run report (JSON) to write.
        progress: tqdm bars on stderr when the run goes on for more than a couple of seconds
            (None: when tqdm is installed; True: always, tqdm required; False: never); when
            stderr is no terminal (a log file), a line per stage and every ten seconds instead.
        **settings: settings by name (``threshold``, ``fields``, ``id_field``, ``num_perm``,
            ``threads``, ``overwrite``, ``max_output_bytes``, …; see ``docs/tuning.md``), and
            ``config=`` / ``compat=``. ``index_out=PATH`` saves the run's index and
            ``against=[PATH, …]`` deduplicates against saved indexes of earlier runs (records
            get the decisions of one run over the indexed runs' inputs, then these; see
            ``docs/incremental.md``).

    Returns:
        The run report: the JSON ``--report`` writes, as a dict (``totals``, ``stage1``,
        ``stage2``, ``files``, ``config``, …; ``against`` and ``index`` with saved indexes).

    Raises:
        TypeError: an unknown setting, or data in memory given as ``inputs`` (a list of texts,
            a DataFrame, an Arrow table, a Hugging Face dataset: the message names the call
            that takes it).
        ValueError: a bad setting value.
        FileNotFoundError: no input found.
        OSError: reading or writing failed (the message names the file).
        InputError: a bad record with ``on_error="fail"``.
    """
    inputs = check_paths(inputs, "neardup.dedup")
    run = _native.start_dedup(inputs, output, decisions, report, settings)
    return _report(run, progress)


def _finish(run, progress: Optional[bool] = None) -> None:
    """Waits for a native run with the GIL released, showing bars when it goes on; on Ctrl-C,
    cancels it and waits until it has removed what it wrote, then lets the interrupt through."""
    bars = None
    try:
        tqdm = _tqdm_class(progress)
        show_at = time.monotonic() + (0.0 if progress else PROGRESS_AFTER_SECONDS)
        bars = _Bars(tqdm, show_at)
        while not run.wait(_POLL_SECONDS):
            bars.update(run)
    except KeyboardInterrupt:
        # The run stops at its next block and removes what it wrote (as the CLI does on SIGINT);
        # wait for that, so that nothing of it is left when the interrupt reaches the caller.
        run.cancel()
        while not run.wait(_POLL_SECONDS):
            pass
        raise
    finally:
        if bars is not None:
            bars.close()


def _report(run, progress: Optional[bool] = None) -> Any:
    """The report (a dict: a run's :class:`Report`, or a step's) of a native run, once it has
    ended; its error otherwise."""
    import json

    _finish(run, progress)
    return json.loads(run.result())


from .frames import dedup_table, drop_duplicates, report_of  # noqa: E402


def stream(inputs: Inputs, **settings: Unpack[Settings]) -> DecisionStream:
    """Runs both stages and yields every :class:`Decision` in input order as it is made.

    Nothing is written; memory stays bounded (decisions wait in a bounded queue, so a slow
    consumer slows the run). After the last decision, the stream's ``report`` holds the run
    report; an error of the run is raised when the decisions end.

    Args:
        inputs: files, directories and glob patterns, as for :func:`dedup`.
        **settings: settings by name, as for :func:`dedup` (none of the output ones).

    Example:
        >>> for d in neardup.stream("crawl/", threshold=0.9):   # doctest: +SKIP
        ...     if not d.keep:
        ...         print(d.file, d.record, "duplicates", d.dup_of_file, d.dup_of_record)
    """
    return _native.stream(check_paths(inputs, "neardup.stream"), settings)


def _step(run, output: Optional[PathLike], progress: Optional[bool]) -> Any:
    """What a step run made, once it has ended: its value without ``output``, its report (a
    dict) with one; its error otherwise."""
    if output is None:
        _finish(run, progress)
        return _native.step_value(run)
    return _report(run, progress)


def _out(output: Optional[PathLike]) -> Optional[str]:
    return None if output is None else os.fspath(output)


@overload
def keys(
    inputs: Inputs,
    shard: int = 0,
    output: None = None,
    *,
    progress: Optional[bool] = None,
    **settings: Unpack[Settings],
) -> KeyTable: ...
@overload
def keys(
    inputs: Inputs,
    shard: int,
    output: PathLike,
    *,
    progress: Optional[bool] = None,
    **settings: Unpack[Settings],
) -> KeysReport: ...
def keys(
    inputs: Inputs,
    shard: int = 0,
    output: Optional[PathLike] = None,
    *,
    progress: Optional[bool] = None,
    **settings: Unpack[Settings],
) -> Union[KeyTable, KeysReport]:
    """Stage 1 over one shard of inputs (``neardup keys INPUTS --shard I -o OUTPUT``): every
    sample's keys, nothing counted. Run it per shard (shards numbered from 0 in input order) and
    count the tables together with :func:`hot_keys`; every shard must use the same settings.

    Without ``output``, returns the shard's :class:`KeyTable` (in memory). With ``output``,
    streams it into that key-table file (memory stays bounded however large the shard; the file
    is there whole or not at all: the bytes :meth:`KeyTable.save` writes) and returns the report.

    Args:
        inputs: this shard's files, directories and glob patterns. Decisions name the files as
            given here (a relative path stays relative to the working directory).
        shard: the shard's number (from 0; rows of all shards are counted in shard order).
        output: the key-table file to write; None for a value.
        progress: tqdm bars, as for :func:`dedup`.
        **settings: settings by name, as for :func:`dedup` (none of the output ones); every
            step of a run must get the same.

    Returns:
        A :class:`KeyTable`; with ``output``, the shard's report: ``shard``, ``table``,
        ``inputs``, ``input_problems`` and ``stage1`` (records, samples, speed), as ``neardup
        keys --report`` writes it.
    """
    inputs = check_paths(inputs, "neardup.keys")
    return _step(_native.start_keys(inputs, shard, _out(output), settings), output, progress)


def compute_keys(inputs: Inputs, shard: int = 0, **settings: Unpack[Settings]) -> KeyTable:
    """:func:`keys` without ``output``: the shard's :class:`KeyTable`, in memory (kept for the
    programs written before :func:`keys` made values; no progress bars).

    Args:
        inputs: this shard's files, directories and glob patterns.
        shard: the shard's number; the rows of all shards are counted in shard order.
        **settings: settings by name, as for :func:`dedup` (none of the output ones).
    """
    inputs = check_paths(inputs, "neardup.compute_keys")
    return _step(_native.start_keys(inputs, shard, None, settings), None, False)


@overload
def hot_keys(
    tables: Iterable[Union[KeyTable, PathLike]],
    min_key_count: int = 1,
    groups: int = 1,
    output: None = None,
    *,
    memory_limit: Optional[int] = None,
    spill_dir: Optional[PathLike] = None,
    threads: int = 0,
    against: Sequence[PathLike] = (),
) -> HotKeys: ...
@overload
def hot_keys(
    tables: Iterable[Union[KeyTable, PathLike]],
    min_key_count: int,
    groups: int,
    output: PathLike,
    *,
    memory_limit: Optional[int] = None,
    spill_dir: Optional[PathLike] = None,
    threads: int = 0,
    against: Sequence[PathLike] = (),
) -> HotReport: ...
def hot_keys(
    tables: Iterable[Union[KeyTable, PathLike]],
    min_key_count: int = 1,
    groups: int = 1,
    output: Optional[PathLike] = None,
    *,
    memory_limit: Optional[int] = None,
    spill_dir: Optional[PathLike] = None,
    threads: int = 0,
    against: Sequence[PathLike] = (),
) -> Union[HotKeys, HotReport]:
    """Counts the keys of all shards' tables together: the keys seen more than ``min_key_count``
    times (the ``neardup hot`` step), and with ``groups`` > 1 the plan of a distributed stage 2
    (``neardup hot --groups``): the connected components of hot rows packed into ``groups``
    groups, one :func:`decide` each.

    Without ``output``, returns the :class:`HotKeys` (save them with :meth:`HotKeys.save` for
    :func:`sign`, :func:`decide` and :func:`write` on other machines). With ``output``, writes
    that hot-key file (whole or not at all) and returns the report, as ``neardup hot --report``
    writes it.

    Args:
        tables: :class:`KeyTable` objects (in memory), or the paths of key-table files (read as
            streams, never loaded whole), in any order.
        min_key_count: a key is hot when seen more than this many times.
        groups: groups of the plan (1: no plan, one ``decide``).
        output: the hot-key file to write; None for a value.
        memory_limit: table files only: when all tables' keys exceed this many bytes, count them
            from spill files partition by partition (``--memory-limit``).
        spill_dir: table files only: directory for spill files (``--spill-dir``).
        threads: counting threads (0: all cores).
        against: table files only: saved indexes of earlier runs whose keys count once more
            each (``neardup hot --against``; give :func:`sign`, :func:`decide` and
            :func:`write` the same ``against=``).

    Raises:
        ValueError: tables made with different settings, or two with the same shard number.
        OSError: a table file cannot be read (:class:`CorruptFileError` when damaged).
    """
    run = _native.start_hot(
        list(tables), min_key_count, groups, memory_limit, spill_dir, threads,
        [os.fspath(p) for p in against], _out(output),
    )
    return _step(run, output, False)


@overload
def sign(
    table: Union[KeyTable, PathLike],
    hot: Union[HotKeys, PathLike],
    output: None = None,
    *,
    progress: Optional[bool] = None,
    **settings: Unpack[Settings],
) -> Signed: ...
@overload
def sign(
    table: Union[KeyTable, PathLike],
    hot: Union[HotKeys, PathLike],
    output: PathLike,
    *,
    progress: Optional[bool] = None,
    overwrite: bool = False,
    **settings: Unpack[Settings],
) -> SignReport: ...
def sign(
    table: Union[KeyTable, PathLike],
    hot: Union[HotKeys, PathLike],
    output: Optional[PathLike] = None,
    *,
    progress: Optional[bool] = None,
    overwrite: bool = False,
    **settings: Unpack[Settings],
) -> Union[Signed, SignReport]:
    """Distributed stage 2, per shard (``neardup sign TABLE --hot HOT -o OUTPUT``): re-reads
    the shard's inputs and signs each of its hot samples: what deciding it needs, one stream per
    group of the plan.

    Without ``output``, returns the result as a :class:`Signed` value (in memory: about the size
    of the sign directory); give each :func:`decide` task only its group's part,
    ``signed.group(g)``. With ``output``, writes the directory (published whole at the end, with
    a ``manifest.json``: the bytes :meth:`Signed.save` writes) and returns the report.

    Args:
        table: the shard's :class:`KeyTable`, or its key-table file (from :func:`keys`).
        hot: the :class:`HotKeys` (with the plan), or the hot-key file.
        output: the directory to write; None for a value. A directory that is not empty is
            refused (``OSError``), and one holding an input of the run too (``ValueError``).
        progress: tqdm bars, as for :func:`dedup`.
        overwrite: replace an earlier sign output in ``output`` (only the files its manifest
            lists; anything else there is still refused).
        **settings: the settings :func:`keys` used, and the decision settings (``threshold``,
            ``max_reps``, ``verify``), the same for every step.

    Returns:
        A :class:`Signed` value; with ``output``, the sign report (``manifest``: what was signed
        per group; ``stage2``: records read).
    """
    run = _native.start_sign(table, hot, _out(output), settings, overwrite)
    return _step(run, output, progress)


@overload
def decide(
    signed: Iterable[Union[Signed, PathLike]],
    hot: Union[HotKeys, PathLike],
    group: int,
    output: None = None,
    **settings: Unpack[Settings],
) -> Decided: ...
@overload
def decide(
    signed: Iterable[Union[Signed, PathLike]],
    hot: Union[HotKeys, PathLike],
    group: int,
    output: PathLike,
    *,
    overwrite: bool = False,
    **settings: Unpack[Settings],
) -> DecideReport: ...
def decide(
    signed: Iterable[Union[Signed, PathLike]],
    hot: Union[HotKeys, PathLike],
    group: int,
    output: Optional[PathLike] = None,
    *,
    overwrite: bool = False,
    **settings: Unpack[Settings],
) -> Union[Decided, DecideReport]:
    """Distributed stage 2, per group (``neardup decide SIG... --hot HOT --group G -o OUTPUT``):
    takes group ``group``'s signed samples from every shard and decides them in global row
    order, exactly as one ``neardup dedup`` would. Opens no input file. Memory: the group's
    representatives (bounded by ``max_reps``) and its decisions.

    Without ``output``, returns the decisions as a :class:`Decided` value; give each
    :func:`write` task only its shard's part, ``decided.shard(i)``. With ``output``, writes the
    directory (one stream per shard and a ``manifest.json``: the bytes :meth:`Decided.save`
    writes) and returns the report.

    Args:
        signed: every shard's :func:`sign` output, in any order, each once: :class:`Signed`
            values (whole, or their part for this group) or sign output directories, mixed
            freely.
        hot: the :class:`HotKeys` or hot-key file the sign outputs were made with.
        group: the group to decide (0 to ``HotKeys.groups`` − 1).
        output: the directory to write; None for a value. A directory that is not empty is
            refused (``OSError``), and one holding an input of the run too (``ValueError``).
        overwrite: replace an earlier decide output in ``output`` (only the files its manifest
            lists; anything else there is still refused).
        **settings: the same settings as every other step.

    Returns:
        A :class:`Decided` value; with ``output``, the decide report (``manifest``: decisions per
        shard and the decision counters).

    Raises:
        ValueError: a sign output made with another hot-key file or other settings, a shard
            missing or given twice, a part without this group (the message names the value or
            directory).
    """
    run = _native.start_decide(list(signed), hot, group, _out(output), settings, overwrite)
    return _step(run, output, False)


def write(
    table: Union[KeyTable, PathLike],
    hot: Union[HotKeys, PathLike],
    decided: Iterable[Union[Decided, PathLike]],
    output: Optional[PathLike] = None,
    decisions: Optional[PathLike] = None,
    report: Optional[PathLike] = None,
    *,
    progress: Optional[bool] = None,
    **settings: Unpack[DedupSettings],
) -> Report:
    """Distributed stage 2, per shard (``neardup write TABLE --hot HOT --decided DEC... -o
    OUTPUT --decisions FILE``): re-reads the shard's inputs and writes its part of the filtered
    dataset into ``output`` (a directory the shards share, each publishing its own files under
    its own manifest) and its decisions. The shards' decisions files, concatenated in shard
    order, are byte for byte those of one :func:`dedup` over the same inputs.

    Args:
        table: the shard's :class:`KeyTable` or key-table file.
        hot: the :class:`HotKeys` or hot-key file.
        decided: every group's :func:`decide` output, in any order: :class:`Decided` values
            (whole, or their part for this shard) or decide output directories, mixed freely.
        output: the shared output directory.
        decisions: this shard's decisions file.
        report: this shard's run report (JSON).
        progress: tqdm bars, as for :func:`dedup`.
        **settings: the same settings as every other step, and the output ones (``overwrite``,
            ``max_output_bytes``, …).

    Returns:
        The shard's run report (as ``--report`` writes it).
    """
    run = _native.start_write(
        table,
        hot,
        list(decided),
        output,
        decisions,
        report,
        settings,
    )
    return _report(run, progress)
