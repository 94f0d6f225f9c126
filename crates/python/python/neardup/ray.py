"""neardup on a Ray cluster: :func:`dedup` runs the steps of a distributed run as Ray tasks.

::

    keys (per shard) → hot + plan (once) → sign (per shard) → decide (per group) → write (per shard)

The decisions and outputs are byte for byte those of one ``neardup dedup`` over the same inputs
(shards in order). Every value between the steps is a file in ``work_dir``, which is either an
object storage prefix (``s3://bucket/work/``, also ``gs://`` and ``az://``: every node reaches it
with its own credentials, from the standard ``AWS_*`` environment or ``~/.aws``), or shared
storage that the driver and every node see at the same path (NFS, a parallel file system, or one
machine's disk for a one-machine cluster). The inputs, ``output`` and ``decisions`` may be
object storage URLs or such paths too. Relative paths are read from the driver's working
directory, on every node, so decisions name the files as given. Only scratch space stays on each
node's local disk (``TMPDIR``: the rows of a key table on their way to object storage, and the
hot-key step's spill files).

**Resumable.** A task whose output is complete in ``work_dir`` (published whole, and made with
this run's hot-key file and settings) is not run again: a driver killed after hours loses only
the tasks that were running. ``work_dir`` records the run's settings and shards
(``run.json``) and refuses to serve another run. A task retried after its node died during the
commit of its outputs finds them settled by its own start (a dead run's interrupted commit is
rolled forward or back before anything else happens there): whole and reused, or absent and made
again.

**Memory per task.** ``keys``, ``sign`` and ``write`` hold one shard's blocks in flight (as
``neardup dedup`` does, bounded by ``threads`` × the block size, not by the shard's size) and,
in ``sign`` and ``write``, the shard's hot mask, which goes to a scratch mapping in ``spill_dir``
past a sixteenth of ``memory_limit``; ``decide`` holds one group's representatives (bounded by
``max_reps`` per bucket; with ``memory_limit`` they spill past half of it) and streams its
inputs; ``hot`` counts the keys of all shards, from spill files beyond ``memory_limit``.

:func:`drop_duplicates` does the same for a ``ray.data.Dataset``, with its blocks as shards: the
steps run over the blocks in the object store (nothing is written to files), and the rows kept
come back as a Dataset.

Install Ray with ``pip install "neardup[ray]"``.
"""

from __future__ import annotations

import functools
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Union

import neardup
from neardup import _native
from neardup._inputs import check_paths

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from neardup._settings import DedupSettings, Settings

__all__ = ["dedup", "drop_duplicates"]

PathLike = Union[str, "os.PathLike[str]"]

#: Settings the hot-key step takes (the rest go to the other steps).
_HOT_SETTINGS = ("min_key_count", "memory_limit", "spill_dir", "threads", "against")


def _is_url(path: str) -> bool:
    """Whether `path` names object storage (``s3://``, ``gs://``, ``az://``), which every node
    reaches with its own credentials (the ``AWS_*`` environment, ``~/.aws``)."""
    return "://" in path and path.split("://", 1)[0] in ("s3", "s3a", "gs", "az")


def _absolute(path: str) -> str:
    """A local path made absolute (it must name the same place on every node); a URL as is."""
    return path if _is_url(path) else os.path.abspath(path)


def _join(base: str, *parts: str) -> str:
    """``base/part/…``: for a URL by ``/`` (a ``pathlib`` path would fold its ``//``)."""
    if _is_url(base):
        return "/".join([base.rstrip("/"), *parts])
    return os.path.join(base, *parts)


def _make_parent(path: str) -> None:
    """Creates the directory of a local file (object storage needs none)."""
    if not _is_url(path):
        Path(path).parent.mkdir(parents=True, exist_ok=True)


def _table(work: str, shard: int) -> str:
    return _join(work, "keys", f"keys-{shard:05d}.ndk")


def _hot_file(work: str) -> str:
    return _join(work, "hot.ndh")


def _sign_dir(work: str, shard: int) -> str:
    return _join(work, "sign", f"sig-{shard:05d}")


def _decide_dir(work: str, group: int) -> str:
    return _join(work, "decide", f"decided-{group:05d}")


def _shard_decisions(work: str, shard: int) -> str:
    return _join(work, "write", f"decisions-{shard:05d}.jsonl")


