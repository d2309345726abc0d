//! The conversational evaluation: say, remember, recall, end to end.
//!
//! ```text
//! scripts/setup-model.sh        # once (the USE-m3 model), unless --hashed
//! cargo run --release -p skald-bench --bin bench_conversations -- [--only NAME] [--hashed] [--show-misses N]
//! cargo run --release -p skald-bench --bin bench_conversations -- --model-stub   # extraction's cost
//! ```
//!
//! Each conversation of `tests/eval/conversations/*.json` (checked by
//! `tests/eval/check.py`) goes into a fresh local store as the plugins send
//! it: each session's messages through `POST …/messages/batch` (100 at a
//! time, with the client's `created_at`), then `POST …/commit`, whose task
//! must say it completed. Then every question is asked, as the user would
//! in a later session:
//!
//! - `search` in context mode at 400 and 1600 tokens: the evidence
//!   messages' text is in the block (`rendered`);
//! - `find` at limit 10: the evidence messages' text is in the hits' files.
//!
//! Each is scored three ways: every part the answer needs there, one
//! message of each (`needs`: "answer", the headline); every evidence
//! message there, restatements included ("all"); and at least one
//! ("any"). Beside it, a plain baseline over the same turn
//! windows (the episodes the commits wrote, rebuilt with
//! `skald::memory::episodes`): BM25 (k1 1.2, b 0.75, Skald's keyword
//! terms, so CJK-aware) ranks the windows, its top 10 are its `find`, and
//! its best windows packed whole, best first, until the budget is spent
//! are its block. Nothing here is tuned on these questions: they measure.
//!
//! Questions of kind `unanswerable` (no evidence: nothing said answers
//! them) are scored apart: whether their 1600-token block holds at most
//! one entry. `--gap` and `--floor` set the relevance bars
//! (`retrieval.relevance_gap`, `retrieval.relevance_floor`). With
//! `SKALD_SHOW_BLOCKS=1`, `--show-misses` prints each missed block;
//! `SKALD_DUMP_SCORES=FILE` appends every question's top 40 hits (score,
//! evidence held) as JSON lines, the data the bars are calibrated on.
//! `--fused` embeds with the `use-m3+e5` embedder (USE-m3 beside the
//! embedded multilingual-e5-small).
// A benchmark reports on stdout by design.
#![allow(clippy::print_stdout)]

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Value, json};
use skald::app::App;
use skald::memory::episodes::episodes;
use skald::sessions::{SessionId, StoredMessage};
use skald_bench::eval::{Bm25, normal, unescape};
use skald_bench::{Flags, TempStore, block_on, embedder, event, fail, parse_body, percentile, repo, sorted};

const USAGE: &str = "usage: bench_conversations [--only NAME] [--hashed] [--show-misses N] [--episode-messages N] [--episode-tokens N] [--limit N] [--search-type semantic|keywords|hybrid] [--model-stub] [--gap X] [--floor X] [--fused] [--rerank-e5 | --rerank BASE_URL --rerank-model NAME] [--rerank-threshold X]";

#[derive(Debug, Deserialize)]
struct Conversation {
    name: String,
    language: String,
    sessions: Vec<Session>,
    questions: Vec<Question>,
}

#[derive(Debug, Deserialize)]
struct Session {
    id: String,
    messages: Vec<Message>,
}

#[derive(Debug, Deserialize, Clone)]
struct Message {
    id: String,
    role: String,
    content: String,
    created_at: String,
}

#[derive(Debug, Deserialize)]
struct Question {
    id: String,
    question: String,
    evidence: Vec<String>,
    /// The parts the answer needs, each a list of evidence messages any
    /// one of which states it (`tests/eval/check.py`); absent: every
    /// evidence message is a part of its own.
    #[serde(default)]
    needs: Vec<Vec<String>>,
    kind: String,
}

/// Hits of one way of answering, over the questions asked.
#[derive(Debug, Default, Clone, Copy)]
struct Score {
    asked: usize,
    /// Every part the answer needs is there (one message of each).
    answer: usize,
    /// Every evidence message is there, restatements included.
    all: usize,
    /// At least one evidence message is there.
    any: usize,
}

