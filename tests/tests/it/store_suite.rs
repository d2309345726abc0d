//! One behaviour suite for every store backend: each check is
//! an `async fn` over a store, run once against a [`LocalStore`] in a fresh
//! temporary directory and once against an [`S3Store`] on a fresh bucket of
//! a local moto server.
//!
//! [`LocalStore`]: skald::store::local::LocalStore
//! [`S3Store`]: skald::store::s3::S3Store

use std::sync::Arc;

use skald::store::{DirListing, ObjectMeta, PART_BYTES, PutMode, SharedStore, Store, StoreError};

// Runs each check against both backends: `local::<check>` and
// `s3::<check>`. A check marked `(borrowed)` takes `&dyn Store`; one marked
// `(shared)` takes `&SharedStore`, to hand clones to the tasks it spawns.
skald_tests::on_both_stores!(worker_threads = 2;
    get_put_round_trip(borrowed),
    missing_key_is_not_found(borrowed),
    key_below_an_object_is_not_found(borrowed),
    create_new_never_overwrites(borrowed),
    if_match_is_compare_and_swap(borrowed),
    list_returns_exactly_the_prefix(borrowed),
    delete_removes_and_tolerates_missing(borrowed),
    invalid_keys_are_rejected(borrowed),
    concurrent_compare_and_swap_loses_no_update(shared),
    list_dir_lists_one_level(borrowed),
    list_dir_cuts_at_the_limit_in_name_order(borrowed),
    list_dir_pages_past_a_thousand_entries(shared),
    list_dir_of_nothing_or_a_file_is_empty(borrowed),
    list_dir_tells_common_name_prefixes_apart(borrowed),
    a_body_written_in_parts_reads_back_whole(borrowed),
    a_conditional_delete_removes_only_the_version_it_names(borrowed),
);

/// Puts `text` under `key`.
async fn put(store: &dyn Store, key: &str, text: &str, mode: PutMode) -> Result<ObjectMeta, StoreError> {
    store.put(key, text.as_bytes().to_vec().into(), mode).await
}

/// The body under `key` as text; panics unless it exists.
async fn text_of(store: &dyn Store, key: &str) -> String {
    let object = store.get(key).await.unwrap_or_else(|e| panic!("get {key:?}: {e}"));
    assert_eq!(object.meta.key, key);
    assert_eq!(object.meta.size, object.body.len() as u64, "size of {key:?}");
    String::from_utf8(object.body.to_vec()).unwrap_or_else(|e| panic!("{key:?} is not UTF-8: {e}"))
}

fn assert_not_found<T: std::fmt::Debug>(result: &Result<T, StoreError>, key: &str) {
    assert!(matches!(result, Err(StoreError::NotFound(k)) if k == key), "want NotFound({key:?}), got {result:?}");
}

fn assert_conflict<T: std::fmt::Debug>(result: &Result<T, StoreError>, key: &str) {
    assert!(matches!(result, Err(StoreError::Conflict(k)) if k == key), "want Conflict({key:?}), got {result:?}");
}

async fn get_put_round_trip(store: &dyn Store) {
    let key = "accounts/a/tree/notes/hello.md";
    let put_meta = put(store, key, "hello, world", PutMode::Overwrite).await.expect("put");
    assert_eq!(put_meta.key, key);
    assert_eq!(put_meta.size, 12);
    assert!(!put_meta.etag.is_empty() && !put_meta.etag.contains('"'), "etag {:?}", put_meta.etag);

    let object = store.get(key).await.expect("get");
    assert_eq!(&object.body[..], b"hello, world");
    assert_eq!(object.meta, put_meta, "get reports the put's metadata");
    assert_eq!(store.head(key).await.expect("head"), put_meta, "head reports the put's metadata");

    // Equal content, equal etag; other content, other etag.
    let twin = put(store, "accounts/a/tree/notes/twin.md", "hello, world", PutMode::Overwrite).await.expect("put twin");
    assert_eq!(twin.etag, put_meta.etag, "equal content gives equal etags");
    let changed = put(store, key, "hello, there", PutMode::Overwrite).await.expect("overwrite");
    assert_ne!(changed.etag, put_meta.etag, "other content gives another etag");
    assert_eq!(store.head(key).await.expect("head after overwrite"), changed);
    assert_eq!(text_of(store, key).await, "hello, there");

    // Empty bodies are objects too.
    let empty = put(store, "empty", "", PutMode::Overwrite).await.expect("put empty");
    assert_eq!(empty.size, 0);
    assert_eq!(store.head("empty").await.expect("head empty"), empty);
    assert_eq!(text_of(store, "empty").await, "");
}

