"""Checks the conversational evaluation set's files (tests/eval/conversations/*.json).

    python3 tests/eval/check.py [FILE...]      # default: every file of the set

A file is one user's multi-session conversation with an assistant and the
questions asked about it later:

    {
      "name": "01-lisbon-move",               # the file's stem
      "language": "en" | "zh" | "mixed",
      "user": "Maya Okafor",                  # who the user is (free text)
      "sessions": [
        {"id": "s01", "messages": [
          {"id": "s01-m001", "role": "user" | "assistant",
           "content": "...", "created_at": "2025-01-05T09:12:00+01:00"},
          ...]},
        ...],
      "questions": [
        {"id": "q001", "question": "...", "answer": "...",
         "evidence": ["s03-m012", ...],       # every message that holds (part of) the answer
         "needs": [["s03-m012", "s03-m013"], ...],  # the parts the answer needs: each a list
                                              # of evidence messages any one of which states it
         "kind": "fact" | "update" | "temporal" | "multi_session" | "preference" | "detail"
                 | "unanswerable"},
        ...]
    }

An `unanswerable` question is one the user could plausibly ask later, close
to the conversation's people, places and topics, but which nothing said in
the conversation answers (a relative never named, a price never given, an
event never described). It has `"answer": ""` and `"evidence": []`.

`evidence` lists every message that holds the answer, the assistant's
restatements included; `needs` says what is enough: one message of each
part. A question is answered by a block when every part has a message in
it ("answer"), a stricter score asks for every evidence message ("all").

Rules checked: ids unique; message ids are `{session}-m{NNN}`; times are RFC
3339 with an offset and never go back within the file; every question has a
text; every question of another kind has an answer and at least one evidence
id, and every evidence id names a message; its `needs` (when the file has
them) is a non-empty list of non-empty parts whose ids are its evidence; an
`unanswerable` question has an empty answer, empty evidence and no `needs`;
either every answerable question of a file has `needs` or none has; at least 8 sessions, 300 messages and 200
questions, of which at least 25 are `unanswerable`; every kind present; an
`update` question has evidence in two sessions or more, and so has a
`multi_session` one.
"""

import json
import re
import sys
from datetime import datetime
from pathlib import Path

KINDS = {"fact", "update", "temporal", "multi_session", "preference", "detail", "unanswerable"}
MIN_UNANSWERABLE = 25
TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(Z|[+-]\d{2}:\d{2})$")


def check(path):
    errors = []
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if data.get("name") != Path(path).stem:
        errors.append(f"name {data.get('name')!r} is not the file's stem {Path(path).stem!r}")
    if data.get("language") not in {"en", "zh", "mixed"}:
        errors.append(f"language {data.get('language')!r}")
    messages = {}
    last = None
    sessions = data.get("sessions", [])
    seen_sessions = set()
    for session in sessions:
        sid = session.get("id")
        if sid in seen_sessions:
            errors.append(f"session {sid} twice")
        seen_sessions.add(sid)
        for m in session.get("messages", []):
            mid = m.get("id", "")
            if not re.fullmatch(rf"{re.escape(str(sid))}-m\d{{3}}", mid):
                errors.append(f"message id {mid!r} is not {sid}-mNNN")
            if mid in messages:
                errors.append(f"message {mid} twice")
            messages[mid] = sid
            if m.get("role") not in {"user", "assistant"}:
                errors.append(f"{mid}: role {m.get('role')!r}")
            if not isinstance(m.get("content"), str) or not m["content"].strip():
                errors.append(f"{mid}: empty content")
            at = m.get("created_at", "")
            if not TIME.match(at):
                errors.append(f"{mid}: created_at {at!r} is not RFC 3339 with an offset")
                continue
            t = datetime.fromisoformat(at.replace("Z", "+00:00"))
            if last is not None and t < last:
                errors.append(f"{mid}: time goes back ({at})")
            last = t
    questions = data.get("questions", [])
    ids = set()
    kinds = set()
    unanswerable = 0
    answerable = 0
    with_needs = 0
    for q in questions:
        qid = q.get("id")
        if qid in ids:
            errors.append(f"question {qid} twice")
        ids.add(qid)
        if not isinstance(q.get("question"), str) or not q["question"].strip():
            errors.append(f"{qid}: empty question")
        kind = q.get("kind")
        kinds.add(kind)
        if kind not in KINDS:
            errors.append(f"{qid}: kind {kind!r}")
        evidence = q.get("evidence")
        if not isinstance(evidence, list):
            errors.append(f"{qid}: evidence is not a list")
            evidence = []
        if kind == "unanswerable":
            unanswerable += 1
            if q.get("answer") != "":
                errors.append(f"{qid}: an unanswerable question has answer {q.get('answer')!r}, not \"\"")
            if evidence:
                errors.append(f"{qid}: an unanswerable question has evidence {evidence}")
            if "needs" in q:
                errors.append(f"{qid}: an unanswerable question has needs")
            continue
        needs = q.get("needs")
        if needs is not None:
            with_needs += 1
            if not isinstance(needs, list) or not needs or not all(isinstance(p, list) and p for p in needs):
                errors.append(f"{qid}: needs is not a non-empty list of non-empty parts")
            else:
                stray = [e for p in needs for e in p if e not in evidence]
                if stray:
                    errors.append(f"{qid}: needs names {stray}, not in its evidence")
        answerable += 1
        if not isinstance(q.get("answer"), str) or not q["answer"].strip():
            errors.append(f"{qid}: empty answer")
        if not evidence:
            errors.append(f"{qid}: no evidence")
        missing = [e for e in evidence if e not in messages]
        if missing:
            errors.append(f"{qid}: evidence {missing} names no message")
        if kind in {"update", "multi_session"} and len({messages.get(e) for e in evidence}) < 2:
            errors.append(f"{qid}: a {kind} question needs evidence in two sessions or more")
    if with_needs not in (0, answerable):
        errors.append(f"{with_needs} of {answerable} answerable questions have needs: all or none")
    if len(sessions) < 8:
        errors.append(f"{len(sessions)} sessions, fewer than 8")
    if len(messages) < 300:
        errors.append(f"{len(messages)} messages, fewer than 300")
    if len(questions) < 200:
        errors.append(f"{len(questions)} questions, fewer than 200")
    if unanswerable < MIN_UNANSWERABLE:
        errors.append(f"{unanswerable} unanswerable questions, fewer than {MIN_UNANSWERABLE}")
    if KINDS - kinds:
        errors.append(f"no question of kind {sorted(KINDS - kinds)}")
    return errors, len(sessions), len(messages), len(questions)


def main():
    files = sys.argv[1:] or sorted(str(p) for p in (Path(__file__).parent / "conversations").glob("*.json"))
    failed = 0
    for f in files:
        try:
            errors, s, m, q = check(f)
        except (OSError, ValueError) as e:
            errors, s, m, q = [str(e)], 0, 0, 0
        print(f"{'ok  ' if not errors else 'FAIL'} {f}: {s} sessions, {m} messages, {q} questions")
        for e in errors[:30]:
            print(f"     {e}")
        failed += bool(errors)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