def _shard_report(work: str, shard: int) -> str:
    return _join(work, "write", f"report-{shard:05d}.json")


def _node() -> str:
    import ray

    return ray.get_runtime_context().get_node_id()


def _made_with(directory: str, fingerprint: int) -> bool:
    """Whether a sign or decide output is complete (its manifest, published last, is there) and
    was made with the hot-key file of this fingerprint."""
    try:
        manifest = _native.read_file(_join(directory, "manifest.json"))
        return manifest is not None and json.loads(manifest).get("hot") == fingerprint
    except (OSError, ValueError):
        return False


def _read_report(path: str) -> Optional[Dict[str, Any]]:
    """A write task's report (published last of its outputs), or None when it is not there."""
    data = _native.read_file(path)
    return None if data is None else json.loads(data)


def _timed(task):
    """Adds the task's own time (``seconds``) to its result, for the report's ``steps``."""

    @functools.wraps(task)
    def timed(*args: Any) -> Dict[str, Any]:
        started = time.perf_counter()
        result = task(*args)
        result["seconds"] = time.perf_counter() - started
        return result

    return timed


@_timed
def _keys_task(cwd: str, work: str, shard: int, inputs: List[str], settings: Dict[str, Any]):
    os.chdir(cwd)
    table = _table(work, shard)
    if _native.file_exists(table):
        return {"reused": True, "node": _node()}
    _make_parent(table)
    try:
        neardup.keys(inputs, shard, table, progress=False, **settings)
    except Exception:
        # The retry of a task whose node died while publishing the table.
        if _native.file_exists(table):
            return {"reused": True, "node": _node()}
        raise
    return {"reused": False, "node": _node()}


@_timed
def _hot_task(cwd: str, work: str, shards: int, groups: int, hot_settings: Dict[str, Any], *_keys):
    os.chdir(cwd)
    path = _hot_file(work)
    reused = _native.file_exists(path)
    if reused:
        hot = neardup.HotKeys.load(path)
    else:
        tables = [_table(work, s) for s in range(shards)]
        hot = neardup.hot_keys(tables, groups=groups, **hot_settings)
        hot.save(path)
    return {
        "reused": reused,
        "node": _node(),
        "fingerprint": hot.fingerprint,
        "groups": hot.groups,
        "hot_keys": len(hot),
    }


@_timed
def _sign_task(cwd: str, work: str, shard: int, settings: Dict[str, Any], hot: Dict[str, Any]):
    os.chdir(cwd)
    out = _sign_dir(work, shard)
    if _made_with(out, hot["fingerprint"]):
        return {"reused": True, "node": _node()}
    _make_parent(out)
    try:
        neardup.sign(_table(work, shard), _hot_file(work), out, progress=False, **settings)
    except Exception:
        if _made_with(out, hot["fingerprint"]):
            return {"reused": True, "node": _node()}
        raise
    return {"reused": False, "node": _node()}


@_timed
def _decide_task(
    cwd: str, work: str, group: int, shards: int, settings: Dict[str, Any], hot: Dict[str, Any], *_signed
):
    os.chdir(cwd)
    out = _decide_dir(work, group)
    if _made_with(out, hot["fingerprint"]):
        return {"reused": True, "node": _node()}
    _make_parent(out)
    signed = [_sign_dir(work, s) for s in range(shards)]
    try:
        neardup.decide(signed, _hot_file(work), group, out, **settings)
    except Exception:
        if _made_with(out, hot["fingerprint"]):
            return {"reused": True, "node": _node()}
        raise
    return {"reused": False, "node": _node()}


@_timed
def _write_task(
    cwd: str,
    work: str,
    shard: int,
    groups: int,
    output: Optional[str],
    settings: Dict[str, Any],
    hot: Dict[str, Any],
    *_decided,
):
    os.chdir(cwd)
    report = _shard_report(work, shard)
    # The report is published with the shard's outputs and decisions, all or nothing (on object
    # storage, last of them).
    done = _read_report(report)
    if done is not None:
        return {"reused": True, "node": _node(), "report": done}
    _make_parent(report)
    decided = [_decide_dir(work, g) for g in range(groups)]
    try:
        result = neardup.write(
            _table(work, shard),
            _hot_file(work),
            decided,
            output=output,
            decisions=_shard_decisions(work, shard),
            report=report,
            progress=False,
            **settings,
        )
    except Exception:
        done = _read_report(report)
        if done is not None:
            return {"reused": True, "node": _node(), "report": done}
        raise
    return {"reused": False, "node": _node(), "report": result}


