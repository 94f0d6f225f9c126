"""tokenizer=: hojichar's splitters by name, native jieba, and Python callables (fugashi,
sudachipy, jieba) on real Japanese and Chinese sentences (Debian's gettext catalogs, copied to
tests/data/cjk by its make.py)."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import numpy as np
import pytest

import neardup
from conftest import DATA, read_jsonl

CJK = DATA / "cjk"


def texts(name: str) -> list:
    return [r["text"] for r in read_jsonl(CJK / name)]


def japanese_words(text: str) -> list:
    """hojichar's own Japanese splitter (fugashi over MeCab with unidic-lite)."""
    from hojichar.filters.deduplication import japanese_word_splitter

    return japanese_word_splitter(text)


def sudachi_words(text: str) -> list:
    """SudachiPy with sudachidict-core, split mode C."""
    from sudachipy import Dictionary, SplitMode

    global _SUDACHI
    try:
        tokenizer = _SUDACHI
    except NameError:
        tokenizer = _SUDACHI = Dictionary(dict="core").tokenizer(mode=SplitMode.C)
    return [m.surface() for m in tokenizer.tokenize(text)]


def jieba_words(text: str) -> list:
    """Python's jieba, whitespace tokens left out as the native jieba leaves them out."""
    import jieba

    jieba.setLogLevel(60)
    return [w for w in jieba.lcut(text) if w.strip()]


def ngram_set(tokens: list, n: int) -> set:
    """hojichar's n-grams (GenerateDedupLSH): windows of n tokens joined by one space."""
    return {" ".join(tokens[i : i + n]) for i in range(len(tokens) - n + 1)}


def jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b)


