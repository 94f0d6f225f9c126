"""neardup.Report (and the TypedDicts under it) describe the reports runs really return: every
key a report holds is declared with the type its value has, and every key declared required is
there, for several kinds of run (outputs and an index, a run against that index under a memory
limit, unreadable inputs, a stream, a table, a write step); and so do the step reports
(KeysReport, HotReport, SignReport, DecideReport) and the sign and decide manifests."""

from __future__ import annotations

import shutil
import types
import typing
from pathlib import Path
from typing import Any, Dict, List

import pyarrow as pa
import pytest

import neardup
import neardup._report_types
from conftest import SAMPLE

BAD = Path(__file__).resolve().parents[3] / "tests" / "data" / "bad"


def conforms(value: Any, annotation: Any, where: str) -> List[str]:
    """Where `value` departs from `annotation` (empty when it conforms)."""
    origin = typing.get_origin(annotation)
    if isinstance(annotation, type) and hasattr(annotation, "__required_keys__"):
        if not isinstance(value, dict):
            return [f"{where}: {type(value).__name__}, not a {annotation.__name__} dict"]
        hints = typing.get_type_hints(annotation)
        errors = [f"{where}.{k}: not declared in {annotation.__name__}"
                  for k in value if k not in hints]
        errors += [f"{where}.{k}: required by {annotation.__name__}, missing"
                   for k in annotation.__required_keys__ if k not in value]
        for k, v in value.items():
            if k in hints:
                errors += conforms(v, hints[k], f"{where}.{k}")
        return errors
    if origin is typing.Union or origin is getattr(types, "UnionType", None):
        if value is None and type(None) in typing.get_args(annotation):
            return []
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        tried = [conforms(value, a, where) for a in options]
        return [] if any(not t for t in tried) else tried[0]
    if origin in (list, List):
        if not isinstance(value, list):
            return [f"{where}: {type(value).__name__}, not a list"]
        (item,) = typing.get_args(annotation)
        return [e for i, v in enumerate(value) for e in conforms(v, item, f"{where}[{i}]")]
    if origin in (dict, Dict):
        if not isinstance(value, dict):
            return [f"{where}: {type(value).__name__}, not a dict"]
        _, item = typing.get_args(annotation)
        return [e for k, v in value.items() for e in conforms(v, item, f"{where}[{k!r}]")]
    if annotation is Any:
        return []
    if annotation is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif annotation is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, annotation)
    return [] if ok else [f"{where}: {value!r} is not a {annotation.__name__}"]


def check(report: Any) -> None:
    assert conforms(report, neardup.Report, "report") == []


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Dict[str, Any]:
    tmp = tmp_path_factory.mktemp("reports")
    indexed = neardup.dedup(SAMPLE, tmp / "out", tmp / "decisions.jsonl",
                            index_out=tmp / "sample.ndx")
    again = tmp / "again"
    again.mkdir()
    shutil.copy(Path(SAMPLE) / "part-0.jsonl", again / "part-0.jsonl")
    against = neardup.dedup(again, decisions=tmp / "d2.jsonl", against=[tmp / "sample.ndx"],
                            memory_limit=64 << 20)
    bad = tmp / "bad"
    bad.mkdir()
    for name in ("malformed.jsonl", "invalid_utf8.jsonl", "truncated.jsonl.gz",
                 "corrupt_page.parquet", "empty_text.jsonl"):
        shutil.copy(BAD / name, bad / name)
    unreadable = neardup.dedup(bad, decisions=tmp / "d3.jsonl")
    stream = neardup.stream(SAMPLE)
    for _ in stream:
        pass
    table = neardup.report_of(neardup.dedup_table(pa.table({"text": ["a b c d e f"] * 3 + [None]})))
    return {"indexed": indexed, "against": against, "unreadable": unreadable,
            "stream": stream.report, "table": table}