def _shards_of(inputs: Any, shards: Optional[Sequence[Sequence[PathLike]]]) -> List[List[str]]:
    if shards is not None:
        split = [[os.fspath(p) for p in shard] for shard in shards]
        if not split or any(not s for s in split):
            raise ValueError("shards= must be a non-empty list of non-empty lists of paths")
        if inputs is not None:
            given = [os.fspath(inputs)] if isinstance(inputs, (str, os.PathLike)) else [
                os.fspath(p) for p in inputs
            ]
            if given != [p for s in split for p in s]:
                raise ValueError(
                    "shards= must list the inputs in their order (or give inputs=None): "
                    f"inputs {given}, shards {split}"
                )
        return split
    if inputs is None:
        raise ValueError("give inputs, or shards= (lists of paths)")
    if isinstance(inputs, (str, os.PathLike)):
        return [[os.fspath(inputs)]]
    split = [[os.fspath(p)] for p in inputs]
    if not split:
        raise ValueError("no inputs given")
    return split


def _claim_work_dir(work: str, identity: Dict[str, Any]) -> None:
    """Records the run in ``work_dir/run.json``, or checks that the one recorded is this one."""
    path = _join(work, "run.json")
    _make_parent(path)
    data = _native.read_file(path)
    if data is not None:
        recorded = json.loads(data)
        if recorded != identity:
            differ = sorted(k for k in set(recorded) | set(identity) if recorded.get(k) != identity.get(k))
            raise ValueError(
                f"{work} holds the intermediate files of another run (its {', '.join(differ)} "
                f"differ, see {path}): give this run a work_dir of its own, or remove that one"
            )
        return
    _native.write_file(path, (json.dumps(identity, indent=2, sort_keys=True) + "\n").encode())


def _merge_clusters(work: str, groups: int) -> Dict[str, Any]:
    """The run's duplicate clusters, as a one-process run reports them (``stage2.clusters``):
    the decide steps' counts added up (a cluster never spans two groups)."""
    sizes: Dict[int, int] = {}
    largest: List[Dict[str, Any]] = []
    for g in range(groups):
        manifest = _native.read_file(_join(_decide_dir(work, g), "manifest.json"))
        if manifest is None:
            raise FileNotFoundError(f"{_decide_dir(work, g)}: the decide output is gone")
        clusters = json.loads(manifest)["clusters"]
        for s in clusters["sizes"]:
            sizes[s["size"]] = sizes.get(s["size"], 0) + s["clusters"]
        largest.extend(clusters["largest"])
    # The order of the Rust report: largest first, ties by file name, record and field.
    largest.sort(key=lambda c: (-c["size"], c["file"], c["record"], c["field"]))
    return {"sizes": [{"size": k, "clusters": sizes[k]} for k in sorted(sizes)], "largest": largest[:10]}


def _sum_totals(reports: List[Dict[str, Any]]) -> Dict[str, Any]:
    totals: Dict[str, Any] = {}
    for r in reports:
        for k, v in (r.get("totals") or {}).items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                totals[k] = totals.get(k, 0) + v
    return totals


def _shipped_tokenizer(settings: Mapping[str, Any], ray: Any) -> Dict[str, Any]:
    """Checks that a callable ``tokenizer=`` can be sent to the workers (pickled with Ray's
    cloudpickle) before any task runs, and returns what stands for it in the work directory's
    identity: the settings' name of it (``tokenize``), never the callable."""
    tokenizer = settings.get("tokenizer")
    if tokenizer is None or isinstance(tokenizer, str):
        return {}
    try:
        ray.cloudpickle.dumps(tokenizer)
    except Exception as e:
        raise TypeError(
            f"tokenizer {tokenizer!r} cannot be sent to Ray workers: pickling it failed ({e}); "
            "give a module-level function, or an object that pickles"
        ) from e
    named = {k: settings[k] for k in ("tokenizer", "tokenizer_name") if k in settings}
    name = neardup.Sketcher(**named).settings["tokenize"]
    return {"tokenizer": name, "tokenizer_name": None}


