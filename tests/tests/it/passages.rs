//! Passages of long files: a question answered by one paragraph deep in a
//! long document finds that paragraph. `find` names its lines, the
//! context block shows it whole at `full` with its `lines`, and a read of
//! those lines returns it — through `ingest` and through the indexer; a
//! file that gets shorter, or goes, leaves no passage behind.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Value, json};
use skald::app::App;
use skald::identity::AccountId;
use skald::index::record::{LEVEL_FILE, LEVEL_PASSAGE};
use skald::index::{IndexSnapshot, Level, Record};
use skald::indexer::{Change, apply};
use skald::store::{PutMode, SharedStore};
use skald_tests::fixture::{
    ACCOUNT, DEFAULT_CORPUS, Handler, app_over_store, app_with_corpus_in, call, find, ingest_tree, local_store, search,
    tree_key, write_tree,
};

const GUIDE: &str = "resources/guides/operations.md";
const GUIDE_URI: &str = "viking://resources/guides/operations.md";
/// The one paragraph that answers the question, deep in the guide.
const ANSWER: &str = "The backup rotation keeps fourteen nightly snapshots in the glacier vault named tern-archive, \
                      and the oldest snapshot is pruned at dawn.";
const QUESTION: &str = "how many nightly snapshots does the backup rotation keep in the glacier vault";

/// Filler topics, one section each, with words of their own.
const TOPICS: &[&str] = &[
    "kettle", "lantern", "harbor", "meadow", "copper", "violet", "saddle", "walnut", "quartz", "pepper", "falcon",
    "marble", "ginger", "thimble", "cobalt", "ember", "juniper", "pebble", "saffron", "tundra",
];

/// A long operations guide (about 20 KB): a section per topic with two
/// paragraphs, and [`ANSWER`] as a paragraph of section `at` when given.
fn guide(sections: usize, at: Option<usize>) -> String {
    let mut text =
        String::from("---\ntags: team=ops\n---\n# Operations guide\n\nHow the platform is run, topic by topic.\n");
    for (i, topic) in TOPICS.iter().cycle().take(sections).enumerate() {
        text.push_str(&format!("\n## The {topic} procedure\n\n"));
        for part in 0..2 {
            let words: Vec<String> = (0..45).map(|w| format!("{topic}{}", (w * 7 + part * 3 + i) % 23)).collect();
            text.push_str(&format!("The {topic} step {part} covers {}.\n\n", words.join(" ")));
        }
        if Some(i) == at {
            text.push_str(&format!("{ANSWER}\n"));
        }
    }
    text
}

fn account() -> AccountId {
    AccountId::new(ACCOUNT).expect("account")
}

/// The answer's line in `text`, 1-based.
fn answer_line(text: &str) -> u32 {
    let at = text.find(ANSWER).expect("the guide holds the answer");
    u32::try_from(text[..at].matches('\n').count() + 1).expect("small")
}

async fn records_of(store: &SharedStore, uri: &str) -> Vec<Record> {
    let snapshot = IndexSnapshot::load(store, &account(), None).await.expect("load the index");
    let mut records: Vec<Record> =
        snapshot.records().map(|(r, _)| r).filter(|r| r.uri.as_str() == uri).cloned().collect();
    records.sort_by_key(|r| r.level);
    records
}

/// Asserts the index holds exactly the file record and `passages`
/// passages of the guide (levels `LEVEL_PASSAGE..`), in order, covering the
/// text without gaps that hold words.
async fn assert_passages(store: &SharedStore, text: &str, passages: usize) {
    let records = records_of(store, GUIDE_URI).await;
    let levels: Vec<Level> = records.iter().map(|r| r.level).collect();
    let want: Vec<Level> = std::iter::once(LEVEL_FILE)
        .chain((0..passages).map(|n| LEVEL_PASSAGE + Level::try_from(n).expect("few")))
        .collect();
    assert_eq!(levels, want);
    assert_eq!(records[0].passages as usize, passages);
    // The frontmatter is no passage's.
    let mut covered = text.find("# Operations").unwrap_or(0);
    for passage in &records[1..] {
        let span = passage.span.expect("a passage has a span");
        let (start, end) = (span.start as usize, span.end as usize);
        let gap = text.get(covered.min(start)..start).expect("in the text");
        assert!(gap.trim().is_empty(), "no words between passages: {gap:?}");
        assert_eq!(passage.source_hash, records[0].source_hash, "a passage shares its file's source");
        covered = covered.max(end);
    }
}

