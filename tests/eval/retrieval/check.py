"""Checks the extended retrieval evaluation set (tests/eval/retrieval/).

    python3 tests/eval/retrieval/check.py

The set, read by `bench/src/bin/bench_retrieval.rs`, is:

- `samplconfigs/retrieval-queries.json`: the original 63 queries over the
  demo corpus (`samplconfigs/demo/`), fields `query`, `lang` (`en`, `zh`,
  `cross-en-zh`, `cross-zh-en`) and `relevant`; kind `answerable`. Checked
  here too (its URIs), never written.
- `unanswerable.json`, `multi.json`, `paragraphs.json` here: each a JSON list
  of queries,

      {
        "id": "p-hb-01",                       # unique across the set
        "query": "...",
        "lang": "en" | "zh" | "cross",         # cross: asked in the other
                                               # language than its answer
        "kind": "unanswerable" | "multi" | "paragraph",
        "relevant": ["viking://...", ...],     # every file that answers it
        "answer_paragraph": "..."              # paragraph queries only
      }

  - unanswerable: a question near the demo corpus's topics that nothing
    in it answers; `relevant` is empty.
  - multi: the answer spans three files or more, all listed.
  - paragraph: the answer is exactly one paragraph (the text between two
    blank lines, verbatim) of one long document; `relevant` is that
    document.
- `docs/*.md`: the long documents, written for this set, ingested as
  `viking://resources/longdocs/<name>.md`; each at least 20 KiB.

URIs map to files: `viking://resources/longdocs/X` to `docs/X` here, any
other `viking://X` to `samplconfigs/demo/X`; each must be a file.

Counts required: 20 unanswerable queries in English and 20 in Chinese, 12
multi queries (both languages present), 3 long documents (one Chinese at
least), 15 paragraph queries per document (some Chinese, some cross).
"""

import json
import re
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
DEMO = REPO / "samplconfigs" / "demo"
DOCS = HERE / "docs"
LONGDOCS = "viking://resources/longdocs/"
ORIGINAL = REPO / "samplconfigs" / "retrieval-queries.json"
FILES = {"unanswerable.json": "unanswerable", "multi.json": "multi", "paragraphs.json": "paragraph"}
LANGS = {"en", "zh", "cross"}
ORIGINAL_LANGS = {"en", "zh", "cross-en-zh", "cross-zh-en"}
MIN_DOC_BYTES = 20 * 1024
CJK = re.compile(r"[\u4e00-\u9fff]")


def path_of(uri):
    """The file behind `uri`, or None when it is not a viking:// URI."""
    if not uri.startswith("viking://"):
        return None
    if uri.startswith(LONGDOCS):
        return DOCS / uri[len(LONGDOCS):]
    return DEMO / uri[len("viking://"):]


def paragraphs(text):
    """The document's paragraphs: text between blank lines, trimmed of newlines."""
    return [p.strip("\n") for p in re.split(r"\n[ \t]*\n", text) if p.strip()]


def check_uris(where, relevant, errors):
    for uri in relevant:
        path = path_of(uri)
        if path is None or not path.is_file():
            errors.append(f"{where}: {uri} is no file ({path})")