/// What one way of answering held of a question's evidence.
#[derive(Debug, Clone, Copy)]
struct Held {
    answer: bool,
    found: usize,
    wanted: usize,
}

impl Score {
    fn add(&mut self, held: Held) {
        self.asked += 1;
        self.answer += usize::from(held.answer);
        self.all += usize::from(held.found == held.wanted);
        self.any += usize::from(held.found > 0);
    }

    fn merge(&mut self, other: Score) {
        self.asked += other.asked;
        self.answer += other.answer;
        self.all += other.all;
        self.any += other.any;
    }

    fn cell(self) -> String {
        let pct = |n: usize| if self.asked == 0 { 0.0 } else { 100.0 * n as f64 / self.asked as f64 };
        format!("{:.1}% / {:.1}% ({:.1}%)", pct(self.answer), pct(self.all), pct(self.any))
    }
}

/// The ways a question is answered: Skald's three and the baseline's three.
const WAYS: [&str; 6] = ["block 400", "block 1600", "find 10", "bm25 block 400", "bm25 block 1600", "bm25 top 10"];

#[derive(Debug, Default)]
struct Results {
    by_way: BTreeMap<&'static str, Score>,
    by_kind: BTreeMap<(String, &'static str), Score>,
    commits: Vec<Duration>,
    messages: usize,
    /// With `--model-stub`: the extraction calls made and their prompts'
    /// estimated tokens.
    model_calls: usize,
    prompt_tokens: u64,
    episodes: usize,
    block_tokens: Vec<u64>,
    /// Questions nothing said answers, and how many of them got a
    /// 1600-token block of at most one entry.
    unanswerable: usize,
    quiet: usize,
}

fn main() {
    let mut flags = Flags::from_env(USAGE);
    let (mut only, mut hashed, mut show) = (None, false, 0usize);
    let mut memory = skald::config::MemoryConfig::default();
    let mut limit = None;
    let mut stub = false;
    let mut search_type: Option<String> = None;
    let mut retrieval = skald::config::RetrievalConfig::default();
    let mut fused = false;
    let mut rerank_flags = skald_bench::RerankFlags::default();
    while let Some(flag) = flags.next() {
        if rerank_flags.take(&mut flags, &flag, &mut retrieval) {
            continue;
        }
        match flag.as_str() {
            "--only" => only = Some(flags.value(&flag).unwrap_or_else(|e| fail("--only", e))),
            "--hashed" => hashed = true,
            "--fused" => fused = true,
            "--show-misses" => show = flags.at_least(&flag, 0).unwrap_or_else(|e| fail("--show-misses", e)),
            "--episode-messages" => {
                memory.episode_messages = flags.at_least(&flag, 1).unwrap_or_else(|e| fail("--episode-messages", e));
            }
            "--limit" => limit = Some(flags.at_least(&flag, 1).unwrap_or_else(|e| fail("--limit", e))),
            "--model-stub" => stub = true,
            "--gap" => retrieval.relevance_gap = skald_bench::fraction(&mut flags, &flag),
            "--floor" => retrieval.relevance_floor = Some(skald_bench::fraction(&mut flags, &flag)),
            "--search-type" => {
                let kind = flags.value(&flag).unwrap_or_else(|e| fail("--search-type", e));
                if skald::index::SearchKind::parse(&kind).is_none() {
                    fail("--search-type", format!("{kind:?} is not semantic, keywords or hybrid"));
                }
                search_type = Some(kind);
            }
            "--episode-tokens" => {
                memory.episode_tokens = flags.at_least(&flag, 1).unwrap_or_else(|e| fail("--episode-tokens", e));
            }
            other => fail("flags", flags.unknown(other)),
        }
    }
    let dir = repo().join("tests/eval/conversations");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| fail(&dir.display().to_string(), e))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .filter(|p| {
            only.as_ref().is_none_or(|o| p.file_stem().is_some_and(|s| s.to_string_lossy().contains(o.as_str())))
        })
        .collect();
    files.sort();
    if files.is_empty() {
        fail("conversations", format!("none in {}", dir.display()));
    }
    // `--fused`: USE-m3 beside the embedded multilingual-e5-small (`use-m3+e5`).
    let embedder = if fused { skald_bench::fused_embedder() } else { embedder(hashed, "--hashed") };
    println!(
        "== conversational evaluation: {} conversation(s), embedder {}, episodes of at most {} messages and {} tokens",
        files.len(),
        embedder.id(),
        memory.episode_messages,
        memory.episode_tokens
    );
    let mut total = Results::default();
    let mut rows = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| fail(&file.display().to_string(), e));
        let conversation: Conversation =
            serde_json::from_str(&text).unwrap_or_else(|e| fail(&file.display().to_string(), e));
        let started = Instant::now();
        let results = block_on(async {
            // The reranker's local server (`--rerank-e5`) lives on this runtime.
            let (rerank, _server) = rerank_flags.config().await;
            let asking = Asking { limit, search_type: search_type.clone(), show, retrieval: retrieval.clone(), rerank };
            Box::pin(evaluate(&conversation, Arc::clone(&embedder), &memory, asking, stub)).await
        });
        println!(
            "{} ({}): {} sessions, {} messages -> {} episodes, {} questions, {:.1} s",
            conversation.name,
            conversation.language,
            conversation.sessions.len(),
            results.messages,
            results.episodes,
            conversation.questions.len(),
            started.elapsed().as_secs_f64()
        );
        rows.push((conversation.name.clone(), conversation.language.clone(), results.by_way.clone()));
        for (way, score) in &results.by_way {
            total.by_way.entry(way).or_default().merge(*score);
        }
        for (key, score) in &results.by_kind {
            total.by_kind.entry(key.clone()).or_default().merge(*score);
        }
        total.commits.extend(&results.commits);
        total.messages += results.messages;
        total.model_calls += results.model_calls;
        total.prompt_tokens += results.prompt_tokens;
        total.episodes += results.episodes;
        total.block_tokens.extend(&results.block_tokens);
        total.unanswerable += results.unanswerable;
        total.quiet += results.quiet;
    }
    println!();
    println!("evidence held: every part the answer needs / every evidence message (at least one), per conversation");
    println!("| conversation | lang | {} |", WAYS.join(" | "));
    println!("|---|---|{}", "---|".repeat(WAYS.len()));
    for (name, lang, by_way) in &rows {
        let cells: Vec<String> = WAYS.iter().map(|w| by_way.get(w).copied().unwrap_or_default().cell()).collect();
        println!("| {name} | {lang} | {} |", cells.join(" | "));
    }
    let cells: Vec<String> = WAYS.iter().map(|w| total.by_way.get(w).copied().unwrap_or_default().cell()).collect();
    println!("| **all** | | {} |", cells.join(" | "));
    println!();
    println!(
        "by kind of question (answer / all (any)): Skald's block 1600 / BM25's block 1600 / Skald's find 10 / BM25's top 10"
    );
    let kinds: Vec<String> = {
        let mut k: Vec<String> = total.by_kind.keys().map(|(k, _)| k.clone()).collect();
        k.dedup();
        k
    };
    for kind in kinds {
        let get = |way: &'static str| total.by_kind.get(&(kind.clone(), way)).copied().unwrap_or_default();
        println!(
            "  {kind:<14} n={:<4} {} / {} / {} / {}",
            get("block 1600").asked,
            get("block 1600").cell(),
            get("bm25 block 1600").cell(),
            get("find 10").cell(),
            get("bm25 top 10").cell()
        );
    }
    println!(
        "  unanswerable   n={:<4} a 1600-token block of at most one entry: {:.1}% (BM25's packed windows: never, they always match a word)",
        total.unanswerable,
        100.0 * total.quiet as f64 / total.unanswerable.max(1) as f64
    );
    let commits = sorted(total.commits.iter().map(Duration::as_secs_f64));
    let tokens = sorted(total.block_tokens.iter().copied());
    println!();
    println!(
        "commit -> searchable (local store, inline indexing): p50 {:.0} ms, p95 {:.0} ms over {} commits ({:.1} s per 1,000 messages); {} messages -> {} episodes ({:.0} per 1,000 messages); 1600-token blocks used p50 {} tokens",
        percentile(&commits, 50.0) * 1000.0,
        percentile(&commits, 95.0) * 1000.0,
        commits.len(),
        if total.messages == 0 { 0.0 } else { commits.iter().sum::<f64>() * 1000.0 / total.messages as f64 },
        total.messages,
        total.episodes,
        if total.messages == 0 { 0.0 } else { 1000.0 * total.episodes as f64 / total.messages as f64 },
        percentile(&tokens, 50.0),
    );
    if stub {
        let per = |n: f64| if total.messages == 0 { 0.0 } else { n * 1000.0 / total.messages as f64 };
        println!(
            "extraction (model stand-in): {} calls, {:.1} calls and {:.0} prompt tokens (estimated) per 1,000 messages; each answer at most {} tokens",
            total.model_calls,
            per(total.model_calls as f64),
            per(total.prompt_tokens as f64),
            2000
        );
    }
}

