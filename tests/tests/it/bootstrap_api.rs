//! `POST /api/v1/search/bootstrap` (and `/search` with `mode="bootstrap"`)
//! end to end through the Lambda edge: the
//! session-start block assembled from the slot manifest — `instructions`,
//! `identity`, `listing`, `working_state`, `continuity`, in that order —
//! within `max_tokens`, with no model and no semantic search.
//!
//! The corpus is built relative to today: events dated one to three days
//! ago fall inside the default 7-day window, older ones do not; every other
//! file gets a known modification time (the index's `updated_at`), so the
//! listing's order is known.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use skald::app::App;
use skald::assemble::bootstrap::INSTRUCTIONS;
use skald::embed::hashed::HashedEmbedder;
use skald::embed::{EmbedError, Embedder};
use skald::store::{PutMode, SharedStore};
use skald::tokens::estimate_tokens;
use skald_tests::fixture::{
    BOOTSTRAP_PATH, EMBED_DIMENSION, Handler, TempDir, app_with_corpus_in, bootstrap, call, call_handler, local_store,
    ok, refused_at, request_to, search_reply, session_key,
};

const DAY: i64 = 86_400;
const SLOTS: [&str; 5] = ["instructions", "identity", "listing", "working_state", "continuity"];
const INSTRUCTIONS_URI: &str = "viking://skald/instructions";
const PROFILE_URI: &str = "viking://user/default/memories/profile.md";
const PROFILE_BODY: &str = "# Profile\nDefault user is a platform engineer who runs kubernetes upgrades.\n\nPrefers short answers with commands.";

fn now() -> i64 {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970").as_secs();
    i64::try_from(secs).expect("a sane clock")
}

/// The civil date (year, month, day) of `days` since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// The path of an event `days_ago` days before today, named `name`.
fn event_path(days_ago: i64, name: &str) -> String {
    let (y, m, d) = civil_from_days(now().div_euclid(DAY) - days_ago);
    format!("user/default/memories/events/{y:04}/{m:02}/{d:02}/{name}.md")
}

/// Midnight UTC of the day `days_ago` days before today.
fn midnight(days_ago: i64) -> i64 {
    (now().div_euclid(DAY) - days_ago) * DAY
}

fn uri(path: &str) -> String {
    format!("viking://{path}")
}

/// The bootstrap corpus and what it should produce.
struct Corpus {
    files: Vec<(String, String)>,
    mtimes: Vec<(String, i64)>,
    /// Events inside the default window, newest first.
    recent_events: Vec<String>,
    /// The event 20 days old (inside a 30-day window).
    month_event: String,
    /// Listing candidates with their `updated_at`, for the default window.
    listed: Vec<(String, i64)>,
}