async fn missing_key_is_not_found(store: &dyn Store) {
    put(store, "present/key", "x", PutMode::Overwrite).await.expect("put");
    for key in ["missing", "present/missing", "present/ke"] {
        assert_not_found(&store.get(key).await, key);
        assert_not_found(&store.head(key).await, key);
    }
}

/// A key "below" an existing object is just another missing key (S3 has no
/// directories; the local store must not report a file-system error).
async fn key_below_an_object_is_not_found(store: &dyn Store) {
    put(store, "present/key", "x", PutMode::Overwrite).await.expect("put");
    let key = "present/key/below";
    assert_not_found(&store.get(key).await, key);
    assert_not_found(&store.head(key).await, key);
}

async fn create_new_never_overwrites(store: &dyn Store) {
    let key = "sessions/s1/meta.json";
    let created = put(store, key, "first", PutMode::CreateNew).await.expect("create a missing key");
    assert_eq!(text_of(store, key).await, "first");

    assert_conflict(&put(store, key, "second", PutMode::CreateNew).await, key);
    assert_eq!(text_of(store, key).await, "first", "a refused create leaves the object alone");
    assert_eq!(store.head(key).await.expect("head"), created);
}

async fn if_match_is_compare_and_swap(store: &dyn Store) {
    let key = "ledger.json";
    let v1 = put(store, key, "v1", PutMode::Overwrite).await.expect("put v1");
    let v2 = put(store, key, "v2", PutMode::IfMatch(v1.etag.clone())).await.expect("swap with the current etag");
    assert_eq!(text_of(store, key).await, "v2");
    assert_eq!(store.head(key).await.expect("head"), v2);

    assert_conflict(&put(store, key, "v3", PutMode::IfMatch(v1.etag.clone())).await, key);
    assert_eq!(text_of(store, key).await, "v2", "a stale swap leaves the object alone");
    assert_eq!(store.head(key).await.expect("head"), v2);

    let missing = "ledger-missing.json";
    assert_conflict(&put(store, missing, "v1", PutMode::IfMatch(v1.etag)).await, missing);
    assert_not_found(&store.get(missing).await, missing);
}

async fn list_returns_exactly_the_prefix(store: &dyn Store) {
    // Written out of order; sizes differ so that a mix-up shows.
    let objects = [("z", "zzzzz"), ("a/b/c/3", "333"), ("a/bc", "4444"), ("a/b/2", "22"), ("a/b/1", "1"), ("a/a", "")];
    let mut written = Vec::new();
    for (key, text) in objects {
        written.push(put(store, key, text, PutMode::Overwrite).await.unwrap_or_else(|e| panic!("put {key}: {e}")));
    }
    written.sort_by(|a, b| a.key.cmp(&b.key));
    let only = |keys: &[&str]| -> Vec<ObjectMeta> {
        written.iter().filter(|m| keys.contains(&m.key.as_str())).cloned().collect()
    };

    let listed = store.list("a/b/").await.expect("list a/b/");
    assert_eq!(listed, only(&["a/b/1", "a/b/2", "a/b/c/3"]), "list(\"a/b/\") must not include a/bc");
    assert_eq!(listed.iter().map(|m| m.size).collect::<Vec<_>>(), [1, 2, 3]);

    assert_eq!(store.list("a/b").await.expect("list a/b"), only(&["a/b/1", "a/b/2", "a/b/c/3", "a/bc"]));
    assert_eq!(store.list("a/b/c").await.expect("list a/b/c"), only(&["a/b/c/3"]));
    assert_eq!(store.list("").await.expect("list everything"), written);
    assert_eq!(store.list("nothing/").await.expect("list an empty region"), []);
    assert_eq!(store.list("a/b/x").await.expect("list an empty region"), []);
}