/// How the questions are asked: `limit` and `search_type` sent with every
/// `search` (and `search_type` with every `find`), when given; the first
/// `show` misses of the 1600-token block printed.
struct Asking {
    limit: Option<usize>,
    search_type: Option<String>,
    show: usize,
    /// The relevance bars.
    retrieval: skald::config::RetrievalConfig,
    /// The reranker, if any.
    rerank: Option<skald::config::ModelConfig>,
}

/// Feeds `conversation` in and asks every question.
async fn evaluate(
    conversation: &Conversation,
    embedder: Arc<dyn skald::embed::Embedder>,
    memory: &skald::config::MemoryConfig,
    asking: Asking,
    stub: bool,
) -> Results {
    let Asking { limit, search_type, show, retrieval, rerank } = asking;
    let temp = TempStore::open(&format!("skald-bench-conversations-{}", conversation.name));
    // With --model-stub, commits extract memories through a local model
    // stand-in (one memory per user message): what extraction costs in
    // time and prompt tokens, not what a real model would extract.
    let model = if stub { Some(skald_tests::model_server::ModelServer::start().await) } else { None };
    let mut config = skald_bench::dev_config();
    config.memory = memory.clone();
    config.retrieval = retrieval;
    config.rerank = rerank;
    config.extraction = model.as_ref().map(|m| m.openai_model("stub"));
    let app = skald::app::App::with_parts(config, temp.store().clone(), embedder);
    let mut results = Results::default();
    let mut windows: Vec<String> = Vec::new();
    // Each message's episode (its path), for the score dump.
    let mut episode_of: HashMap<String, String> = HashMap::new();
    for session in &conversation.sessions {
        let id = format!("{}-{}", conversation.name, session.id);
        for chunk in session.messages.chunks(100) {
            let messages: Vec<Value> = chunk
                .iter()
                .map(|m| json!({"id": m.id, "role": m.role, "content": m.content, "created_at": m.created_at}))
                .collect();
            let (status, reply) = call(
                &app,
                "POST",
                &format!("/api/v1/sessions/{id}/messages/batch"),
                Some(&json!({"messages": messages})),
            )
            .await;
            if status != 200 || reply["result"]["truncated"] == true {
                fail("messages/batch", format!("{id}: {status} {reply}"));
            }
        }
        let started = Instant::now();
        let (status, reply) = call(&app, "POST", &format!("/api/v1/sessions/{id}/commit"), Some(&json!({}))).await;
        results.commits.push(started.elapsed());
        let task = reply["result"]["task_id"].as_str().unwrap_or_default().to_owned();
        if status != 200 || task.is_empty() {
            fail("commit", format!("{id}: {status} {reply}"));
        }
        let (_, task) = call(&app, "GET", &format!("/api/v1/tasks/{task}"), None).await;
        if task["result"]["status"] != "completed" {
            fail("task", format!("{id}: {task}"));
        }
        // The baseline's windows: the same episodes, rebuilt.
        let stored: Vec<StoredMessage> = session.messages.iter().enumerate().map(|(i, m)| stored(m, i)).collect();
        let session_id = SessionId::new(&id).unwrap_or_else(|e| fail("session id", e));
        let made = episodes(&session_id, 1, &stored, time::OffsetDateTime::UNIX_EPOCH, &memory.episode_options());
        results.episodes += made.len();
        for e in &made {
            episode_of.extend(e.message_ids.iter().map(|m| (m.clone(), e.path.clone())));
        }
        windows.extend(made.into_iter().map(|e| e.body));
        results.messages += session.messages.len();
    }
    let texts: HashMap<&str, String> =
        conversation.sessions.iter().flat_map(|s| &s.messages).map(|m| (m.id.as_str(), normal(&m.content))).collect();
    let bm25 = Bm25::new(&windows);
    let mut file_texts: HashMap<String, String> = HashMap::new();
    let mut misses = 0;
    for q in &conversation.questions {
        if q.evidence.is_empty() {
            // Nothing said answers it: the block should stay (nearly) empty.
            let mut body = json!({"query": q.question, "mode": "context", "max_tokens": 1600});
            if let Some(kind) = &search_type {
                body["search_type"] = json!(kind);
            }
            let (status, reply) = call(&app, "POST", "/api/v1/search/search", Some(&body)).await;
            if status != 200 {
                fail("search", format!("{}: {status} {reply}", q.id));
            }
            results.unanswerable += 1;
            results.quiet += usize::from(reply["result"]["entries"].as_array().is_none_or(|e| e.len() <= 1));
            continue;
        }
        let wanted: Vec<&String> = q.evidence.iter().filter_map(|e| texts.get(e.as_str())).collect();
        let needs: Vec<Vec<&str>> = if q.needs.is_empty() {
            q.evidence.iter().map(|e| vec![e.as_str()]).collect()
        } else {
            q.needs.iter().map(|part| part.iter().map(String::as_str).collect()).collect()
        };
        let held = |text: &str| Held {
            answer: needs
                .iter()
                .all(|part| part.iter().any(|id| texts.get(id).is_some_and(|t| text.contains(t.as_str())))),
            found: wanted.iter().filter(|w| text.contains(w.as_str())).count(),
            wanted: wanted.len(),
        };
        let mut score = |way: &'static str, held: Held| {
            results.by_way.entry(way).or_default().add(held);
            results.by_kind.entry((q.kind.clone(), way)).or_default().add(held);
        };
        let mut block_1600 = String::new();
        let mut raw_1600 = String::new();
        let mut block_uris: Vec<Value> = Vec::new();
        for (budget, way) in [(400, "block 400"), (1600, "block 1600")] {
            let mut body = json!({"query": q.question, "mode": "context", "max_tokens": budget});
            if let Some(limit) = limit {
                body["limit"] = json!(limit);
            }
            if let Some(kind) = &search_type {
                body["search_type"] = json!(kind);
            }
            let (status, reply) = call(&app, "POST", "/api/v1/search/search", Some(&body)).await;
            if status != 200 {
                fail("search", format!("{}: {status} {reply}", q.id));
            }
            let rendered = normal(&unescape(reply["result"]["rendered"].as_str().unwrap_or_default()));
            score(way, held(&rendered));
            if budget == 1600 {
                block_uris = reply["result"]["entries"]
                    .as_array()
                    .map(|e| e.iter().map(|e| e["uri"].clone()).collect())
                    .unwrap_or_default();
                raw_1600 = unescape(reply["result"]["rendered"].as_str().unwrap_or_default());
                results.block_tokens.push(reply["result"]["stats"]["used_tokens"].as_u64().unwrap_or(0));
                block_1600 = rendered;
            }
        }
        let mut body = json!({"query": q.question, "limit": 10});
        if let Some(kind) = &search_type {
            body["search_type"] = json!(kind);
        }
        let (status, reply) = call(&app, "POST", "/api/v1/search/find", Some(&body)).await;
        if status != 200 {
            fail("find", format!("{}: {status} {reply}", q.id));
        }
        let mut hits = String::new();
        for hit in ["memories", "resources", "skills"]
            .iter()
            .flat_map(|k| reply["result"][k].as_array().cloned().unwrap_or_default())
        {
            let Some(uri) = hit["uri"].as_str() else { continue };
            if !file_texts.contains_key(uri) {
                let text = read_uri(&temp, uri).await;
                file_texts.insert(uri.to_owned(), text);
            }
            hits.push_str(&file_texts[uri]);
            hits.push('\n');
        }
        score("find 10", held(&hits));
        if let Some(path) = std::env::var_os("SKALD_DUMP_SCORES") {
            let body =
                json!({"query": q.question, "limit": 40, "search_type": search_type.as_deref().unwrap_or("hybrid")});
            let (_, reply) = call(&app, "POST", "/api/v1/search/find", Some(&body)).await;
            let mut rows = Vec::new();
            for hit in reply["result"]["memories"].as_array().cloned().unwrap_or_default() {
                let uri = hit["uri"].as_str().unwrap_or_default().to_owned();
                let text = read_uri(&temp, &uri).await;
                rows.push(json!({"uri": uri, "score": hit["score"], "evidence": held(&text).found}));
            }
            let parts: Vec<Vec<&String>> =
                needs.iter().map(|p| p.iter().filter_map(|id| episode_of.get(*id)).collect()).collect();
            let line = json!({"conversation": conversation.name, "q": q.id, "kind": q.kind, "wanted": wanted.len(),
                "answered": held(&block_1600).answer, "block": block_uris, "needs": parts, "hits": rows});
            let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path).expect("dump file");
            std::io::Write::write_all(&mut file, format!("{line}\n").as_bytes()).expect("dump");
        }
        let ranked = bm25.rank(&q.question);
        let top: String = ranked.iter().take(10).map(|&i| normal(&windows[i])).collect::<Vec<_>>().join("\n");
        score("bm25 top 10", held(&top));
        for (budget, way) in [(400, "bm25 block 400"), (1600, "bm25 block 1600")] {
            score(way, held(&pack(&ranked, &windows, budget)));
        }
        if misses < show && !held(&block_1600).answer {
            misses += 1;
            println!("  miss {} [{}] {} -> needs {:?}", q.id, q.kind, q.question, needs);
            if std::env::var_os("SKALD_SHOW_BLOCKS").is_some() {
                println!("{raw_1600}");
            }
        }
    }
    if let Some(model) = &model {
        let prompts: Vec<String> = model.requests().iter().map(|r| r.prompt_text()).collect();
        results.model_calls = prompts.len();
        results.prompt_tokens = prompts.iter().map(|p| skald::tokens::estimate_tokens(p) as u64).sum();
    }
    results
}

