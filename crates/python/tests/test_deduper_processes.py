"""A Deduper's state is its process's: a forked child is refused and pickling fails, each with a
message that says why and what to do instead (rather than each process silently keeping the
duplicates the others saw)."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import subprocess
import sys

import pytest

import neardup
from conftest import sample_texts

WHY = "each process would decide against its own copy of what the Deduper has seen"


def test_a_deduper_does_not_pickle():
    deduper = neardup.Deduper()
    deduper("a text to remember")
    with pytest.raises(TypeError) as raised:
        pickle.dumps(deduper)
    message = str(raised.value)
    assert message.startswith("a Deduper cannot be pickled or sent to another process: "), message
    assert WHY in message and "neardup.drop_duplicates(data, column=\"text\")" in message


_shared = None


def _decide_in_child(text: str) -> bool:
    return _shared(text)


def test_a_forked_child_is_refused_and_the_parent_goes_on():
    global _shared
    _shared = neardup.Deduper()
    texts = sample_texts()[:40]
    with multiprocessing.get_context("fork").Pool(2) as pool:
        with pytest.raises(RuntimeError) as raised:
            pool.map(_decide_in_child, texts)
    message = str(raised.value)
    assert "is used in process" in message and "a forked child: " + WHY in message, message
    # The parent's deduper is untouched and still decides.
    assert _shared.seen == 0
    assert [_shared(t) for t in texts] == _expected(texts)


def _expected(texts):
    fresh = neardup.Deduper()
    return [fresh(t) for t in texts]


HF_FILTER = """
import datasets, neardup
import sys
texts = [t for t in open(sys.argv[1], encoding="utf-8").read().split("\\0") if t]
ds = datasets.Dataset.from_dict({"text": texts})
d = neardup.Deduper()
kept = ds.filter(lambda x: d(x["text"]), num_proc=2)
print(len(kept))
"""


def test_a_datasets_filter_over_two_processes_fails_clearly(tmp_path):
    # The new user's try: silently kept far more than one process does before.
    texts = sample_texts()
    (tmp_path / "texts").write_text("\0".join(texts), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-c", HF_FILTER, str(tmp_path / "texts")],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={**os.environ, "HF_DATASETS_CACHE": str(tmp_path / "cache"),
             "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode != 0, done.stdout
    assert WHY in done.stderr, done.stderr[-3000:]