def near_copies(sentences: list, docs: int, seed: int) -> list:
    """(original, near copy) pairs: documents of four to seven sentences, the copy with one
    sentence replaced or dropped, as the benchmark corpora make near copies."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(docs):
        parts = rng.sample(sentences, rng.randint(4, 7))
        copy = list(parts)
        i = rng.randrange(len(copy))
        if rng.random() < 0.5:
            copy[i] = rng.choice(sentences)
        else:
            del copy[i]
        pairs.append(("".join(parts), "".join(copy)))
    return pairs


@pytest.mark.parametrize(
    "split, corpus",
    [(japanese_words, "ja.jsonl"), (sudachi_words, "ja.jsonl"), (jieba_words, "zh.jsonl")],
)
def test_shingle_sets_are_hojichars_ngram_sets(split, corpus):
    """A near copy decided against its original is given the exact Jaccard of hojichar's n-gram
    sets made with the same tokenizer: the shingle sets are the same sets."""
    pairs = near_copies(texts(corpus), 60, seed=7)
    compared = 0
    for n in (1, 3):
        for original, copy in pairs:
            want = jaccard(ngram_set(split(original), n), ngram_set(split(copy), n))
            deduper = neardup.Deduper(tokenizer=split, shingle=n, threshold=0.3, exact=False)
            assert deduper(original)
            decision = deduper.decide(copy)
            if decision.keep:
                # Not a candidate, or below the threshold: then it must be below it.
                assert want < 0.3 or decision.reason == "unique"
                continue
            compared += 1
            assert decision.similarity == pytest.approx(want, abs=1e-12), (n, original, copy)
    assert compared > 80


def test_alnum_is_hojichars_alphanumeric_splitter():
    """alnum, native, cuts as hojichar's non_alpha_num_splitter: the same signatures as the
    splitter handed in as a callable."""
    from hojichar.filters.deduplication import non_alpha_num_splitter

    docs = texts("ja.jsonl") + texts("zh.jsonl")
    for n in (1, 2):
        native = neardup.Sketcher(tokenizer="alnum", shingle=n)
        called = neardup.Sketcher(tokenizer=non_alpha_num_splitter, shingle=n)
        assert np.array_equal(native.signatures(docs), called.signatures(docs))
    assert neardup.Sketcher(tokenizer="alnum").settings["tokenize"] == "ascii-word"


def test_char_is_hojichars_character_ngrams():
    """hojichar takes the n-grams of char_level_splitter as substrings; so does tokenizer="char"."""
    compared = 0
    for original, copy in near_copies(texts("ja.jsonl"), 40, seed=11):
        deduper = neardup.Deduper(tokenizer="char", shingle=5, threshold=0.3, exact=False)
        deduper(original)
        decision = deduper.decide(copy)
        if not decision.keep:
            grams = lambda t: {t[i : i + 5] for i in range(len(t) - 4)}
            assert decision.similarity == pytest.approx(jaccard(grams(original), grams(copy)), abs=1e-12)
            compared += 1
    assert compared > 20


def test_native_jieba_equals_python_jieba():
    """The same Chinese words, so the same signatures, on the sentences without their ASCII
    characters (jieba-rs cuts runs of ASCII symbols by rules of its own: docs/tokenizers.md)."""
    import re

    docs = [re.sub(r"[\x00-\x7f]+", " ", t) for t in texts("zh.jsonl")]
    native = neardup.Sketcher(tokenizer="jieba", shingle=2)
    called = neardup.Sketcher(tokenizer=jieba_words, shingle=2)
    assert np.array_equal(native.signatures(docs), called.signatures(docs))
    # Not the character shingles.
    assert not np.array_equal(native.signatures(docs), neardup.Sketcher(shingle=2).signatures(docs))


def test_a_callable_in_every_entry_point_gives_the_same_decisions(tmp_path):
    """dedup, stream, the staged steps and Deduper decide alike with a callable tokenizer, and
    all of them differently from character shingles."""
    pairs = near_copies(texts("ja.jsonl"), 150, seed=3)
    rows = [{"text": t} for pair in pairs for t in pair]
    inputs = tmp_path / "in"
    inputs.mkdir()
    for part in range(3):
        with open(inputs / f"part-{part}.jsonl", "w", encoding="utf-8") as f:
            for row in rows[part * 100 : (part + 1) * 100]:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    settings = dict(tokenizer=japanese_words, shingle=3, threshold=0.6, chunk_bytes=4096, threads=2)
    streamed = [d.keep for d in neardup.stream(inputs, **settings)]
    assert len(streamed) == len(rows) and 0 < streamed.count(False) < len(rows) // 2
    report = neardup.dedup(inputs, tmp_path / "out", decisions=tmp_path / "d.jsonl", **settings)
    assert [r["keep"] for r in read_jsonl(tmp_path / "d.jsonl")] == streamed
    assert report["totals"]["records_dropped"] == streamed.count(False)
    deduper = neardup.Deduper(tokenizer=japanese_words, shingle=3, threshold=0.6)
    assert [deduper(r["text"]) for r in rows] == streamed
    # The staged steps, over files.
    work = tmp_path / "steps"
    work.mkdir()
    neardup.keys([inputs], 0, work / "keys.ndk", progress=False, **settings)
    neardup.hot_keys([work / "keys.ndk"]).save(work / "hot.ndh")
    neardup.sign(work / "keys.ndk", work / "hot.ndh", work / "sig", progress=False, **settings)
    neardup.decide([work / "sig"], work / "hot.ndh", 0, work / "decided", **settings)
    neardup.write(work / "keys.ndk", work / "hot.ndh", [work / "decided"], decisions=work / "d.jsonl", **settings)
    assert [r["keep"] for r in read_jsonl(work / "d.jsonl")] == streamed
    one_thread = [d.keep for d in neardup.stream(inputs, **{**settings, "threads": 1})]
    assert one_thread == streamed
    chars = [d.keep for d in neardup.stream(inputs, threshold=0.6)]
    assert chars != streamed


def test_the_tokenizer_enters_the_fingerprint(tmp_path):
    """Key tables made with different tokenizers never mix: a hot-key step refuses them."""
    inputs = CJK / "ja.jsonl"
    a = neardup.compute_keys(inputs, tokenizer=japanese_words, shingle=2)
    b = neardup.compute_keys(inputs, tokenizer=sudachi_words, shingle=2)
    c = neardup.compute_keys(inputs, tokenizer="char", shingle=2)
    a.save(tmp_path / "a.keys")
    b.save(tmp_path / "b.keys")
    c.save(tmp_path / "c.keys")
    for other in ("b.keys", "c.keys"):
        with pytest.raises(Exception, match="(?i)settings|fingerprint"):
            neardup.hot_keys([tmp_path / "a.keys", tmp_path / other])
    # The same tokenizer under another name is another setting too.
    named = neardup.Sketcher(tokenizer=japanese_words, tokenizer_name="fugashi-unidic-lite")
    assert named.settings["tokenize"] == "custom:fugashi-unidic-lite"
    assert (
        neardup.Sketcher(tokenizer=japanese_words).settings["tokenize"]
        == "custom:test_tokenizers.japanese_words"
    )


def test_bad_tokenizers_are_refused_before_any_work(tmp_path):
    with pytest.raises(ValueError, match="tokenizer_name"):
        neardup.Sketcher(tokenizer=lambda text: text.split())
    # Named, a lambda is fine.
    s = neardup.Sketcher(tokenizer=lambda text: text.split(), tokenizer_name="spaces", shingle=1)
    assert s.signatures(["a b c"]).shape == (1, s.num_perm)
    with pytest.raises(TypeError, match="not str"):
        neardup.Sketcher(tokenizer=lambda text: [1, 2], tokenizer_name="ints")
    with pytest.raises(TypeError, match="iterable"):
        neardup.Sketcher(tokenizer=lambda text: 3, tokenizer_name="three")
    with pytest.raises(ValueError, match="unknown tokenize"):
        neardup.Sketcher(tokenizer="mecab")
    with pytest.raises(TypeError, match="tokenizer_name"):
        neardup.Sketcher(tokenizer="jieba", tokenizer_name="x")
    with pytest.raises(TypeError, match="callable"):
        neardup.Sketcher(tokenizer=3)
    # A settings file cannot name a callable that is not given.
    with pytest.raises(ValueError, match="custom:mine"):
        neardup.Sketcher(tokenize="custom:mine")


BROKEN = "BROKEN document: this tokenizer cannot cut it"


def words(text: str) -> list:
    return text.split()


def breaks(text: str) -> list:
    """words(), raising on the broken document."""
    if text.startswith("BROKEN"):
        raise ValueError("cannot cut " + repr(text[:14]))
    return text.split()


@pytest.fixture
def broken_corpus(tmp_path) -> Path:
    """Three files of texts with near copies, the broken document and its exact copy in the
    middle one (so it is hot, and stage 2 cuts it again)."""
    rng = random.Random(11)
    vocabulary = [f"w{i}" for i in range(400)]
    docs = [" ".join(rng.choice(vocabulary) for _ in range(40)) for _ in range(200)]
    docs += [d.replace(" ", " w2 ", 1) for d in docs[:48]]
    rng.shuffle(docs)
    docs[150:150] = [BROKEN, BROKEN]
    root = tmp_path / "in"
    root.mkdir()
    for part in range(3):
        with open(root / f"part-{part}.jsonl", "w", encoding="utf-8") as f:
            for d in docs[part * 100 : (part + 1) * 100]:
                f.write(json.dumps({"text": d}) + "\n")
    return root


def assert_raised_by_the_tokenizer(raised: "pytest.ExceptionInfo", where: str = "") -> None:
    """The caller got neardup's TokenizerError, naming the tokenizer and the text (and `where`),
    caused by the callable's own exception."""
    e = raised.value
    assert isinstance(e, neardup.TokenizerError) and isinstance(e, RuntimeError), repr(e)
    assert isinstance(e.__cause__, ValueError), repr(e.__cause__)
    assert str(e.__cause__) == "cannot cut 'BROKEN documen'"
    message = str(e)
    assert message.startswith("tokenizer custom:words raised ValueError(\"cannot cut 'BROKEN documen'\")"), message
    assert f'"{BROKEN}"' in message, message
    assert where in message, message