async fn delete_removes_and_tolerates_missing(store: &dyn Store) {
    put(store, "d/keep", "keep", PutMode::Overwrite).await.expect("put keep");
    put(store, "d/gone", "gone", PutMode::Overwrite).await.expect("put gone");
    store.delete("d/gone").await.expect("delete");
    assert_not_found(&store.get("d/gone").await, "d/gone");
    assert_not_found(&store.head("d/gone").await, "d/gone");
    let keys: Vec<String> = store.list("d/").await.expect("list").into_iter().map(|m| m.key).collect();
    assert_eq!(keys, ["d/keep"]);

    store.delete("d/gone").await.expect("deleting a deleted key");
    store.delete("never/was").await.expect("deleting a missing key");
    assert_eq!(text_of(store, "d/keep").await, "keep");
}

async fn invalid_keys_are_rejected(store: &dyn Store) {
    fn assert_invalid<T: std::fmt::Debug>(result: &Result<T, StoreError>, key: &str) {
        assert!(
            matches!(result, Err(StoreError::InvalidKey(k)) if k == key),
            "want InvalidKey({key:?}), got {result:?}"
        );
    }
    put(store, "x", "x", PutMode::Overwrite).await.expect("put x");
    for key in ["../x", "a//b", "a\\b", "", "/x", "a/./b", "a/"] {
        assert_invalid(&store.get(key).await, key);
        assert_invalid(&store.head(key).await, key);
        for mode in [PutMode::Overwrite, PutMode::CreateNew, PutMode::IfMatch("etag".to_owned())] {
            assert_invalid(&put(store, key, "bad", mode).await, key);
        }
        assert_invalid(&store.delete(key).await, key);
        assert_invalid(&store.list_dir(key, 10).await, key);
    }
    let keys: Vec<String> = store.list("").await.expect("list").into_iter().map(|m| m.key).collect();
    assert_eq!(keys, ["x"], "nothing was written");
    assert_eq!(text_of(store, "x").await, "x");
}

async fn concurrent_compare_and_swap_loses_no_update(store: &SharedStore) {
    const TASKS: u64 = 16;
    const MAX_TRIES: u32 = 100;
    let key = "counter.json";
    put(store.as_ref(), key, "[]", PutMode::Overwrite).await.expect("put the empty array");

    let mut tasks = tokio::task::JoinSet::new();
    for id in 0..TASKS {
        let store = Arc::clone(store);
        tasks.spawn(async move {
            for attempt in 1..=MAX_TRIES {
                let current = store.get(key).await.unwrap_or_else(|e| panic!("task {id}: get: {e}"));
                let mut ids: Vec<u64> = serde_json::from_slice(&current.body)
                    .unwrap_or_else(|e| panic!("task {id}: {key} is not a JSON array of ids: {e}"));
                ids.push(id);
                let body = serde_json::to_vec(&ids).unwrap_or_else(|e| panic!("task {id}: encode: {e}"));
                match store.put(key, body.into(), PutMode::IfMatch(current.meta.etag)).await {
                    Ok(_) => return attempt,
                    Err(StoreError::Conflict(_)) => tokio::task::yield_now().await,
                    Err(e) => panic!("task {id}: put: {e}"),
                }
            }
            panic!("task {id}: no successful swap in {MAX_TRIES} tries");
        });
    }
    let mut attempts = 0;
    while let Some(joined) = tasks.join_next().await {
        attempts += joined.expect("a task panicked");
    }

    let final_object = store.get(key).await.expect("get the result");
    let mut ids: Vec<u64> = serde_json::from_slice(&final_object.body).expect("the result is a JSON array of ids");
    ids.sort_unstable();
    assert_eq!(ids, (0..TASKS).collect::<Vec<_>>(), "every task's id exactly once ({attempts} attempts in all)");
}

