"""Makes ja.jsonl and zh.jsonl: real Japanese and Chinese sentences, the translations in the
gettext catalogs Debian installs (coreutils, dpkg, apt, grep, bash ... under
/usr/share/locale/{ja,zh_CN}/LC_MESSAGES). Run again to refresh; tests read the files made here,
so they pass on machines without the catalogs.

    python3 tests/data/cjk/make.py
"""

import gettext
import json
import pathlib
import re

HERE = pathlib.Path(__file__).parent
CATALOGS = ["coreutils", "dpkg", "apt", "grep", "bash", "findutils", "diffutils", "tar", "sed"]
PER_LANGUAGE = 400


def sentences(locale: str) -> list:
    found = []
    seen = set()
    for domain in CATALOGS:
        path = pathlib.Path("/usr/share/locale") / locale / "LC_MESSAGES" / f"{domain}.mo"
        if not path.exists():
            continue
        with open(path, "rb") as f:
            catalog = gettext.GNUTranslations(f)._catalog
        for key in sorted(catalog, key=str):
            text = catalog[key]
            if not isinstance(text, str) or not key:
                continue
            # One line of prose: format directives and option tables make poor documents.
            text = " ".join(text.split())
            if len(text) < 20 or "%" in text or re.search(r"--?[a-z]", text) or text in seen:
                continue
            seen.add(text)
            found.append(text)
    return found[:PER_LANGUAGE]


for locale, name in [("ja", "ja.jsonl"), ("zh_CN", "zh.jsonl")]:
    rows = sentences(locale)
    with open(HERE / name, "w", encoding="utf-8") as out:
        for text in rows:
            out.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
    print(name, len(rows))

# What Python's jieba (0.42.1) cuts the Chinese sentences into, whitespace tokens left out as
# neardup's native jieba leaves them out: crates/segment's test compares with it.
try:
    import jieba
except ImportError:
    jieba = None
if jieba is not None:
    jieba.setLogLevel(60)
    with open(HERE / "zh.jsonl", encoding="utf-8") as f, open(
        HERE / "zh-jieba.jsonl", "w", encoding="utf-8"
    ) as out:
        for line in f:
            words = [w for w in jieba.lcut(json.loads(line)["text"]) if w.strip()]
            out.write(json.dumps(words, ensure_ascii=False) + "\n")