RUNS = {
    "dedup": lambda inputs, out, **s: neardup.dedup(
        inputs, out / "data", decisions=out / "d.jsonl", report=out / "r.json", progress=False, **s
    ),
    "stream": lambda inputs, out, **s: list(neardup.stream(inputs, **s)),
    "keys": lambda inputs, out, **s: neardup.keys([inputs], 0, out / "k.ndk", progress=False, **s),
    "compute_keys": lambda inputs, out, **s: neardup.compute_keys(inputs, **s),
}


@pytest.mark.parametrize("entry", sorted(RUNS))
@pytest.mark.parametrize("threads", [1, 3])
def test_a_tokenizer_that_raises_is_the_runs_error_and_nothing_is_published(
    tmp_path, broken_corpus, entry, threads
):
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(neardup.TokenizerError) as raised:
        RUNS[entry](broken_corpus, out, tokenizer=breaks, tokenizer_name="words", shingle=2,
                    threads=threads, chunk_bytes=4096)
    assert_raised_by_the_tokenizer(raised)
    assert os.listdir(out) == []
    # The same run with a tokenizer that works goes through.
    RUNS[entry](broken_corpus, out, tokenizer=words, tokenizer_name="words", shingle=2,
                threads=threads, chunk_bytes=4096)


def test_the_decide_step_raises_what_its_tokenizer_raised(tmp_path, broken_corpus):
    """The staged steps: keys cuts every text (RUNS above), decide the hot ones again (a whole
    run's stage 2 takes the tokens its stage 1 kept, so there a callable raises in stage 1)."""
    work = tmp_path / "work"
    work.mkdir()
    settings = dict(tokenizer_name="words", shingle=2)
    neardup.keys([broken_corpus], 0, work / "k.ndk", progress=False, tokenizer=words, **settings)
    neardup.hot_keys([work / "k.ndk"]).save(work / "hot.ndh")
    neardup.sign(work / "k.ndk", work / "hot.ndh", work / "sig", progress=False, tokenizer=words,
                 **settings)
    for output in (work / "decided", None):
        with pytest.raises(neardup.TokenizerError) as raised:
            neardup.decide([work / "sig"], work / "hot.ndh", 0, output, tokenizer=breaks,
                           **settings)
        assert_raised_by_the_tokenizer(raised)
        assert not (work / "decided").exists()
    neardup.decide([work / "sig"], work / "hot.ndh", 0, work / "decided", tokenizer=words,
                   **settings)