fn corpus(profile: &str) -> Corpus {
    let t = now();
    let mut files: Vec<(String, String)> = Vec::new();
    let mut mtimes: Vec<(String, i64)> = Vec::new();
    let mut listed: Vec<(String, i64)> = Vec::new();
    files.push(("user/default/memories/profile.md".into(), profile.to_owned()));
    mtimes.push(("user/default/memories/profile.md".into(), t - 60));
    // Events: three recent, one from 20 days ago, one from 400 days ago.
    let events = [(1, "standup"), (2, "deploy"), (3, "review"), (20, "retro"), (400, "kickoff")];
    let mut recent_events = Vec::new();
    let mut month_event = String::new();
    for (days, name) in events {
        let path = event_path(days, name);
        files.push((
            path.clone(),
            format!("# Summary\nThe {name} event of the platform team.\n\n# Notes\nWe talked about the {name}.\n"),
        ));
        // Modified before their own date: `updated_at` is the date.
        mtimes.push((path.clone(), midnight(days) - 1000));
        match days {
            1..=3 => recent_events.push(uri(&path)),
            20 => {
                month_event = uri(&path);
                listed.push((uri(&path), midnight(days)));
            }
            _ => listed.push((uri(&path), midnight(days))),
        }
    }
    let others = [
        ("user/default/memories/entities/people/dana.md", "Dana owns the upgrade runbook.\n", 2 * 3600),
        ("user/default/memories/preferences/default/editor.md", "# Summary\nPrefers Neovim.\n", 5 * 3600),
        ("user/default/memories/experiences/snapshots.md", "# Summary\nAlways snapshot etcd first.\n", 30 * 3600),
        ("resources/guides/setup.md", "# Setup\n\nInstall the CLI and log in.\n", 100 * DAY),
        ("agent/skills/kubectl/SKILL.md", "---\nname: kubectl\n---\n# kubectl\n\nRun kubectl commands.\n", 3600),
        ("user/default/skills/drain/SKILL.md", "# Drain\n\nDrain a node safely.\n", 50 * 3600),
    ];
    for (path, text, age) in others {
        files.push((path.into(), text.into()));
        mtimes.push((path.into(), t - age));
        listed.push((uri(path), t - age));
    }
    // Another user's memories never show.
    files.push(("user/bob/memories/entities/secret.md".into(), "Bob's secret plan.\n".into()));
    files.push((event_path(1, "bob-event").replace("user/default", "user/bob"), "# Summary\nBob's event.\n".into()));
    listed.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    Corpus { files, mtimes, recent_events, month_event, listed }
}

struct Fixture {
    app: Arc<App>,
    corpus: Corpus,
    _store: TempDir,
    _source: TempDir,
}

async fn fixture_with_profile(profile: &str) -> Fixture {
    let corpus = corpus(profile);
    let (store, store_dir) = local_store();
    let files: Vec<(&str, &str)> = corpus.files.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
    let mtimes: Vec<(&str, i64)> = corpus.mtimes.iter().map(|(p, t)| (p.as_str(), *t)).collect();
    let (app, source) = app_with_corpus_in(&files, &mtimes, store).await;
    Fixture { app, corpus, _store: store_dir, _source: source }
}

async fn fixture() -> Fixture {
    fixture_with_profile(&format!("---\nname: Default\nrole: engineer\n---\n{PROFILE_BODY}\n")).await
}

fn entries(result: &Value) -> &Vec<Value> {
    result["entries"].as_array().unwrap_or_else(|| panic!("entries is not a list: {result}"))
}

fn uris(entries: &[Value]) -> Vec<String> {
    entries.iter().map(|e| e["uri"].as_str().expect("uri").to_owned()).collect()
}

/// The entries of each slot, split by `stats.slots` counts (in slot
/// order), after checking that `stats.slots` names the five slots in order.
fn by_slot(result: &Value) -> Vec<(String, Vec<Value>)> {
    let slots = result["stats"]["slots"].as_object().unwrap_or_else(|| panic!("no stats.slots: {}", result["stats"]));
    let names: Vec<&str> = slots.keys().map(String::as_str).collect();
    assert_eq!(names, SLOTS, "stats.slots in render order");
    let mut rest = entries(result).as_slice();
    let mut out = Vec::new();
    for (name, slot) in slots {
        let n = usize::try_from(slot["entries"].as_u64().expect("entries count")).expect("a count");
        assert!(slot["tokens"].is_u64(), "{slot}");
        assert!(n <= rest.len(), "stats.slots counts more entries than there are: {result:#}");
        out.push((name.clone(), rest[..n].to_vec()));
        rest = &rest[n..];
    }
    assert!(rest.is_empty(), "entries outside every slot: {rest:?}");
    out
}

fn slot<'a>(slots: &'a [(String, Vec<Value>)], name: &str) -> &'a [Value] {
    &slots.iter().find(|(n, _)| n == name).expect("a slot").1
}

