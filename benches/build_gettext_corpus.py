#!/usr/bin/env python3
"""Builds a Japanese (or Chinese) benchmark corpus from the gettext catalogs Debian installs.

The documents are real translated text: every message of every catalog under
``/usr/share/locale/LOCALE/LC_MESSAGES/*.mo`` (read with Python's ``gettext``), whitespace
collapsed, format-only messages left out. A document is a run of consecutive messages of one
catalog (in msgid order), of a length drawn per document. Near copies are made the way the
rustdocs corpus has them (the same page in several toolchains, a few paragraphs changed): with
probability ``--copy-p`` a document gets one to three later versions, each with one to
``--max-edits`` of its messages replaced by another message of the catalog, dropped, or doubled
(seeded by the document's number, so the corpus is the same on every run). All documents are then
ordered by a hash of their id, as build_rustdocs.py orders its pages, so that copies land far
from their originals and in different shards.

    python3 benches/build_gettext_corpus.py OUT_DIR [--locale ja] [--scale 1] [--shards 4]

Writes OUT_DIR/jsonl/part-NNNNN.jsonl (``id``, ``text``, ``catalog``) and prints the document
count and size. ``--scale N`` repeats the corpus N times, copy c (c > 0) with its messages drawn
in another seeded order, so that copies of the corpus are not copies of each other's documents.
Needs only the Python standard library.
"""

from __future__ import annotations

import argparse
import gettext
import hashlib
import json
import random
import re
from pathlib import Path
from typing import Dict, List

# A message that is mostly a format directive or an option table is not prose.
FORMAT_ONLY = re.compile(r"^[\s%\w.:,\-()\[\]<>=/|'\"]*$", re.ASCII)


def catalogs(locale: str) -> Dict[str, List[str]]:
    """Every catalog's translated messages (whitespace collapsed, in msgid order)."""
    found: Dict[str, List[str]] = {}
    root = Path("/usr/share/locale") / locale / "LC_MESSAGES"
    for path in sorted(root.glob("*.mo")):
        with open(path, "rb") as f:
            try:
                catalog = gettext.GNUTranslations(f)._catalog  # type: ignore[attr-defined]
            except (OSError, UnicodeDecodeError):
                continue
        messages = []
        for key in sorted(catalog, key=str):
            text = catalog[key]
            if not isinstance(text, str) or not key:
                continue
            text = " ".join(text.split())
            if len(text) < 8 or FORMAT_ONLY.match(text):
                continue
            messages.append(text)
        if len(messages) >= 20:
            found[path.stem] = messages
    if not found:
        raise SystemExit(f"no gettext catalogs with text under {root}")
    return found


def edited(parts: List[str], pool: List[str], rng: random.Random, max_edits: int) -> List[str]:
    """A later version of a document: one to max_edits messages replaced, dropped or doubled."""
    copy = list(parts)
    for _ in range(rng.randint(1, max_edits)):
        i = rng.randrange(len(copy))
        what = rng.random()
        if what < 0.5:
            copy[i] = rng.choice(pool)
        elif what < 0.8 and len(copy) > 2:
            del copy[i]
        else:
            copy.insert(i, copy[i])
    return copy


def build(locale: str, scale: int, copy_p: float, max_edits: int, min_parts: int,
          max_parts: int) -> List[dict]:
    """The corpus's documents, in hash order of their ids."""
    docs = []
    n = 0
    by_catalog = catalogs(locale)
    for c in range(scale):
        for name, messages in by_catalog.items():
            order = list(messages)
            if c:
                random.Random(f"{name}#{c}").shuffle(order)
            i = 0
            while i < len(order):
                rng = random.Random(n)
                k = rng.randint(min_parts, max_parts)
                parts = order[i : i + k]
                i += k
                doc_id = f"{name}/{c}/{n}"
                n += 1
                docs.append({"id": doc_id, "text": "\n".join(parts), "catalog": name})
                if rng.random() < copy_p:
                    for v in range(rng.randint(1, 3)):
                        text = "\n".join(edited(parts, messages, rng, max_edits))
                        docs.append({"id": f"{doc_id}~{v + 1}", "text": text, "catalog": name})
    docs.sort(key=lambda d: hashlib.blake2b(d["id"].encode(), digest_size=8).digest())
    return docs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--locale", default="ja")
    p.add_argument("--scale", type=int, default=1)
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--copy-p", type=float, default=0.4)
    p.add_argument("--max-edits", type=int, default=3)
    p.add_argument("--min-parts", type=int, default=6)
    p.add_argument("--max-parts", type=int, default=20)
    args = p.parse_args()
    docs = build(args.locale, args.scale, args.copy_p, args.max_edits, args.min_parts,
                 args.max_parts)
    (args.out / "jsonl").mkdir(parents=True, exist_ok=True)
    per = (len(docs) + args.shards - 1) // args.shards
    for s in range(args.shards):
        with open(args.out / "jsonl" / f"part-{s:05d}.jsonl", "w", encoding="utf-8") as f:
            for d in docs[s * per : (s + 1) * per]:
                f.write(json.dumps(d, ensure_ascii=False) + "\n")
    size = sum(len(d["text"].encode()) for d in docs)
    chars = sum(len(d["text"]) for d in docs)
    print(f"{len(docs)} documents, {chars:,} characters, {size / 1e6:.1f} MB of text, "
          f"{args.shards} shards")


if __name__ == "__main__":
    main()