/// The guide's hit in a `find` for [`QUESTION`]: its rank among resources
/// and its `lines`. Searches here match keywords: the tests' hashed
/// embedder ranks by little, and what is under test is the passages, not
/// the embedder.
async fn guide_hit(app: &Arc<App>) -> (usize, Value) {
    let (status, found) = find(app, &json!({"query": QUESTION, "limit": 5, "search_type": "keywords"})).await;
    assert_eq!(status, 200, "{found}");
    let resources = found["result"]["resources"].as_array().expect("resources");
    let rank = resources.iter().position(|r| r["uri"] == GUIDE_URI).unwrap_or_else(|| panic!("{found}"));
    let uris: Vec<&str> = resources.iter().filter_map(|r| r["uri"].as_str()).collect();
    assert_eq!(uris.iter().filter(|u| **u == GUIDE_URI).count(), 1, "a file is one hit: {uris:?}");
    assert_eq!(resources[rank]["level"], 2);
    (rank, resources[rank]["lines"].clone())
}

#[tokio::test]
async fn a_question_answered_deep_in_a_long_document_gets_that_paragraph() {
    let text = guide(20, Some(16));
    assert!(text.len() > 15_000, "a long document: {} bytes", text.len());
    let (store, _dir) = local_store();
    let files: Vec<(&str, &str)> = DEFAULT_CORPUS.iter().copied().chain([(GUIDE, text.as_str())]).collect();
    let (app, _source) = app_with_corpus_in(&files, &[], store.clone()).await;
    let passages = records_of(&store, GUIDE_URI).await.len() - 1;
    assert!(passages >= 20, "{passages} passages");
    assert_passages(&store, &text, passages).await;

    // `find` ranks the guide first, by the passage that holds the answer.
    let (rank, lines) = guide_hit(&app).await;
    assert_eq!(rank, 0);
    let line = answer_line(&text);
    let (first, last) = (lines[0].as_u64().expect("first"), lines[1].as_u64().expect("last"));
    assert!(first <= u64::from(line) && u64::from(line) <= last, "line {line} in {lines}");

    // The block shows that passage whole, with its lines, not the guide's
    // head; the lines read back hold the answer.
    let (status, block) =
        search(&app, &json!({"query": QUESTION, "mode": "context", "max_tokens": 800, "search_type": "keywords"}))
            .await;
    assert_eq!(status, 200, "{block}");
    let rendered = block["result"]["rendered"].as_str().expect("rendered");
    assert!(rendered.contains(ANSWER), "{rendered}");
    assert!(rendered.contains(&format!("uri=\"{GUIDE_URI}\" lines=\"{first}-{last}\"")), "{rendered}");
    let entries = block["result"]["entries"].as_array().expect("entries");
    let entry = entries.iter().find(|e| e["lines"] == lines).unwrap_or_else(|| panic!("{block}"));
    assert_eq!((entry["uri"].as_str(), entry["detail"].as_str()), (Some(GUIDE_URI), Some("full")));
    assert!(!entries.iter().any(|e| e["uri"] == GUIDE_URI && e.get("lines").is_none()), "the passage speaks for it");
    // One GET per object, however many of its passages are read.
    let topics = json!({"query": "kettle lantern harbor meadow procedure", "mode": "context", "max_tokens": 2000, "search_type": "keywords"});
    let (status, several) = search(&app, &topics).await;
    assert_eq!(status, 200, "{several}");
    let entries = several["result"]["entries"].as_array().expect("entries");
    let read: std::collections::BTreeSet<&str> = entries
        .iter()
        .filter(|e| matches!(e["detail"].as_str(), Some("full" | "overview")))
        .filter_map(|e| e["uri"].as_str())
        .collect();
    let guide_reads = entries.iter().filter(|e| e["uri"] == GUIDE_URI && e["detail"] == "full").count();
    assert!(guide_reads >= 2, "several passages of the guide at full: {several}");
    assert_eq!(several["result"]["stats"]["reads"].as_u64(), Some(read.len() as u64), "{several}");
    let read = format!("/api/v1/content/read?uri={GUIDE_URI}&offset={}&limit={}", first - 1, last - first + 1);
    let reply = call(&app, Handler::Content, "GET", &read, &[], None).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(reply.json["result"].as_str().expect("text").contains(ANSWER), "{}", reply.text);

    // A level filter of files keeps the file's passages.
    let (status, found) =
        find(&app, &json!({"query": QUESTION, "limit": 5, "level": 2, "search_type": "keywords"})).await;
    assert_eq!(status, 200, "{found}");
    assert_eq!(found["result"]["resources"][0]["lines"], lines, "{found}");
}

