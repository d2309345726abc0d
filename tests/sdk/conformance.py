"""OpenViking's own Python SDK (openviking-sdk 0.1.17, unchanged) against a
running Skald in `api_key` mode.

    python tests/sdk/conformance.py URL KEY [OTHER_KEY ADMIN_KEY]

URL is Skald's base URL; KEY an API key of user `default` of account
`default` (who owns the demo corpus, samplconfigs/demo), created with
`skald keys create --account default --user default`. It runs `find`,
`search`, `search_context` (max_tokens, purpose, detail, quotas, and
dedup_turns over a session written with `add_message`), `create_session`
and the session's `load`, the write surface (`write`, `batch_write`,
`tree`, `grep`, `glob`, `mkdir`, `mv`, `rm`; a shared root refused to a user key),
resources and skills (`add_resource` of a file, of a directory and of a
URL, which is refused; `add_skill`, `list_skills`, `find_skills`),
`list_watches`, `wait_processed`, `list_tasks`,
`list_sessions` and `delete_session` through
`SyncHTTPClient(url=..., api_key=...)`,
and checks that a wrong key raises the SDK's authentication error and that
a user key naming another user raises its permission error. With
OTHER_KEY (another user's key) and ADMIN_KEY (an admin key, made with
`--role admin`): the other user neither reads nor removes the first's
resources and skills, and the admin key adds a resource and a skill to the
shared roots, which the user key finds but cannot remove. Prints one
line per check and `N passed, N failed`; exits 1 on any failure.
"""

import os
import sys
import tempfile
import traceback

from openviking_sdk import SyncHTTPClient
from openviking_sdk.errors import InvalidArgumentError, PermissionDeniedError, UnauthenticatedError

CAT = "what does my cat eat"
NIANGAO = "viking://user/default/memories/entities/pets/niangao.md"