@pytest.mark.parametrize("kind", ["indexed", "against", "unreadable", "stream", "table"])
def test_a_report_is_what_report_declares(runs, kind):
    check(runs[kind])


def test_the_optional_parts_appear_where_they_belong(runs):
    assert "index" in runs["indexed"] and "against" not in runs["indexed"]
    assert "against" in runs["against"] and "memory" in runs["against"]
    bad = runs["unreadable"]
    assert bad["totals"]["unreadable"] and bad["stage1"]["problems"], bad["totals"]
    # So the nested shapes were checked on real values, not on empty lists.
    assert bad["totals"]["unreadable"][0]["file"].endswith((".gz", ".parquet"))


def test_a_missing_or_undeclared_field_is_found(runs):
    report = dict(runs["indexed"])
    report["surprise"] = 1
    del report["totals"]
    errors = conforms(report, neardup.Report, "report")
    assert "report.surprise: not declared in Report" in errors
    assert "report.totals: required by Report, missing" in errors
    stage2 = dict(report["stage2"], bytes_read="many")
    assert conforms(stage2, neardup._report_types.Stage2Stats, "stage2") == [
        "stage2.bytes_read: 'many' is not a int"]


def test_a_step_report_is_what_its_type_declares(tmp_path):
    types = neardup._report_types
    table = tmp_path / "keys-0.ndk"
    keys = neardup.keys([SAMPLE], 0, table, prefer="longest")
    assert conforms(keys, types.KeysReport, "keys") == []
    # With groups, the plan is there to check; the prefer and against settings too.
    hot = neardup.hot_keys([table], groups=2, output=tmp_path / "hot.ndh")
    assert hot["plan"] is not None and conforms(hot, types.HotReport, "hot") == []
    sign = neardup.sign(table, tmp_path / "hot.ndh", tmp_path / "sig-0", prefer="longest")
    assert sign["manifest"]["settings"]["prefer"] and conforms(sign, types.SignReport, "sign") == []
    decide = neardup.decide([tmp_path / "sig-0"], tmp_path / "hot.ndh", 1, tmp_path / "decided-1",
                            prefer="longest")
    assert conforms(decide, types.DecideReport, "decide") == []
    signed = neardup.Signed.load(tmp_path / "sig-0")
    decided = neardup.Decided.load(tmp_path / "decided-1")
    assert conforms(signed.manifest, types.SignManifest, "signed.manifest") == []
    assert conforms(decided.manifest, types.DecideManifest, "decided.manifest") == []
    assert signed.manifest == {k: v for k, v in sign["manifest"].items() if k != "checksum"}


def test_a_values_statistics_are_what_its_stub_declares():
    types = neardup._report_types
    table = neardup.keys([SAMPLE], 0)
    hot = neardup.hot_keys([table])
    signed = neardup.sign(table, hot)
    deduper = neardup.Deduper()
    for text in ["one text of some words here", "one text of some words here", "another"]:
        deduper(text)
    assert conforms(table.stats, types.Stage1Stats, "table.stats") == []
    assert conforms(hot.stats, types.CountStats, "hot.stats") == []
    assert conforms(signed.stats, types.Stage2Stats, "signed.stats") == []
    assert conforms(deduper.stats, types.DeduperStats, "deduper.stats") == []
    assert deduper.stats["exact"] == 1


def test_a_write_step_returns_a_run_report(tmp_path):
    table = tmp_path / "keys-0.ndk"
    neardup.keys([SAMPLE], 0, table)
    neardup.hot_keys([table], groups=1).save(tmp_path / "hot.ndh")
    neardup.sign(table, tmp_path / "hot.ndh", tmp_path / "sig-0")
    neardup.decide([tmp_path / "sig-0"], tmp_path / "hot.ndh", 0, tmp_path / "decided-0")
    report = neardup.write(table, tmp_path / "hot.ndh", [tmp_path / "decided-0"],
                           output=tmp_path / "out", decisions=tmp_path / "d.jsonl")
    check(report)