fn used_within(result: &Value, max_tokens: u64) {
    let stats = &result["stats"];
    assert_eq!(stats["max_tokens"], max_tokens);
    let used = stats["used_tokens"].as_u64().expect("used_tokens");
    assert!(used <= max_tokens, "used {used} > max {max_tokens}");
    let rendered = result["rendered"].as_str().expect("rendered");
    assert_eq!(used, estimate_tokens(rendered) as u64, "used_tokens is the estimate of rendered");
    assert_eq!(stats["returned"], entries(result).len());
    for e in entries(result) {
        assert!(rendered.contains(&format!("uri=\"{}\"", e["uri"].as_str().expect("uri"))), "{e} not rendered");
    }
}

#[tokio::test]
async fn the_slots_come_in_order_with_identity_listing_and_working_state() {
    let f = fixture().await;
    let reply = bootstrap(&f.app, &json!({"max_tokens": 8000})).await;
    let result = ok(&reply);
    assert_eq!(result["stats"]["mode"], "bootstrap");
    assert_eq!(result["digest"], "");
    used_within(result, 8000);
    let slots = by_slot(result);

    // instructions: the static template.
    let instructions = slot(&slots, "instructions");
    assert_eq!(uris(instructions), [INSTRUCTIONS_URI]);
    assert_eq!(instructions[0]["text"], INSTRUCTIONS);

    // identity: the profile's body without its frontmatter.
    let identity = slot(&slots, "identity");
    assert_eq!(uris(identity), [PROFILE_URI]);
    assert_eq!(identity[0]["text"], PROFILE_BODY);
    assert_eq!(identity[0]["detail"], "full");

    // working_state: the events of the last 7 days, newest first.
    assert_eq!(uris(slot(&slots, "working_state")), f.corpus.recent_events);

    // listing: everything else of the caller's, newest updated first; never the profile or the working state.
    let listing = uris(slot(&slots, "listing"));
    let expected: Vec<String> = f.corpus.listed.iter().map(|(u, _)| u.clone()).collect();
    assert_eq!(listing, expected, "listing, newest updated first");
    assert!(!listing.contains(&PROFILE_URI.to_owned()));
    for e in slot(&slots, "listing") {
        assert_eq!(e["detail"], "abstract", "{e}");
    }

    // continuity: nothing without a session.
    assert!(slot(&slots, "continuity").is_empty());
    // Nobody else's memories, anywhere.
    assert!(!reply.text.contains("user/bob"), "{}", reply.text);
    assert!(!reply.text.contains("secret"), "{}", reply.text);
}

#[tokio::test]
async fn an_explicit_since_widens_the_working_state_window() {
    let f = fixture().await;
    for since in ["30d", "4w"] {
        let reply = bootstrap(&f.app, &json!({"max_tokens": 8000, "since": since})).await;
        let slots = by_slot(ok(&reply));
        let mut expected = f.corpus.recent_events.clone();
        expected.push(f.corpus.month_event.clone());
        assert_eq!(uris(slot(&slots, "working_state")), expected, "since {since}");
        assert!(!uris(slot(&slots, "listing")).contains(&f.corpus.month_event), "in the working state, not listed");
    }
    // A narrow window, from yesterday's date on: only yesterday's.
    let (y, m, d) = civil_from_days(now().div_euclid(DAY) - 1);
    let yesterday = format!("{y:04}-{m:02}-{d:02}");
    let reply = bootstrap(&f.app, &json!({"max_tokens": 8000, "since": yesterday})).await;
    let slots = by_slot(ok(&reply));
    assert_eq!(uris(slot(&slots, "working_state")), f.corpus.recent_events[..1]);
    assert!(uris(slot(&slots, "listing")).contains(&f.corpus.recent_events[1]), "outside the window: listed");
}