#[tokio::test]
async fn a_long_file_through_the_indexer_gets_passages_and_loses_them_as_it_shrinks() {
    let (store, _dir) = local_store();
    let (_, _source) = app_with_corpus_in(DEFAULT_CORPUS, &[], store.clone()).await;
    let app = app_over_store(store.clone());
    let mut at = 1_000;
    let mut write = |text: String| {
        let (store, app) = (store.clone(), Arc::clone(&app));
        at += 1_000;
        async move {
            store.put(&tree_key(GUIDE), Bytes::from(text), PutMode::Overwrite).await.expect("put");
            apply(&app, &[Change { key: tree_key(GUIDE), at, version: None }]).await.expect("apply")
        }
    };
    let long = guide(20, Some(16));
    write(long.clone()).await;
    let passages = records_of(&store, GUIDE_URI).await.len() - 1;
    assert!(passages >= 20, "{passages} passages");
    assert_passages(&store, &long, passages).await;
    let (_, lines) = guide_hit(&app).await;
    assert!(lines.is_array(), "found by a passage: {lines}");

    // A third as long: the passages past the new count are gone.
    let short = guide(7, Some(5));
    write(short.clone()).await;
    let fewer = records_of(&store, GUIDE_URI).await.len() - 1;
    assert!(fewer > 0 && fewer < passages, "{fewer} of {passages}");
    assert_passages(&store, &short, fewer).await;

    // Short enough to have none, then gone: nothing of it is left.
    write("# Operations guide\n\nShort now.\n".into()).await;
    assert_passages(&store, "", 0).await;
    store.delete(&tree_key(GUIDE)).await.expect("delete");
    apply(&app, &[Change { key: tree_key(GUIDE), at: 99_000, version: None }]).await.expect("apply");
    assert!(records_of(&store, GUIDE_URI).await.is_empty());
}

#[tokio::test]
async fn ingest_drops_the_passages_a_shorter_file_no_longer_has() {
    let (store, _dir) = local_store();
    let long = guide(20, Some(16));
    let files: Vec<(&str, &str)> = vec![(GUIDE, long.as_str())];
    let (app, source) = app_with_corpus_in(&files, &[], store.clone()).await;
    let passages = records_of(&store, GUIDE_URI).await.len() - 1;
    assert!(passages >= 20, "{passages} passages");

    let short = guide(7, Some(5));
    write_tree(source.path(), &[(GUIDE, short.as_str())]);
    ingest_tree(&app, source.path()).await;
    let fewer = records_of(&store, GUIDE_URI).await.len() - 1;
    assert!(fewer > 0 && fewer < passages, "{fewer} of {passages}");
    assert_passages(&store, &short, fewer).await;
}