def dedup(
    inputs: Any,
    output: Optional[PathLike],
    decisions: Optional[PathLike],
    work_dir: PathLike,
    shards: Optional[Sequence[Sequence[PathLike]]] = None,
    groups: Optional[int] = None,
    address: Optional[str] = None,
    *,
    max_retries: int = 3,
    task_cpus: float = 1,
    **settings: Unpack[DedupSettings],
) -> Dict[str, Any]:
    """Removes near duplicates with Ray tasks: ``neardup dedup`` on a cluster.

    Args:
        inputs: the input paths (files, directories, globs); each one a shard unless
            ``shards=`` is given. Decisions name files as given (relative paths are taken from
            the driver's working directory on every node).
        output: the directory of the filtered dataset (shared storage, or an object storage
            prefix such as ``s3://bucket/out/``), or None.
        decisions: the decisions file (JSONL; a path or a URL), the shards' decisions
            concatenated in order; or None.
        work_dir: the directory of the intermediate files (shared storage, or an object storage
            prefix; see the module's docs). Give the same one again to resume a run.
        shards: lists of paths, one list per shard, in order (then ``inputs`` is None or the same
            paths in the same order).
        groups: ``decide`` tasks (the plan's groups) [default: the number of shards].
        address: the Ray cluster to connect to (``ray.init(address=…)``) when Ray is not
            initialised yet; None: ``RAY_ADDRESS`` or a local cluster.
        max_retries: times Ray runs a task again when its worker or node dies.
        task_cpus: CPUs each task reserves (and the threads it uses, unless ``threads=`` is
            given).
        **settings: settings by name, as for :func:`neardup.dedup` (``threshold``, ``fields``,
            ``overwrite``, …). A callable ``tokenizer=`` is pickled to every task (a callable
            that cannot be pickled is refused before any task runs) and called there.

    Returns:
        A report: ``shards``, ``groups``, ``tasks``, ``tasks_reused`` (tasks whose output was
        found complete in ``work_dir``), ``nodes`` (ids of the nodes tasks ran on), ``steps``
        (per step: ``tasks``, ``reused``, and the ``seconds`` and ``longest_seconds`` of the
        tasks that ran, measured inside them, so Ray's scheduling is not included), ``totals``
        (summed over the shards' reports), ``clusters`` (the duplicate clusters, as a one-process
        run's report has them under ``stage2``) and ``shard_reports`` (each shard's run report).
    """
    import ray

    if output is None and decisions is None:
        raise ValueError("give output and/or decisions")
    if decisions is not None and os.fspath(decisions).endswith(".parquet"):
        raise ValueError(
            f"{os.fspath(decisions)}: the Ray runner writes JSONL decisions (the shards' files "
            "concatenated); give a name not ending in .parquet"
        )
    if decisions is not None:
        # Before any work: the shards' decisions are concatenated into it at the end.
        _native.check_decisions_output(os.fspath(decisions))
    if inputs is not None:
        inputs = check_paths(inputs, "neardup.ray.dedup")
    split = _shards_of(inputs, shards)
    tokenizer = _shipped_tokenizer(settings, ray)
    groups = len(split) if groups is None else int(groups)
    if groups < 1:
        raise ValueError("groups must be at least 1")
    cwd = os.getcwd()
    work = _absolute(os.fspath(work_dir))
    out = None if output is None else _absolute(os.fspath(output))
    output_names = set(neardup.settings().get("output", []))
    step_settings = {k: v for k, v in settings.items() if k not in output_names}
    given: Dict[str, Any] = dict(settings)
    hot_settings = {k: given[k] for k in _HOT_SETTINGS if k in given}
    hot_settings.setdefault("threads", 0)
    if "threads" not in settings:
        step_settings["threads"] = max(1, int(task_cpus))
    write_settings = {**settings, "threads": step_settings["threads"]}
    identity = {
        "neardup": neardup.__version__,
        "cwd": cwd,
        "shards": split,
        "groups": groups,
        "output": out,
        "settings": json.loads(
            json.dumps({**settings, **tokenizer}, sort_keys=True, default=os.fspath)
        ),
    }
    _claim_work_dir(work, identity)

    started_ray = False
    if not ray.is_initialized():
        ray.init(address=address, log_to_driver=False)
        started_ray = True
    try:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        # Tasks go round the nodes (shard i's first task on node i mod N, …), softly: a node
        # that is busy, gone or too small passes the task to Ray's default placement. Left to
        # itself, Ray runs short tasks of one kind one after the other on the first worker it
        # leased, on one node.
        nodes = sorted(
            n["NodeID"]
            for n in ray.nodes()
            if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= task_cpus
        )
        placed = [0]
        remotes: Dict[Any, Any] = {}

        def remote(f):
            if f not in remotes:
                remotes[f] = ray.remote(f)
            options: Dict[str, Any] = dict(num_cpus=task_cpus, max_retries=max_retries)
            if nodes:
                node = nodes[placed[0] % len(nodes)]
                placed[0] += 1
                options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=True)
            return remotes[f].options(**options)

        w = work
        keys = [
            remote(_keys_task).remote(cwd, w, i, paths, step_settings) for i, paths in enumerate(split)
        ]
        hot = remote(_hot_task).remote(cwd, w, len(split), groups, hot_settings, *keys)
        signs = [remote(_sign_task).remote(cwd, w, i, step_settings, hot) for i in range(len(split))]
        decides = [
            remote(_decide_task).remote(cwd, w, g, len(split), step_settings, hot, *signs)
            for g in range(groups)
        ]
        writes = [
            remote(_write_task).remote(cwd, w, i, groups, out, write_settings, hot, *decides)
            for i in range(len(split))
        ]
        results = ray.get(keys + [hot] + signs + decides + writes)
    finally:
        if started_ray:
            ray.shutdown()

    if decisions is not None:
        # Streamed from the work directory into one file or object, which appears whole.
        _native.concatenate(
            [_shard_decisions(work, i) for i in range(len(split))], os.fspath(decisions)
        )
    shard_reports = [r["report"] for r in results[-len(split):]]
    hot_info = results[len(split)]
    if out is not None:
        # The last write task published the whole output's _SUCCESS; publishing it here too
        # covers a last task that died between its own commit and that (then reused on resume).
        if _native.publish_output(out, hot_info["fingerprint"]) is None:
            raise RuntimeError(
                f"{out}: a shard's manifest is missing after every write task finished; the "
                "output has no _SUCCESS"
            )
    kinds = [("keys", len(split)), ("hot", 1), ("sign", len(split)), ("decide", groups), ("write", len(split))]
    steps: Dict[str, Dict[str, Any]] = {}
    at = 0
    for kind, n in kinds:
        ran = [r for r in results[at : at + n] if not r["reused"]]
        steps[kind] = {
            "tasks": n,
            "reused": n - len(ran),
            "seconds": sum(r["seconds"] for r in ran),
            "longest_seconds": max((r["seconds"] for r in ran), default=0.0),
        }
        at += n
    return {
        "shards": len(split),
        "groups": hot_info["groups"],
        "hot_keys": hot_info["hot_keys"],
        "tasks": len(results),
        "tasks_reused": sum(1 for r in results if r["reused"]),
        "nodes": sorted({r["node"] for r in results}),
        "steps": steps,
        "work_dir": work,
        "output": out,
        "decisions": None if decisions is None else os.fspath(decisions),
        "totals": _sum_totals(shard_reports),
        "clusters": _merge_clusters(work, groups),
        "shard_reports": shard_reports,
    }