def test_tables_raise_what_the_tokenizer_raised(broken_corpus):
    import pyarrow as pa

    rows = [r for p in sorted(broken_corpus.iterdir()) for r in read_jsonl(p)]
    table = pa.Table.from_pylist(rows)
    for call in (neardup.dedup_table, neardup.drop_duplicates):
        with pytest.raises(neardup.TokenizerError) as raised:
            call(table, tokenizer=breaks, tokenizer_name="words", shingle=2)
        assert_raised_by_the_tokenizer(raised)


def test_a_sketcher_raises_naming_the_text_and_works_again(broken_corpus):
    texts = [r["text"] for p in sorted(broken_corpus.iterdir()) for r in read_jsonl(p)]
    at = texts.index(BROKEN)
    sketcher = neardup.Sketcher(tokenizer=breaks, tokenizer_name="words", shingle=2)
    for method in (sketcher.signatures, sketcher.band_keys):
        with pytest.raises(neardup.TokenizerError) as raised:
            method(texts)
        assert_raised_by_the_tokenizer(raised, f"texts[{at}]")
        # Without the broken text it works, and gives what a working tokenizer gives.
        fine = texts[:at]
        working = neardup.Sketcher(tokenizer=words, tokenizer_name="words", shingle=2)
        assert np.array_equal(method(fine), getattr(working, method.__name__)(fine))