#[tokio::test]
async fn a_large_profile_is_cut_at_the_head_and_keeps_its_uri() {
    let lines: Vec<String> = (0..80)
        .map(|i| format!("Line {i:02}: the user keeps detailed notes about cluster number {i} and its upgrades."))
        .collect();
    let body = lines.join("\n");
    let f = fixture_with_profile(&format!("---\nname: Big\n---\n{body}\n")).await;
    for max_tokens in [600, 1600] {
        let reply = bootstrap(&f.app, &json!({"max_tokens": max_tokens})).await;
        let result = ok(&reply);
        used_within(result, max_tokens);
        let slots = by_slot(result);
        let identity = slot(&slots, "identity");
        assert_eq!(uris(identity), [PROFILE_URI], "the profile keeps its URI");
        let text = identity[0]["text"].as_str().expect("text");
        assert!(text.starts_with(&lines[0]), "cut at the head: {text:?}");
        assert_eq!(identity[0]["truncated"], true, "the cut is marked");
        let kept = text;
        assert!(body.starts_with(kept), "the cut keeps the head of the body: {text:?}");
        assert!(kept.len() < body.len() / 2, "cut to its share at max_tokens {max_tokens}: {} bytes", kept.len());
        assert!(!text.contains("name: Big"), "no frontmatter");
    }
}

#[tokio::test]
async fn the_block_is_byte_identical_while_nothing_changes() {
    let f = fixture().await;
    for body in [json!({}), json!({"max_tokens": 300}), json!({"max_tokens": 8000, "since": "30d"})] {
        let first = bootstrap(&f.app, &body).await;
        let second = bootstrap(&f.app, &body).await;
        assert_eq!(first.status, 200, "{}", first.text);
        assert_eq!(first.text, second.text, "{body}");
        // The query is accepted and unused: no semantic search.
        let mut with_query = body.clone();
        with_query["query"] = json!("kubernetes upgrade plans");
        let third = bootstrap(&f.app, &with_query).await;
        assert_eq!(first.text, third.text, "{body} with a query");
    }
}

/// SHA-256 of `data` as lowercase hex (FIPS 180-4), independent of the
/// library's.
fn sha256_hex(data: &[u8]) -> String {
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
        0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
        0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
        0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
        0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
        0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
        0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
    ];
    let mut h: [u32; 8] =
        [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];
    let mut message = data.to_vec();
    let bits = (data.len() as u64).wrapping_mul(8);
    message.push(0x80);
    while message.len() % 64 != 56 {
        message.push(0);
    }
    message.extend_from_slice(&bits.to_be_bytes());
    for block in message.chunks(64) {
        let mut w = [0u32; 64];
        for (i, word) in block.chunks(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16].wrapping_add(s0).wrapping_add(w[i - 7]).wrapping_add(s1);
        }
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut hh] = h;
        for i in 0..64 {
            let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
            let ch = (e & f) ^ (!e & g);
            let t1 = hh.wrapping_add(s1).wrapping_add(ch).wrapping_add(K[i]).wrapping_add(w[i]);
            let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
            let maj = (a & b) ^ (a & c) ^ (b & c);
            let t2 = s0.wrapping_add(maj);
            hh = g;
            g = f;
            f = e;
            e = d.wrapping_add(t1);
            d = c;
            c = b;
            b = a;
            a = t1.wrapping_add(t2);
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e, f, g, hh]) {
            *x = x.wrapping_add(y);
        }
    }
    h.iter().map(|x| format!("{x:08x}")).collect()
}

#[test]
fn the_test_sha256_is_sha256() {
    assert_eq!(sha256_hex(b""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    let long = "a".repeat(1000);
    assert_eq!(&sha256_hex(long.as_bytes())[..32], skald::store::content_etag(long.as_bytes()));
}

#[tokio::test]
async fn the_instructions_are_versioned_with_their_content_hash() {
    let f = fixture().await;
    let reply = bootstrap(&f.app, &json!({})).await;
    let instructions = &ok(&reply)["stats"]["instructions"];
    assert_eq!(instructions["version"], skald::assemble::bootstrap::INSTRUCTIONS_VERSION);
    let hash = instructions["content_hash"].as_str().expect("content_hash");
    assert_eq!(hash.len(), 64);
    assert!(hash.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)), "{hash}");
    assert_eq!(hash, sha256_hex(INSTRUCTIONS.as_bytes()));
    // Even when the budget leaves no room for the instructions themselves.
    let reply = bootstrap(&f.app, &json!({"max_tokens": 64})).await;
    assert_eq!(ok(&reply)["stats"]["instructions"]["content_hash"], hash);
}