# ---------------------------------------------------------------------------------------------
# Ray Data: a Dataset's blocks as shards.


def _block_name(run: str, shard: int) -> str:
    """The name block ``shard`` of run ``run`` is registered under in every task that reads it
    (its key table records it, and the later steps find the block by it)."""
    return f"<ray dataset {run} block {shard}>"


def _block_keys_task(block: Any, run: str, shard: int, settings: Dict[str, Any]):
    """Stage 1 of one block: its key table, and its number of rows."""
    return _native.block_keys(block, _block_name(run, shard), shard, settings), block.num_rows


def _block_hot_task(groups: int, hot_settings: Dict[str, Any], *tables):
    return neardup.hot_keys(tables, groups=groups, **hot_settings)


def _block_sign_task(block: Any, run: str, shard: int, settings: Dict[str, Any], table, hot):
    return _native.block_sign(block, _block_name(run, shard), table, hot, settings)


def _block_decide_task(group: int, settings: Dict[str, Any], hot, *signed):
    return neardup.decide([s.group(group) for s in signed], hot, group, **settings)


def _block_filter_task(
    block: Any,
    run: str,
    shard: int,
    settings: Dict[str, Any],
    row_bases: List[int],
    table,
    hot,
    *decided,
):
    """The block's kept rows and its decisions (``dup_of`` and ``cluster`` as rows of the whole
    dataset)."""
    import pyarrow as pa

    from neardup.frames import _decisions_table

    columns, report = _native.block_decisions(
        block, _block_name(run, shard), table, hot, [d.shard(shard) for d in decided],
        row_bases, settings,
    )
    keep, codes, names, dup_of, similarity, cluster, ids = columns
    decisions = _decisions_table(
        keep, codes, names, dup_of, similarity, cluster, ids, [], report, False
    )
    return block.filter(pa.array(keep)), decisions