def test_a_deduper_raises_naming_the_text_and_does_not_count_it(broken_corpus):
    texts = [r["text"] for p in sorted(broken_corpus.iterdir()) for r in read_jsonl(p)]
    at = texts.index(BROKEN)
    deduper = neardup.Deduper(tokenizer=breaks, tokenizer_name="words", shingle=2)
    first = [deduper.decide(t) for t in texts[:at]]
    with pytest.raises(neardup.TokenizerError) as raised:
        deduper(texts[at])
    assert_raised_by_the_tokenizer(raised, f"text {at} given to this Deduper (not decided)")
    # The text was not decided: the rest is decided as if it had never been given.
    rest = [t for t in texts[at:] if t != BROKEN]
    after = [deduper.decide(t) for t in rest]
    reference = neardup.Deduper(tokenizer=words, tokenizer_name="words", shingle=2)
    want = [reference.decide(t) for t in texts[:at] + rest]
    assert [(d.keep, d.record, d.dup_of_record) for d in first + after] == [
        (d.keep, d.record, d.dup_of_record) for d in want
    ]


def test_the_online_index_raises_what_its_tokenizer_raised_and_decides_nothing(broken_corpus):
    texts = [r["text"] for p in sorted(broken_corpus.iterdir()) for r in read_jsonl(p)]
    at = texts.index(BROKEN)
    settings = dict(tokenizer_name="words", shingle=2)
    index = neardup.Index(tokenizer=breaks, **settings)
    first = index.check_many(texts[:at], ids=list(range(at)))
    calls = (
        lambda: index.check(texts[at], id=at),
        lambda: index.check_many(texts[at:], ids=list(range(at, len(texts)))),
        lambda: index.query(texts[at]),
        lambda: index.insert(texts[at], id=at),
    )
    for call in calls:
        with pytest.raises(neardup.TokenizerError) as raised:
            call()
        assert_raised_by_the_tokenizer(raised)
    # Nothing of a failed call was decided: the rest is decided as if it had never been given,
    # as an index with a working tokenizer decides it.
    rest = [(i, t) for i, t in enumerate(texts) if i > at and t != BROKEN]
    after = index.check_many([t for _, t in rest], ids=[i for i, _ in rest])
    reference = neardup.Index(tokenizer=words, **settings)
    want = reference.check_many(texts[:at] + [t for _, t in rest],
                                ids=list(range(at)) + [i for i, _ in rest])
    assert [(d.id, d.keep, d.reason, d.dup_of) for d in first + after] == [
        (d.id, d.keep, d.reason, d.dup_of) for d in want
    ]


def test_ray_refuses_a_tokenizer_that_cannot_be_pickled_before_any_task(tmp_path):
    ray = pytest.importorskip("ray")
    import threading

    import neardup.ray

    lock = threading.Lock()

    def locked(text: str) -> list:
        with lock:
            return text.split()

    work = tmp_path / "work"
    with pytest.raises(TypeError, match="cannot be sent to Ray workers"):
        neardup.ray.dedup(
            CJK / "ja.jsonl", None, tmp_path / "d.jsonl", work, tokenizer=locked, tokenizer_name="locked"
        )
    assert not ray.is_initialized() and not work.exists()
    # A module-level function pickles (by reference to its module), and stands in the work
    # directory's identity by its name.
    shipped = neardup.ray._shipped_tokenizer({"tokenizer": japanese_words}, ray)
    assert shipped == {"tokenizer": "custom:test_tokenizers.japanese_words", "tokenizer_name": None}