/// The routes the instructions name (`METHOD /path`, `…` and query cut)
/// are documented operations of `infra/openapi.json`, and the tools they
/// name are tools of `/mcp`.
#[test]
fn the_instructions_name_only_routes_that_exist() {
    let doc: Value = serde_json::from_str(include_str!("../../../infra/openapi.json")).expect("the OpenAPI document");
    let words: Vec<&str> = INSTRUCTIONS.split_whitespace().collect();
    let mut named = 0;
    for pair in words.windows(2) {
        let [method, path] = pair else { continue };
        if !["GET", "POST"].contains(method) || !path.starts_with("/api/") {
            continue;
        }
        let path = path.split('?').next().unwrap_or_default().trim_end_matches([';', ',', '.']);
        let operation = doc["paths"][path][method.to_lowercase()].as_object();
        assert!(
            operation.is_some(),
            "the instructions name {method} {path}, which infra/openapi.json does not document"
        );
        named += 1;
    }
    assert!(named >= 4, "the instructions name {named} routes");
    // And every "the X tool" is a tool `/mcp` lists.
    let tools: Vec<String> = skald_mcp::tools::list().iter().map(|t| t.name.to_string()).collect();
    let mut tools_named = 0;
    for triple in words.windows(3) {
        if let [the, name, tool] = triple
            && *the == "the"
            && tool.trim_end_matches([';', ',', '.']) == "tool"
        {
            assert!(tools.iter().any(|t| t == name), "the instructions name the {name} tool; /mcp lists {tools:?}");
            tools_named += 1;
        }
    }
    assert!(tools_named >= 3, "the instructions name {tools_named} tools");
}

#[tokio::test]
async fn used_tokens_never_exceed_max_tokens() {
    let f = fixture().await;
    let reply = bootstrap(&f.app, &json!({})).await;
    used_within(ok(&reply), 1600);
    let mut returned = Vec::new();
    for max_tokens in [64, 100, 300, 700, 1600, 3000, 8000, 32_000] {
        for since in [None, Some("3650d")] {
            let mut body = json!({"max_tokens": max_tokens});
            if let Some(s) = since {
                body["since"] = json!(s);
            }
            let reply = bootstrap(&f.app, &body).await;
            let result = ok(&reply);
            used_within(result, max_tokens);
            by_slot(result);
            if since.is_none() {
                returned.push(entries(result).len());
            }
        }
    }
    assert!(returned[returned.len() - 1] > returned[0], "a big budget shows more than a tiny one: {returned:?}");
}

#[tokio::test]
async fn continuity_carries_the_sessions_latest_archive_overview() {
    let f = fixture().await;
    let store: &SharedStore = &f.app.store;
    let put = |key: String, text: &'static str| async move {
        store.put(&key, text.into(), PutMode::Overwrite).await.expect("write into the store");
    };
    put(session_key("default", "cont-1", "history/archive_000/.overview.md"), "# Old\n\nThe first archive.").await;
    put(
        session_key("default", "cont-1", "history/archive_001/.overview.md"),
        "---\nkind: wm\n---\n# Session Summary\n\nWe were upgrading the prod cluster; next: drain node 3.\n",
    )
    .await;
    put(session_key("default", "cont-1", "history/archive_001/.abstract.md"), "Upgrading the prod cluster.").await;

    let reply = bootstrap(&f.app, &json!({"session_id": "cont-1", "max_tokens": 8000})).await;
    let result = ok(&reply);
    used_within(result, 8000);
    let slots = by_slot(result);
    let continuity = slot(&slots, "continuity");
    assert_eq!(uris(continuity), ["viking://user/default/sessions/cont-1/history/archive_001"], "{result:#}");
    assert_eq!(
        continuity[0]["text"], "# Session Summary\n\nWe were upgrading the prod cluster; next: drain node 3.",
        "the newest archive's overview, without frontmatter"
    );
    // The slot is last, and the earlier slots are as without a session.
    let without = bootstrap(&f.app, &json!({"max_tokens": 8000})).await;
    let without_slots = by_slot(ok(&without));
    for name in &SLOTS[..4] {
        assert_eq!(uris(slot(&slots, name)), uris(slot(&without_slots, name)), "{name}");
    }

    // A session without archives, or one of another user: no continuity.
    let reply = bootstrap(&f.app, &json!({"session_id": "cont-2", "max_tokens": 8000})).await;
    assert!(slot(&by_slot(ok(&reply)), "continuity").is_empty());
    let bob = call(
        &f.app,
        Handler::Bootstrap,
        "POST",
        BOOTSTRAP_PATH,
        &[("x-openviking-user", "bob")],
        Some(&json!({"session_id": "cont-1", "max_tokens": 8000})),
    )
    .await;
    assert!(slot(&by_slot(ok(&bob)), "continuity").is_empty(), "{}", bob.text);
    assert!(!bob.text.contains("drain node 3"), "{}", bob.text);
}