def main():
    errors = []
    docs = {}
    for path in sorted(DOCS.glob("*.md")):
        text = path.read_text(encoding="utf-8")
        size = len(text.encode("utf-8"))
        if size < MIN_DOC_BYTES:
            errors.append(f"docs/{path.name}: {size} bytes, under {MIN_DOC_BYTES}")
        if not re.search(r"^## ", text, re.M):
            errors.append(f"docs/{path.name}: no second-level heading")
        docs[LONGDOCS + path.name] = (text, set(paragraphs(text)), size)
    if len(docs) < 3:
        errors.append(f"{len(docs)} long documents, fewer than 3")
    if not any(len(CJK.findall(text)) > len(text) / 4 for text, _, _ in docs.values()):
        errors.append("no long document in Chinese")

    original = json.loads(ORIGINAL.read_text(encoding="utf-8"))
    for i, q in enumerate(original):
        where = f"retrieval-queries.json[{i}]"
        if q.get("lang") not in ORIGINAL_LANGS:
            errors.append(f"{where}: lang {q.get('lang')!r}")
        if not q.get("relevant"):
            errors.append(f"{where}: no relevant URI")
        check_uris(where, q.get("relevant", []), errors)

    ids = set()
    kinds = Counter()
    per_doc = Counter()
    langs = Counter()
    for name, kind in FILES.items():
        items = json.loads((HERE / name).read_text(encoding="utf-8"))
        for q in items:
            qid = q.get("id")
            where = f"{name}: {qid}"
            if not isinstance(qid, str) or not qid or qid in ids:
                errors.append(f"{where}: id missing or repeated")
            ids.add(qid)
            if not isinstance(q.get("query"), str) or not q["query"].strip():
                errors.append(f"{where}: empty query")
            lang = q.get("lang")
            if lang not in LANGS:
                errors.append(f"{where}: lang {lang!r}")
            if q.get("kind") != kind:
                errors.append(f"{where}: kind {q.get('kind')!r} in {name} (want {kind})")
            relevant = q.get("relevant")
            if not isinstance(relevant, list) or len(set(relevant)) != len(relevant or []):
                errors.append(f"{where}: relevant is not a list of distinct URIs")
                relevant = []
            check_uris(where, relevant, errors)
            if kind == "unanswerable" and relevant:
                errors.append(f"{where}: an unanswerable query lists relevant URIs")
            if kind == "multi" and len(relevant) < 3:
                errors.append(f"{where}: a multi query needs 3 relevant files or more")
            if kind != "paragraph" and "answer_paragraph" in q:
                errors.append(f"{where}: answer_paragraph on a {kind} query")
            if kind == "paragraph":
                if len(relevant) != 1 or relevant[0] not in docs:
                    errors.append(f"{where}: relevant must be exactly one long document")
                else:
                    per_doc[relevant[0]] += 1
                    answer = q.get("answer_paragraph")
                    if not isinstance(answer, str) or answer not in docs[relevant[0]][1]:
                        errors.append(f"{where}: answer_paragraph is not a paragraph of {relevant[0]}")
                    elif answer.lstrip().startswith("#"):
                        errors.append(f"{where}: answer_paragraph is a heading")
            kinds[kind] += 1
            langs[(kind, lang)] += 1

    for lang in ("en", "zh"):
        if langs[("unanswerable", lang)] < 20:
            errors.append(f"{langs[('unanswerable', lang)]} unanswerable {lang} queries, fewer than 20")
        if langs[("multi", lang)] == 0:
            errors.append(f"no multi {lang} query")
    if kinds["multi"] < 12:
        errors.append(f"{kinds['multi']} multi queries, fewer than 12")
    for uri in docs:
        if per_doc[uri] < 15:
            errors.append(f"{uri}: {per_doc[uri]} paragraph queries, fewer than 15")
    if langs[("paragraph", "zh")] == 0 or langs[("paragraph", "cross")] == 0:
        errors.append("paragraph queries need some in Chinese and some cross-language")

    print(f"{'ok  ' if not errors else 'FAIL'} {HERE.relative_to(REPO)}")
    print(f"     original (answerable): {len(original)} queries")
    for kind in FILES.values():
        by_lang = ", ".join(f"{lang} {langs[(kind, lang)]}" for lang in sorted(LANGS) if langs[(kind, lang)])
        print(f"     {kind}: {kinds[kind]} queries ({by_lang})")
    for uri, (_, paras, size) in docs.items():
        print(f"     {uri}: {size} bytes, {len(paras)} paragraphs, {per_doc[uri]} paragraph queries")
    for e in errors[:50]:
        print(f"     {e}")
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