def uris(result):
    """Every hit's URI in a find/search result, in order."""
    items = []
    for kind in ("memories", "resources", "skills"):
        items.extend(result.get(kind) or [])
    return [item["uri"] for item in items]


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    url, key = sys.argv[1], sys.argv[2]
    client = SyncHTTPClient(url=url, api_key=key, timeout=60)
    client.initialize()
    checks = []

    def check(name):
        def register(fn):
            checks.append((name, fn))
            return fn

        return register

    @check("health answers without a key")
    def _():
        assert client.health() is True

    @check("find: the cat's memory among the first hits, as the key's user")
    def _():
        result = client.find(CAT, limit=3)
        found = uris(result)
        # The plugins' committed sessions about the cat (event memories of
        # the same conversation) may rank with it.
        assert NIANGAO in found, found
        assert all(u.startswith("viking://user/default/") for u in found if "/user/" in u), found

    @check("find: a target_uri and options narrow the hits")
    def _():
        result = client.find(
            CAT,
            target_uri="viking://user/default/memories/entities",
            limit=5,
            options={"context_type": "memory", "score_threshold": 0.1},
        )
        found = uris(result)
        assert found and all(u.startswith("viking://user/default/memories/entities/") for u in found), found

    state = {}

    @check("create_session and add_message")
    def _():
        created = client.create_session()
        sid = created.get("session_id")
        assert sid, created
        state["session"] = sid
        client.add_message(sid, "user", content="我家猫平时吃什么？")
        client.add_message(sid, "assistant", content="年糕在吃低脂猫粮。")
        client.add_message(sid, "user", content=CAT)

    @check("session load returns what was written")
    def _():
        loaded = client.session(state["session"]).load()
        count = loaded.get("message_count")
        assert count == 3, loaded
        assert loaded.get("session_id") == state["session"], loaded

    @check("search (list mode) with the session")
    def _():
        result = client.search(CAT, session_id=state["session"], limit=5)
        found = uris(result)
        assert NIANGAO in found, found

    @check("search_context: a block within max_tokens, by purpose, detail and quotas")
    def _():
        result = client.search_context(
            CAT,
            limit=10,
            options={"max_tokens": 600, "purpose": "chat", "detail": "auto", "quotas": {"entities": 2, "events": 2}},
        )
        stats = result.get("stats") or {}
        assert result.get("rendered"), result
        assert 0 < stats["used_tokens"] <= 600, stats
        entries = result.get("entries") or []
        per_category = {}
        for e in entries:
            segments = e["uri"].split("/")
            if segments[4:5] == ["memories"]:
                per_category[segments[5]] = per_category.get(segments[5], 0) + 1
        assert per_category.get("entities", 0) <= 2 and per_category.get("events", 0) <= 2, per_category
        # The cat's memory is at the top; the plugins' committed sessions
        # (event memories of the same conversation) may rank with it.
        assert NIANGAO in [e["uri"] for e in entries[:3]], [e.get("uri") for e in entries]
        assert NIANGAO in result["rendered"], result["rendered"][:400]

    @check("search_context: dedup_turns cools what an earlier turn served")
    def _():
        options = {"max_tokens": 600, "dedup_turns": 3}
        first = client.search_context(CAT, session_id=state["session"], options=options)
        served = [e["uri"] for e in first.get("entries") or []]
        assert NIANGAO in served, served
        dedup = first["stats"]["dedup"]
        assert dedup["status"] in ("new", "ok"), dedup
        # The next turn of the conversation asks again.
        client.add_message(state["session"], "assistant", content="低脂猫粮，少量零食。")
        client.add_message(state["session"], "user", content="再说一次，猫吃什么？")
        second = client.search_context(CAT, session_id=state["session"], options=options)
        dedup = second["stats"]["dedup"]
        assert dedup["status"] == "ok" and dedup["cooled"] >= 1, dedup
        again = [e["uri"] for e in second.get("entries") or []]
        assert NIANGAO not in again, again

    notes = "viking://user/default/notes/sdk-conformance"

    @check("write, tree, grep and glob: a note is written and found by the letter")
    def _():
        client.write(f"{notes}/todo.md", "Renew the quokka permit before May.", mode="replace")
        client.write(f"{notes}/todo.md", "\nCall the vet.", mode="append")
        assert client.read(f"{notes}/todo.md") == "Renew the quokka permit before May.\nCall the vet."
        listed = [e["uri"] for e in client.tree("viking://user/default/notes", level_limit=3)]
        assert f"{notes}/todo.md" in listed, listed
        found = client.grep(notes, "quokka permit", case_insensitive=True)
        assert [(m["uri"], m["line"]) for m in found["matches"]] == [(f"{notes}/todo.md", 1)], found
        globbed = client.glob("**/todo.md", uri="viking://user/default/notes")
        assert globbed["matches"] == [f"{notes}/todo.md"], globbed

    @check("batch_write: two files below one root, one call")
    def _():
        client.batch_write(
            notes,
            [
                {"uri": f"{notes}/a.md", "content": "First of the batch."},
                {"uri": f"{notes}/b.md", "content": "Second of the batch.", "mode": "create"},
            ],
        )
        assert client.read(f"{notes}/b.md") == "Second of the batch."

    @check("mkdir, mv and rm: the note moves, then is forgotten")
    def _():
        client.mkdir(f"{notes}/done", description="Finished items.")
        client.mv(f"{notes}/todo.md", f"{notes}/done/todo.md")
        assert client.read(f"{notes}/done/todo.md").startswith("Renew the quokka permit")
        client.rm(notes, recursive=True)
        found = client.grep("viking://user/default", "quokka permit")
        assert found["matches"] == [], found

    @check("a user key writing a shared root raises the SDK's permission error")
    def _():
        try:
            client.write("viking://resources/sdk-conformance.md", "x")
        except PermissionDeniedError:
            return
        raise AssertionError("a user key wrote viking://resources")

    @check("add_resource: a local file is uploaded into the user's resources and found")
    def _():
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "glacier-notes.md")
            with open(path, "w", encoding="utf-8") as f:
                f.write("# Glacier notes\n\nThe Perito Moreno glacier calves every few days in summer.\n")
            result = client.add_resource(path, wait=True)
        assert result["root_uri"] == "viking://user/default/resources/glacier-notes.md", result
        found = client.find("which glacier calves in summer", limit=5)
        assert result["root_uri"] in uris(found), uris(found)

    @check("add_resource: a local directory arrives as a directory of Markdown")
    def _():
        with tempfile.TemporaryDirectory() as tmp:
            root = os.path.join(tmp, "kayak-kit")
            os.makedirs(os.path.join(root, "lists"))
            with open(os.path.join(root, "README.md"), "w", encoding="utf-8") as f:
                f.write("# Kayak kit\n\nWhat goes in the dry bag.\n")
            with open(os.path.join(root, "lists", "pack.txt"), "w", encoding="utf-8") as f:
                f.write("spray deck, bilge pump, paddle float\n")
            result = client.add_resource(root, parent="viking://user/default/resources", wait=True)
        base = "viking://user/default/resources/kayak-kit"
        assert result["root_uri"] == base, result
        assert client.read(f"{base}/lists/pack.txt.md").startswith("spray deck"), client.read(f"{base}/lists/pack.txt.md")

    @check("add_resource: a URL is refused with the SDK's invalid-argument error, naming what to do")
    def _():
        try:
            client.add_resource("https://example.com/guide.html")
        except InvalidArgumentError as e:
            assert "temp_upload" in str(e), str(e)
            return
        raise AssertionError("a URL was accepted by a server that fetches none")

    @check("add_skill, list_skills and find_skills")
    def _():
        skill = "---\nname: tide-tables\ndescription: Read a tide table before a coastal walk\n---\n\nCheck the low-water time.\n"
        added = client.add_skill(skill, wait=True)
        assert added["uri"] == "viking://user/default/skills/tide-tables", added
        listed = [s["name"] for s in client.list_skills()["skills"]]
        assert "tide-tables" in listed, listed
        found = client.find_skills("when is low water for my coastal walk", limit=5)
        assert any(u.startswith(added["uri"]) for u in uris(found)), found

    @check("list_watches, wait_processed and list_tasks answer")
    def _():
        assert client.list_watches() == [], client.list_watches()
        assert client.wait_processed()["waited"] is True
        assert isinstance(client.list_tasks(), list)

    other_key = sys.argv[3] if len(sys.argv) > 4 else None
    admin_key = sys.argv[4] if len(sys.argv) > 4 else None

    def client_with(api_key):
        made = SyncHTTPClient(url=url, api_key=api_key, timeout=60)
        made.initialize()
        return made

    def raises(error, fn):
        try:
            fn()
        except error:
            return True
        return False

    if other_key and admin_key:

        @check("another user's key neither reads nor removes the first user's resource and skill")
        def _():
            bob = client_with(other_key)
            try:
                mine = "viking://user/default/resources/glacier-notes.md"
                assert raises(PermissionDeniedError, lambda: bob.read(mine)), "bob read default's resource"
                assert raises(PermissionDeniedError, lambda: bob.rm(mine)), "bob removed default's resource"
                skills = "viking://user/default/skills"
                assert raises(PermissionDeniedError, lambda: bob.delete_skill("tide-tables", target_uri=skills))
                found = uris(bob.find("which glacier calves in summer", limit=10))
                assert mine not in found, found
            finally:
                bob.close()

        @check("an admin key adds to the shared roots; the user key finds it and cannot remove it")
        def _():
            admin = client_with(admin_key)
            try:
                with tempfile.TemporaryDirectory() as tmp:
                    path = os.path.join(tmp, "ferry-times.md")
                    with open(path, "w", encoding="utf-8") as f:
                        f.write("# Ferry times\n\nThe first ferry to Hydra leaves Piraeus at 07:40.\n")
                    added = admin.add_resource(path, wait=True)
                assert added["root_uri"] == "viking://resources/ferry-times.md", added
                skill = "---\nname: ferry-booking\ndescription: Book a Greek island ferry\n---\n\nUse the port's site.\n"
                shared = admin.add_skill(skill, wait=True)
                assert shared["uri"] == "viking://agent/skills/ferry-booking", shared
            finally:
                admin.close()
            found = uris(client.find("when does the first ferry to Hydra leave", limit=5))
            assert "viking://resources/ferry-times.md" in found, found
            skills = uris(client.find_skills("book a ferry to a Greek island", limit=5))
            assert any(u.startswith("viking://agent/skills/ferry-booking") for u in skills), skills
            assert raises(PermissionDeniedError, lambda: client.rm("viking://resources/ferry-times.md"))
            assert raises(PermissionDeniedError, lambda: client.delete_skill("ferry-booking"))

    @check("list_sessions and delete_session")
    def _():
        listed = [s["session_id"] for s in client.list_sessions()]
        assert state["session"] in listed, listed
        client.delete_session(state["session"])
        listed = [s["session_id"] for s in client.list_sessions()]
        assert state["session"] not in listed, listed

    def refused(error, what, **client_args):
        """A find by a client made with `client_args` raises `error`."""
        client_args.setdefault("api_key", key)
        other = SyncHTTPClient(url=url, timeout=30, **client_args)
        other.initialize()
        try:
            other.find(CAT, limit=1)
        except error:
            return
        finally:
            other.close()
        raise AssertionError(what)

    @check("a wrong key raises the SDK's authentication error")
    def _():
        wrong = "skald_" + "0" * 16 + "_" + "0" * 64
        refused(UnauthenticatedError, "a wrong key was served", api_key=wrong)

    @check("a user key naming another user raises the SDK's permission error")
    def _():
        refused(PermissionDeniedError, "a user key acted as another user", user="someone-else")

    passed = failed = 0
    for name, fn in checks:
        try:
            fn()
        except Exception:  # noqa: BLE001 - every failure is reported and counted
            failed += 1
            print(f"FAIL {name}")
            traceback.print_exc(limit=3)
        else:
            passed += 1
            print(f"ok   {name}")
    client.close()
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