/// `list_dir(dir, limit)` as the files' names (checked to be directly under
/// `dir`), the directories' names and `truncated`.
async fn level(store: &dyn Store, dir: &str, limit: usize) -> (Vec<String>, Vec<String>, bool) {
    let listing = store.list_dir(dir, limit).await.unwrap_or_else(|e| panic!("list_dir({dir:?}, {limit}): {e}"));
    let prefix = format!("{dir}/");
    let files = listing
        .files
        .iter()
        .map(|f| match f.key.strip_prefix(&prefix) {
            Some(name) if !name.is_empty() && !name.contains('/') => name.to_owned(),
            _ => panic!("list_dir({dir:?}) lists {:?}, which is not directly under it", f.key),
        })
        .collect();
    (files, listing.dirs, listing.truncated)
}

/// Puts an empty-ish body (the key itself) under each of `keys`, 16 at a time.
async fn put_all(store: &SharedStore, keys: &[String]) {
    for chunk in keys.chunks(16) {
        let mut tasks = tokio::task::JoinSet::new();
        for key in chunk {
            let (store, key) = (Arc::clone(store), key.clone());
            tasks.spawn(async move {
                let body = key.clone().into_bytes().into();
                store.put(&key, body, PutMode::Overwrite).await.unwrap_or_else(|e| panic!("put {key}: {e}"));
            });
        }
        while let Some(joined) = tasks.join_next().await {
            joined.expect("a put task panicked");
        }
    }
}