/// An embedder that counts its calls and always fails, with the id and
/// dimension of the fixture's, so the index accepts it.
#[derive(Debug)]
struct RefusingEmbedder {
    id: String,
    calls: AtomicUsize,
}

impl Embedder for RefusingEmbedder {
    fn id(&self) -> &str {
        &self.id
    }

    fn dimension(&self) -> usize {
        EMBED_DIMENSION
    }

    fn embed<'life0, 'life1, 'life2, 'async_trait>(
        &'life0 self,
        texts: &'life1 [&'life2 str],
    ) -> Pin<Box<dyn Future<Output = Result<Vec<Vec<f32>>, EmbedError>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        'life2: 'async_trait,
        Self: 'async_trait,
    {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let n = texts.len();
        let provider = self.id.clone();
        Box::pin(async move {
            Err(EmbedError::Provider { provider, message: format!("bootstrap must not embed ({n} texts)") })
        })
    }
}

#[tokio::test]
async fn bootstrap_never_embeds() {
    let f = fixture().await;
    let refusing = Arc::new(RefusingEmbedder {
        id: HashedEmbedder::new(EMBED_DIMENSION).id().to_owned(),
        calls: AtomicUsize::new(0),
    });
    let embedder: Arc<dyn Embedder> = Arc::clone(&refusing) as Arc<dyn Embedder>;
    let app = Arc::new(skald_tests::fixture::with_embedder(&f.app, embedder));

    let reply = bootstrap(&app, &json!({"query": "kubernetes upgrade", "since": "30d"})).await;
    let result = ok(&reply);
    assert!(!entries(result).is_empty());
    let reply = search_reply(&app, &json!({"mode": "bootstrap", "query": "kubernetes upgrade"})).await;
    ok(&reply);
    assert_eq!(refusing.calls.load(Ordering::SeqCst), 0, "bootstrap called the embedder");
    // The embedder is live: context mode does embed, and fails with it.
    let reply = search_reply(&app, &json!({"mode": "context", "query": "kubernetes upgrade"})).await;
    assert_eq!(reply.status, 503, "{}", reply.text);
    assert!(refusing.calls.load(Ordering::SeqCst) > 0);
    // And the answer is the same as with a working embedder.
    let with_hashed = bootstrap(&f.app, &json!({"query": "kubernetes upgrade", "since": "30d"})).await;
    let refused = bootstrap(&app, &json!({"query": "kubernetes upgrade", "since": "30d"})).await;
    assert_eq!(with_hashed.text, refused.text);
}