def drop_duplicates(
    ds: Any,
    column: Union[str, Sequence[str]] = "text",
    *,
    groups: Optional[int] = None,
    with_decisions: bool = False,
    task_cpus: float = 1,
    **settings: Unpack[Settings],
) -> Any:
    """The rows of a ``ray.data.Dataset`` that one :func:`neardup.dedup_table` over all its rows
    in order would keep, found by the steps of a distributed run with the dataset's blocks as
    shards: stage 1 per block, the hot keys once, sign per block, decide per group, and the
    decisions per block, each a Ray task; the blocks stay in the object store.

    Args:
        ds: the dataset (materialized here: every step reads its blocks, in order).
        column: the text column or columns, as for :func:`neardup.dedup_table`.
        groups: stage 2's groups (decide tasks); default the number of blocks, at most the
            cluster's CPUs.
        with_decisions: return ``(kept, decisions)``, the decisions a Dataset with one row per
            input row in order, as :func:`neardup.dedup_table` makes them (``dup_of`` and
            ``cluster`` are row numbers of the whole dataset).
        task_cpus: CPUs each task asks for.
        **settings: as for :func:`neardup.dedup_table`; ``threads`` is per task. ``against``
            is not taken here.

    Returns:
        The kept rows, a ``ray.data.Dataset`` of one block per input block, in order.
    """
    import uuid

    import ray
    import ray.data

    from neardup.frames import _fields

    if settings.get("against"):
        raise ValueError(
            "against= is not taken by neardup.ray.drop_duplicates: run neardup.dedup_table or "
            "neardup.ray.dedup over files"
        )
    step_settings = _fields(column, settings)
    hot_settings = {k: step_settings.pop(k) for k in ("min_key_count", "memory_limit", "spill_dir")
                    if k in step_settings}
    blocks = ds.materialize().to_arrow_refs()
    if not blocks:
        return (ds, ds) if with_decisions else ds
    if groups is None:
        cpus = int(ray.cluster_resources().get("CPU", 1))
        groups = max(1, min(len(blocks), cpus))
    run = uuid.uuid4().hex[:12]

    remotes: Dict[Any, Any] = {}

    def remote(f, **options):
        if f not in remotes:
            remotes[f] = ray.remote(f)
        return remotes[f].options(num_cpus=task_cpus, **options)

    keyed = [
        remote(_block_keys_task, num_returns=2).remote(b, run, i, step_settings)
        for i, b in enumerate(blocks)
    ]
    tables = [k for k, _ in keyed]
    rows = ray.get([n for _, n in keyed])
    row_bases = [sum(rows[:i]) for i in range(len(rows))]
    hot = remote(_block_hot_task).remote(groups, hot_settings, *tables)
    signed = [
        remote(_block_sign_task).remote(b, run, i, step_settings, tables[i], hot)
        for i, b in enumerate(blocks)
    ]
    decided = [
        remote(_block_decide_task).remote(g, step_settings, hot, *signed) for g in range(groups)
    ]
    filtered = [
        remote(_block_filter_task, num_returns=2).remote(
            b, run, i, step_settings, row_bases, tables[i], hot, *decided
        )
        for i, b in enumerate(blocks)
    ]
    kept = ray.data.from_arrow_refs([k for k, _ in filtered])
    if not with_decisions:
        return kept
    return kept, ray.data.from_arrow_refs([d for _, d in filtered])