fn strings(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

async fn list_dir_lists_one_level(store: &dyn Store) {
    // Written out of order; sizes differ so that a mix-up shows. Names sort
    // by bytes: `.` < `Z` < `a` < CJK.
    let objects = [
        ("t/d/b.md", "bb"),
        ("t/d/sub/x.md", "x"),
        ("t/d/.abstract.md", "abstract"),
        ("t/d/a.md", "a"),
        ("t/d/sub/deeper/y.md", "y"),
        ("t/d/Z.md", "zzz"),
        ("t/d/年糕.md", "橘猫"),
        ("t/d/other/z.md", "z"),
        ("t/e.md", "e"),
        ("t/dz/q.md", "q"),
    ];
    let mut written = Vec::new();
    for (key, text) in objects {
        written.push(put(store, key, text, PutMode::Overwrite).await.unwrap_or_else(|e| panic!("put {key}: {e}")));
    }
    let listing = store.list_dir("t/d", 100).await.expect("list_dir t/d");
    let direct = ["t/d/.abstract.md", "t/d/Z.md", "t/d/a.md", "t/d/b.md", "t/d/年糕.md"];
    let want: Vec<ObjectMeta> =
        direct.iter().map(|k| written.iter().find(|m| m.key == *k).cloned().expect("written")).collect();
    assert_eq!(listing.files, want, "the files directly under t/d, sorted, with their put metadata");
    assert_eq!(listing.dirs, ["other", "sub"], "each subdirectory once, by name; nothing deeper");
    assert!(!listing.truncated, "{listing:?}");

    assert_eq!(level(store, "t", 100).await, (strings(&["e.md"]), strings(&["d", "dz"]), false));
    assert_eq!(level(store, "t/d/sub", 100).await, (strings(&["x.md"]), strings(&["deeper"]), false));
    assert_eq!(level(store, "t/d/sub/deeper", 100).await, (strings(&["y.md"]), Vec::new(), false));
}

async fn list_dir_cuts_at_the_limit_in_name_order(store: &dyn Store) {
    // Names in order: a.md, b/, c.md, d/, e.md.
    for key in ["m/e.md", "m/d/deep/2.md", "m/c.md", "m/b/1.md", "m/a.md"] {
        put(store, key, key, PutMode::Overwrite).await.unwrap_or_else(|e| panic!("put {key}: {e}"));
    }
    let cases: &[(usize, &[&str], &[&str], bool)] = &[
        (0, &[], &[], true),
        (1, &["a.md"], &[], true),
        (2, &["a.md"], &["b"], true),
        (3, &["a.md", "c.md"], &["b"], true),
        (4, &["a.md", "c.md"], &["b", "d"], true),
        (5, &["a.md", "c.md", "e.md"], &["b", "d"], false),
        (6, &["a.md", "c.md", "e.md"], &["b", "d"], false),
    ];
    for (limit, files, dirs, truncated) in cases {
        assert_eq!(
            level(store, "m", *limit).await,
            (strings(files), strings(dirs), *truncated),
            "list_dir(\"m\", {limit}): the first {limit} names, files and directories merged"
        );
    }
}

/// More entries than one S3 listing page (1000): the pages are merged, and
/// the limit still cuts in name order.
async fn list_dir_pages_past_a_thousand_entries(store: &SharedStore) {
    // A directory first and one last, 1001 files between them.
    let mut keys: Vec<String> = (0..=1000).map(|i| format!("p/f{i:04}.md")).collect();
    keys.extend(["p/a/1.md".to_owned(), "p/z/deep/2.md".to_owned()]);
    put_all(store, &keys).await;
    let file = |i: usize| format!("f{i:04}.md");
    let all_files: Vec<String> = (0..=1000).map(file).collect();
    let cases: Vec<(usize, Vec<String>, Vec<String>, bool)> = vec![
        (2000, all_files.clone(), strings(&["a", "z"]), false),
        (1003, all_files.clone(), strings(&["a", "z"]), false),
        (1002, all_files.clone(), strings(&["a"]), true),
        (1001, (0..1000).map(file).collect(), strings(&["a"]), true),
        (10, (0..9).map(file).collect(), strings(&["a"]), true),
    ];
    for (limit, files, dirs, truncated) in cases {
        let (got_files, got_dirs, got_truncated) = level(store.as_ref(), "p", limit).await;
        assert_eq!(
            (got_files.len(), &got_dirs, got_truncated),
            (files.len(), &dirs, truncated),
            "list_dir(\"p\", {limit}): file count, directories, truncated"
        );
        assert_eq!(got_files, files, "list_dir(\"p\", {limit}): the files");
    }
}

async fn list_dir_of_nothing_or_a_file_is_empty(store: &dyn Store) {
    for key in ["f/doc.md", "f/sub/x.md", "f/gone/y.md"] {
        put(store, key, "x", PutMode::Overwrite).await.unwrap_or_else(|e| panic!("put {key}: {e}"));
    }
    store.delete("f/gone/y.md").await.expect("delete f/gone/y.md");
    // Missing; a file; a file's name without its extension; a directory
    // emptied by a delete (gone on S3, an empty directory locally).
    for dir in ["nothing", "f/nothing", "f/doc.md", "f/sub/x.md", "f/doc", "f/gone"] {
        for limit in [0, 1, 10] {
            let listing = store.list_dir(dir, limit).await.unwrap_or_else(|e| panic!("list_dir {dir:?}: {e}"));
            assert_eq!(listing, DirListing::default(), "list_dir({dir:?}, {limit}) lists nothing, not truncated");
        }
    }
}

/// `a/b` is not `a/b.md` nor `a/bc`: a directory is its name plus `/`.
async fn list_dir_tells_common_name_prefixes_apart(store: &dyn Store) {
    for key in ["a/b.md", "a/bc/x.md", "a/b/y.md", "a/b/z/w.md", "a/b-c.md"] {
        put(store, key, key, PutMode::Overwrite).await.unwrap_or_else(|e| panic!("put {key}: {e}"));
    }
    assert_eq!(level(store, "a", 10).await, (strings(&["b-c.md", "b.md"]), strings(&["b", "bc"]), false));
    assert_eq!(level(store, "a/b", 10).await, (strings(&["y.md"]), strings(&["z"]), false));
    assert_eq!(level(store, "a/bc", 10).await, (strings(&["x.md"]), Vec::new(), false));
    assert_eq!(level(store, "a/b.m", 10).await, (Vec::new(), Vec::new(), false));
    // Cut in S3's key order, a directory with its `/`: b-c.md < b.md < b/ < bc/
    // (so a cut never skips an entry S3 paged before another).
    assert_eq!(level(store, "a", 2).await, (strings(&["b-c.md", "b.md"]), Vec::new(), true));
    assert_eq!(level(store, "a", 3).await, (strings(&["b-c.md", "b.md"]), strings(&["b"]), true));
}

/// A body of three parts (a multipart upload on S3) reads back whole,
/// with the etag and size its write reported, under the same
/// preconditions as a put; a body of one part is a plain put.
async fn a_body_written_in_parts_reads_back_whole(store: &dyn Store) {
    let key = "accounts/a/index/segments/big.seg";
    let part = |byte: u8, len: usize| bytes::Bytes::from(vec![byte; len]);
    let parts = || vec![part(1, PART_BYTES), part(2, PART_BYTES), part(3, 1000)];
    let meta = store.put_parts(key, &mut parts().into_iter(), PutMode::CreateNew).await.expect("put in parts");
    assert_eq!(meta.size, 2 * PART_BYTES as u64 + 1000);
    let object = store.get(key).await.expect("get");
    assert_eq!(object.body.to_vec(), parts().concat(), "the parts joined, in order");
    assert_eq!(object.meta, meta, "get reports the write's metadata");

    // Its preconditions hold as a put's.
    let again = store.put_parts(key, &mut parts().into_iter(), PutMode::CreateNew).await;
    assert_conflict(&again, key);
    let stale = store.put_parts(key, &mut parts().into_iter(), PutMode::IfMatch("0123".into())).await;
    assert_conflict(&stale, key);
    let swapped = store
        .put_parts(key, &mut vec![part(4, PART_BYTES), part(5, 10)].into_iter(), PutMode::IfMatch(meta.etag.clone()))
        .await
        .expect("compare-and-swap in parts");
    assert_eq!(swapped.size, PART_BYTES as u64 + 10);
    assert_eq!(store.get(key).await.expect("get").meta, swapped);

    // One part, or none: a plain put.
    let small = "accounts/a/index/segments/small.seg";
    let one = store.put_parts(small, &mut vec![part(7, 5)].into_iter(), PutMode::CreateNew).await.expect("one part");
    assert_eq!(text_of(store, small).await.as_bytes(), [7u8; 5]);
    assert_eq!(one.size, 5);
    let empty = store.put_parts("empty.seg", &mut std::iter::empty(), PutMode::CreateNew).await.expect("no part");
    assert_eq!(empty.size, 0);
    assert_eq!(text_of(store, "empty.seg").await, "");
}

/// A conditional delete removes the object only while it holds the version
/// the caller read: a write that landed since is kept; a missing object is
/// already what the delete wanted.
async fn a_conditional_delete_removes_only_the_version_it_names(store: &dyn Store) {
    let key = "accounts/a/tree/user/u/memories/preferences/sushi.md";
    let first = put(store, key, "The user loves sushi.", PutMode::CreateNew).await.expect("put");
    let second = put(store, key, "The user loves sushi, and ramen.", PutMode::IfMatch(first.etag.clone()))
        .await
        .expect("another writer's update");
    assert_conflict(&store.delete_if(key, &first.etag).await, key);
    assert_eq!(text_of(store, key).await, "The user loves sushi, and ramen.", "the newer write is kept");
    store.delete_if(key, &second.etag).await.expect("the version read is removed");
    assert_not_found(&store.get(key).await, key);
    store.delete_if(key, &second.etag).await.expect("gone already: nothing to do");
}