#[tokio::test]
async fn bootstrap_refuses_every_field_but_its_own() {
    let f = fixture().await;
    let foreign = [
        ("quotas", json!({"events": 1})),
        ("limit", json!(5)),
        ("purpose", json!("coding")),
        ("detail", json!("full")),
        ("dedup_turns", json!(2)),
        ("score_threshold", json!(0.2)),
        ("exclude_uris", json!(["viking://resources"])),
        ("target_uri", json!("viking://resources")),
        ("until", json!("1d")),
        ("filter", json!({"op": "must", "field": "x", "conds": ["y"]})),
        ("peer_scope", json!("all")),
        ("rewrite", json!(true)),
        ("bogus", json!(1)),
    ];
    for (field, value) in &foreign {
        let reply = bootstrap(&f.app, &json!({ *field: value.clone() })).await;
        refused_at(&reply, &json!(["body", field]));
        let reply = search_reply(&f.app, &json!({"mode": "bootstrap", *field: value.clone()})).await;
        refused_at(&reply, &json!(["body", field]));
    }
    let reply = bootstrap(&f.app, &json!({"mode": "bootstrap"})).await;
    refused_at(&reply, &json!(["body", "mode"]));
    let reply = bootstrap(&f.app, &json!({"mode": "context", "query": "x"})).await;
    refused_at(&reply, &json!(["body", "mode"]));
    for (field, value) in [
        ("max_tokens", json!(10)),
        ("max_tokens", json!(32_001)),
        ("max_tokens", json!("big")),
        ("since", json!("last tuesday")),
        ("session_id", json!("a b")),
        ("session_id", json!("..")),
    ] {
        let reply = bootstrap(&f.app, &json!({ field: value.clone() })).await;
        refused_at(&reply, &json!(["body", field]));
    }
    let reply = call(&f.app, Handler::Bootstrap, "POST", BOOTSTRAP_PATH, &[], None).await;
    assert_eq!(reply.status, 200, "an empty body is all defaults: {}", reply.text);
    let reply =
        bootstrap(&f.app, &json!({"telemetry": true, "max_tokens": 500, "session_id": "s", "since": "2d"})).await;
    ok(&reply);
    assert_eq!(reply.json["telemetry"]["summary"]["operation"], "search.bootstrap", "{}", reply.text);
    let reply = call(&f.app, Handler::Bootstrap, "GET", BOOTSTRAP_PATH, &[], None).await;
    assert_eq!(reply.status, 405, "{}", reply.text);
    // Not an object, and not JSON: 400s shaped as on every other route.
    let reply = call(&f.app, Handler::Bootstrap, "POST", BOOTSTRAP_PATH, &[], Some(&json!([1]))).await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    assert_eq!(
        reply.json["error"]["details"]["validation_errors"][0]["type"], "model_attributes_type",
        "{}",
        reply.text
    );
    let event = request_to(BOOTSTRAP_PATH, "POST", &[], lambda_http::Body::Text("{not json".into()));
    let reply = call_handler(&f.app, Handler::Bootstrap, event).await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    assert_eq!(reply.json["error"]["details"]["validation_errors"][0]["type"], "json_invalid", "{}", reply.text);
}

#[tokio::test]
async fn bootstrap_answers_exactly_what_search_mode_bootstrap_answers() {
    let f = fixture().await;
    let store: &SharedStore = &f.app.store;
    store
        .put(
            &session_key("default", "pin-b", "history/archive_003/.overview.md"),
            "# Where we stopped\n\nHalfway through the upgrade.".into(),
            PutMode::Overwrite,
        )
        .await
        .expect("write");
    for body in [
        json!({}),
        json!({"max_tokens": 64}),
        json!({"max_tokens": 500, "since": "2020-01-01"}),
        json!({"max_tokens": 2400, "session_id": "pin-b", "since": "2020-01-01", "query": "where were we"}),
        json!({"max_tokens": 8000, "session_id": "pin-b"}),
    ] {
        let preset = bootstrap(&f.app, &body).await;
        let mut searched = body.clone();
        searched["mode"] = json!("bootstrap");
        let search = search_reply(&f.app, &searched).await;
        let a = serde_json::to_string(ok(&preset)).expect("serialise");
        let b = serde_json::to_string(ok(&search)).expect("serialise");
        assert!(!entries(ok(&preset)).is_empty() || body["max_tokens"] == 64, "{body}");
        assert_eq!(a, b, "{body}");
    }
}