/// A message as the store holds it (for rebuilding the episodes).
fn stored(m: &Message, seq: usize) -> StoredMessage {
    StoredMessage {
        id: m.id.clone(),
        role: m.role.clone(),
        content: Some(m.content.clone()),
        parts: None,
        created_at: m.created_at.clone(),
        turn_id: None,
        message_kind: None,
        peer_id: None,
        source_message_ids: None,
        seq: seq as u64,
        claim: None,
    }
}

/// The file behind `uri` in the bench account's tree, normalised.
async fn read_uri(temp: &TempStore, uri: &str) -> String {
    let Some(path) = uri.strip_prefix("viking://") else { return String::new() };
    let key = format!("accounts/{}/tree/{path}", skald_bench::account());
    match temp.store().get(&key).await {
        Ok(object) => normal(&String::from_utf8_lossy(&object.body)),
        Err(_) => String::new(),
    }
}

/// The best windows, whole and best first, while they fit `budget` tokens.
fn pack(ranked: &[usize], windows: &[String], budget: usize) -> String {
    let (mut out, mut used) = (String::new(), 0);
    for &i in ranked {
        let cost = skald::tokens::estimate_tokens(&windows[i]);
        if used + cost > budget {
            continue;
        }
        used += cost;
        out.push_str(&normal(&windows[i]));
        out.push('\n');
    }
    out
}

async fn call(app: &App, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let request = skald_lambda::to_library_request(event(method, path, body));
    let response = if path.starts_with("/api/v1/search/find") {
        Box::pin(skald::api::find::handle(app, request)).await
    } else if path.starts_with("/api/v1/search/") {
        Box::pin(skald::api::search::handle(app, request)).await
    } else {
        Box::pin(skald::api::sessions::handle(app, request)).await
    };
    (response.status().as_u16(), parse_body(response.body()))
}
