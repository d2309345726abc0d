//! The extended retrieval evaluation: which files a query finds, what its
//! context block serves, and whether it keeps quiet when nothing answers.
//!
//! ```text
//! scripts/setup-model.sh        # once (the USE-m3 model), unless --hashed
//! cargo build --release -p skald-bench --bin bench_retrieval
//! target/release/bench_retrieval [--hashed] [--only-kind K] [--show-misses N] [--fused]
//! target/release/bench_retrieval --rerank-e5 --rerank-threshold 0.84   # context mode reranked
//! SKALD_SHOW_BLOCKS=1 target/release/bench_retrieval --show-misses 3   # the missed blocks too
//! python3 tests/eval/retrieval/check.py   # the set's own checks
//! ```
//!
//! The corpus is the demo (`samplconfigs/demo`) plus the long documents of
//! `tests/eval/retrieval/docs/*.md`, ingested as
//! `viking://resources/longdocs/<name>.md`, into a fresh local store. The
//! queries are `samplconfigs/retrieval-queries.json` (kind `answerable`)
//! and `tests/eval/retrieval/{unanswerable,multi,paragraphs}.json` (see
//! `check.py` there for the format). Every query is asked once per
//! `search_type` (keywords, semantic, hybrid), through the library
//! handlers:
//!
//! - `find` at limit 10 (the three hit lists merged by score): recall@10
//!   and MRR@10 of the relevant files (answerable, multi and paragraph
//!   queries);
//! - `search` in context mode at 400 and 1600 tokens: the share of the
//!   relevant files served with text (`detail` other than `uri`) at each
//!   budget; at 1600 the precision of the entries (those of a relevant
//!   file over all entries, summed over the queries that have relevant
//!   files), whether a paragraph query's answer paragraph is in the
//!   block (whitespace collapsed, XML escapes undone), and whether an
//!   unanswerable query's block holds at most one entry ("abstain"). The
//!   user's profile is not counted as wanted here: context mode never
//!   serves it (the session start injects it), and a query that wants
//!   only the profile is scored on `find` alone.
//!
//! URIs are compared without anything from their first `#` (a passage
//! suffix). Beside Skald, a plain baseline over the same files: each file
//! cut into passages of whole paragraphs (blank-line separated) of up to
//! about 1,000 bytes (a shorter file is one passage), ranked by BM25 (k1
//! 1.2, b 0.75, Skald's keyword terms, so CJK-aware); files ranked by
//! their best passage are its `find`, its best passages packed whole,
//! best first, while they fit the budget (`estimate_tokens` of the text,
//! no envelope) are its block, scored the same way (an entry is a
//! passage). Results per language (`cross` includes the original set's
//! `cross-en-zh` and `cross-zh-en`), per kind, and overall, as Markdown
//! tables. Nothing here is tuned on these queries: they measure.
// A benchmark reports on stdout by design.
#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde::Deserialize;
use serde_json::{Value, json};
use skald::app::App;
use skald::embed::Embedder;
use skald::ingest::{IngestOptions, ingest_dir};
use skald_bench::eval::{Bm25, normal, unescape};
use skald_bench::{Flags, TempStore, block_on, embedder, event, fail, parse_body, program, repo};
use skald_tests::fixture::{FIND_PATH, SEARCH_PATH};

const USAGE: &str = "usage: bench_retrieval [--hashed] [--only-kind answerable|multi|paragraph|unanswerable] [--show-misses N] [--gap X] [--floor X] [--fused] [--rerank-e5 | --rerank BASE_URL --rerank-model NAME] [--rerank-threshold X]";

/// The kinds of query, in report order.
const KINDS: [&str; 4] = ["answerable", "multi", "paragraph", "unanswerable"];
/// The languages, in report order.
const LANGS: [&str; 3] = ["en", "zh", "cross"];
/// Skald's search types, then the baseline.
const METHODS: [&str; 4] = ["keywords", "semantic", "hybrid", "bm25 passages"];
/// The baseline's index in [`METHODS`].
const BM25: usize = 3;
/// The context budgets, in tokens.
const BUDGETS: [usize; 2] = [400, 1600];
/// Hits scored by recall and MRR.
const TOP: usize = 10;
/// Where the long documents are ingested.
const LONGDOCS: &str = "resources/longdocs";
/// The baseline's passage size, in bytes (a paragraph is never cut).
const PASSAGE_BYTES: usize = 1000;

#[derive(Debug, Deserialize)]
struct Query {
    #[serde(default)]
    id: String,
    query: String,
    lang: String,
    #[serde(default)]
    kind: String,
    relevant: Vec<String>,
    #[serde(default)]
    answer_paragraph: Option<String>,
}

impl Query {
    /// Whether its relevant files are ranked and served (all but the
    /// unanswerable ones).
    fn ranked(&self) -> bool {
        !self.relevant.is_empty()
    }
}

/// What one way of answering gave for one query.
#[derive(Debug, Default)]
struct Outcome {
    /// The top files, best first, URIs without suffix, each once.
    ranking: Vec<String>,
    /// The block at each of [`BUDGETS`].
    blocks: [Block; 2],
}

/// One context block.
#[derive(Debug, Default)]
struct Block {
    /// Each entry's URI (without suffix) and whether it came with text.
    entries: Vec<(String, bool)>,
    /// The block's text, XML escapes undone, whitespace collapsed.
    text: String,
    /// The block as served (`SKALD_SHOW_BLOCKS` prints a missed one).
    raw: String,
}

/// Sums over the queries of one slice, for one way of answering.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    queries: usize,
    /// Queries with relevant files, and their sums of recall@10 and of
    /// reciprocal ranks.
    ranked: usize,
    recall: f64,
    reciprocal: f64,
    /// Queries with relevant files context mode can serve (all but the
    /// profile, [`served_by_session_start`]), and their sums of the share
    /// served with text per budget.
    in_context: usize,
    served: [f64; 2],
    /// Entries of the 1600 blocks of the queries counted in `in_context`,
    /// and those of a relevant file.
    injected: usize,
    injected_relevant: usize,
    /// Paragraph queries, and those whose paragraph is in the 1600 block.
    paragraphs: usize,
    paragraph_held: usize,
    /// Unanswerable queries, and those whose 1600 block has at most one entry.
    unanswerable: usize,
    abstained: usize,
    /// Entries of every 1600 block.
    entries: usize,
}

impl Tally {
    fn merge(&mut self, o: &Tally) {
        self.queries += o.queries;
        self.ranked += o.ranked;
        self.recall += o.recall;
        self.reciprocal += o.reciprocal;
        self.in_context += o.in_context;
        self.served[0] += o.served[0];
        self.served[1] += o.served[1];
        self.injected += o.injected;
        self.injected_relevant += o.injected_relevant;
        self.paragraphs += o.paragraphs;
        self.paragraph_held += o.paragraph_held;
        self.unanswerable += o.unanswerable;
        self.abstained += o.abstained;
        self.entries += o.entries;
    }

    /// The cells of a table row after the slice and method names.
    fn cells(&self) -> Vec<String> {
        let pct = |n: f64, of: usize| if of == 0 { "–".to_owned() } else { format!("{:.1}%", 100.0 * n / of as f64) };
        vec![
            self.queries.to_string(),
            pct(self.recall, self.ranked),
            if self.ranked == 0 { "–".to_owned() } else { format!("{:.3}", self.reciprocal / self.ranked as f64) },
            pct(self.served[0], self.in_context),
            pct(self.served[1], self.in_context),
            pct(self.injected_relevant as f64, self.injected),
            pct(self.paragraph_held as f64, self.paragraphs),
            pct(self.abstained as f64, self.unanswerable),
            if self.queries == 0 {
                "–".to_owned()
            } else {
                format!("{:.1}", self.entries as f64 / self.queries as f64)
            },
        ]
    }
}

const COLUMNS: [&str; 11] = [
    "slice",
    "method",
    "n",
    "recall@10",
    "MRR@10",
    "relevant in ctx 400",
    "relevant in ctx 1600",
    "precision 1600",
    "paragraph in 1600",
    "unanswerable: ≤1 entry",
    "entries 1600",
];

fn main() {
    let mut flags = Flags::from_env(USAGE);
    let (mut hashed, mut only_kind, mut show) = (false, None::<String>, 0usize);
    let mut retrieval = skald::config::RetrievalConfig::default();
    let mut fused = false;
    let mut rerank = skald_bench::RerankFlags::default();
    while let Some(flag) = flags.next() {
        if rerank.take(&mut flags, &flag, &mut retrieval) {
            continue;
        }
        match flag.as_str() {
            "--hashed" => hashed = true,
            "--fused" => fused = true,
            "--only-kind" => {
                let kind = flags.value(&flag).unwrap_or_else(|e| fail("--only-kind", e));
                if !KINDS.contains(&kind.as_str()) {
                    fail("--only-kind", format!("{kind:?} is not one of {}", KINDS.join(", ")));
                }
                only_kind = Some(kind);
            }
            "--show-misses" => show = flags.at_least(&flag, 0).unwrap_or_else(|e| fail("--show-misses", e)),
            "--gap" => retrieval.relevance_gap = skald_bench::fraction(&mut flags, &flag),
            "--floor" => retrieval.relevance_floor = Some(skald_bench::fraction(&mut flags, &flag)),
            other => fail("flags", flags.unknown(other)),
        }
    }
    let mut queries = load_queries();
    queries.retain(|q| only_kind.as_ref().is_none_or(|k| &q.kind == k));
    let docs = long_docs();
    // `--fused`: USE-m3 beside the embedded multilingual-e5-small (`use-m3+e5`).
    let embedder = if fused { skald_bench::fused_embedder() } else { embedder(hashed, "--hashed") };
    let command: Vec<String> = std::iter::once(program()).chain(std::env::args().skip(1)).collect();
    println!("$ {}", command.join(" "));
    println!();
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for q in &queries {
        *counts.entry(q.kind.as_str()).or_default() += 1;
    }
    println!(
        "== retrieval evaluation: {} queries ({}), embedder {}, corpus samplconfigs/demo + {} long documents",
        queries.len(),
        KINDS.iter().map(|k| format!("{k} {}", counts.get(k).copied().unwrap_or(0))).collect::<Vec<_>>().join(", "),
        embedder.id(),
        docs.len()
    );
    let started = Instant::now();
    let tallies = block_on(async {
        let (rerank, _server) = rerank.config().await;
        Box::pin(evaluate(
            &queries,
            &docs,
            embedder,
            show,
            skald::config::Config { retrieval, rerank, ..skald_bench::dev_config() },
        ))
        .await
    });
    println!();
    print_tables(&tallies);
    println!();
    println!("{} queries × {} ways in {:.1} s", queries.len(), METHODS.len(), started.elapsed().as_secs_f64());
}

/// Every query of the set, with its kind, a normalised language (`cross`
/// for the original set's `cross-*`), and an id (`a-NN` for the original
/// set, by position).
fn load_queries() -> Vec<Query> {
    let read = |path: PathBuf| -> Vec<Query> {
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| fail(&path.display().to_string(), e));
        serde_json::from_str(&text).unwrap_or_else(|e| fail(&path.display().to_string(), e))
    };
    let mut queries = read(repo().join("samplconfigs/retrieval-queries.json"));
    for (i, q) in queries.iter_mut().enumerate() {
        q.id = format!("a-{:02}", i + 1);
        q.kind = "answerable".to_owned();
        if q.lang.starts_with("cross") {
            q.lang = "cross".to_owned();
        }
    }
    let dir = repo().join("tests/eval/retrieval");
    for name in ["multi.json", "paragraphs.json", "unanswerable.json"] {
        queries.extend(read(dir.join(name)));
    }
    for q in &queries {
        if !KINDS.contains(&q.kind.as_str()) || !LANGS.contains(&q.lang.as_str()) {
            fail("queries", format!("{}: kind {:?}, lang {:?}", q.id, q.kind, q.lang));
        }
        if q.kind == "paragraph" && q.answer_paragraph.is_none() {
            fail("queries", format!("{}: a paragraph query without answer_paragraph", q.id));
        }
    }
    queries
}

/// The long documents, by path.
fn long_docs() -> Vec<PathBuf> {
    let dir = repo().join("tests/eval/retrieval/docs");
    let mut docs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| fail(&dir.display().to_string(), e))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    if docs.is_empty() {
        fail("long documents", format!("none in {}", dir.display()));
    }
    docs
}

/// Ingests the corpus, asks every query every way, and sums the scores
/// per slice (`all`, `lang …`, `kind …`) and way.
async fn evaluate(
    queries: &[Query],
    docs: &[PathBuf],
    embedder: Arc<dyn Embedder>,
    show: usize,
    config: skald::config::Config,
) -> BTreeMap<(String, usize), Tally> {
    let temp = TempStore::open("skald-bench-retrieval");
    let started = Instant::now();
    skald_bench::ingest_demo(temp.store(), embedder.as_ref()).await;
    ingest_long_docs(&temp, docs, embedder.as_ref()).await;
    let took = started.elapsed().as_secs_f64();
    println!("ingest: {took:.1} s");
    report_index_size(&temp, docs, took).await;
    let app = skald::app::App::with_parts(config, temp.store().clone(), embedder);
    let corpus = Corpus::read(docs);
    println!(
        "baseline: {} files in {} passages of up to about {PASSAGE_BYTES} bytes",
        corpus.files.len(),
        corpus.passages.len()
    );
    let mut tallies: BTreeMap<(String, usize), Tally> = BTreeMap::new();
    let mut misses = [0usize; METHODS.len()];
    for q in queries {
        for (method, name) in METHODS.iter().enumerate() {
            let outcome = if method == BM25 { corpus.answer(&q.query) } else { ask(&app, &q.query, name).await };
            let tally = score(q, &outcome);
            if let (Some(path), true) = (std::env::var_os("SKALD_DUMP_SCORES"), method != BM25) {
                dump_scores(&app, q, name, &path).await;
            }
            for slice in ["all".to_owned(), format!("lang {}", q.lang), format!("kind {}", q.kind)] {
                tallies.entry((slice, method)).or_default().merge(&tally);
            }
            if misses[method] < show && missed(q, &tally) {
                misses[method] += 1;
                print_miss(q, name, &outcome.blocks[1]);
            }
        }
    }
    tallies
}

/// Appends every `find` hit of `query` by `search_type` (score, relevant
/// or not, URI; up to 1,000) to the JSON lines file `path`
/// (`SKALD_DUMP_SCORES`): the data the relevance bars are calibrated on.
async fn dump_scores(app: &App, q: &Query, search_type: &str, path: &std::ffi::OsStr) {
    let found = post(app, FIND_PATH, &json!({"query": q.query, "limit": 1000, "search_type": search_type})).await;
    let mut hits: Vec<(f64, bool, String)> = ["memories", "resources", "skills"]
        .iter()
        .flat_map(|list| found["result"][list].as_array().cloned().unwrap_or_default())
        .map(|hit| {
            let uri = hit["uri"].as_str().unwrap_or_default().to_owned();
            (hit["score"].as_f64().unwrap_or(0.0), q.relevant.contains(&file_uri(&uri)), uri)
        })
        .collect();
    hits.sort_by(|a, b| b.0.total_cmp(&a.0));
    let line = json!({"id": q.id, "kind": q.kind, "lang": q.lang, "method": search_type, "hits": hits});
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut file| std::io::Write::write_all(&mut file, format!("{line}\n").as_bytes()));
    if let Err(e) = written {
        fail("SKALD_DUMP_SCORES", e);
    }
}

/// Prints what the ingested corpus costs: its records (files,
/// passages), the index's bytes in the store, and both per MB of source
/// text, with the ingest time per MB.
async fn report_index_size(temp: &TempStore, docs: &[PathBuf], took_s: f64) {
    fn bytes_under(dir: &Path) -> u64 {
        std::fs::read_dir(dir).map_or(0, |entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| {
                    let path = e.path();
                    if path.is_dir() { bytes_under(&path) } else { e.metadata().map_or(0, |m| m.len()) }
                })
                .sum()
        })
    }
    let source = bytes_under(&repo().join("samplconfigs/demo"))
        + docs.iter().map(|d| std::fs::metadata(d).map_or(0, |m| m.len())).sum::<u64>();
    let snapshot = skald::index::IndexSnapshot::load(temp.store(), &skald_bench::account(), None)
        .await
        .unwrap_or_else(|e| fail("load the index", e));
    let passages = snapshot.records().filter(|(r, _)| r.is_passage()).count();
    let stored: u64 = snapshot.manifest.as_ref().map_or(0, |m| m.segments.iter().map(|s| s.bytes).sum::<u64>());
    let mb = source as f64 / 1_048_576.0;
    println!(
        "index: {} records ({passages} passages) in {stored} bytes of segments for {source} bytes of source: \
         {:.1} MB of index and {:.0} s of ingest per MB of source",
        snapshot.len(),
        stored as f64 / 1_048_576.0 / mb,
        took_s / mb
    );
}

/// Ingests `docs` under `viking://resources/longdocs/` (through a
/// temporary directory laid out as the tree, removed afterwards).
async fn ingest_long_docs(temp: &TempStore, docs: &[PathBuf], embedder: &dyn Embedder) {
    let root = std::env::temp_dir().join("skald-bench-retrieval-docs");
    let _ = std::fs::remove_dir_all(&root);
    let dir = root.join(LONGDOCS);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| fail(&dir.display().to_string(), e));
    for doc in docs {
        let to = dir.join(doc.file_name().unwrap_or_default());
        std::fs::copy(doc, &to).unwrap_or_else(|e| fail(&doc.display().to_string(), e));
    }
    // The demo's settings (`skald_bench::ingest_demo`).
    let options = IngestOptions { abstract_max_bytes: 400, ..IngestOptions::default() };
    let report = ingest_dir(
        &root,
        &skald::index::Target::segments(temp.store()),
        &skald_bench::account(),
        embedder,
        &options,
        &mut |_| {},
    )
    .await
    .unwrap_or_else(|e| fail("ingest long documents", e));
    if report.indexed < docs.len() {
        fail("ingest long documents", format!("{} indexed of {}", report.indexed, docs.len()));
    }
    if let Err(e) = std::fs::remove_dir_all(&root) {
        eprintln!("{}: cannot remove {}: {e}", program(), root.display());
    }
}

/// Skald's answer to `query` with `search_type`: `find` at limit 10, then
/// `search` in context mode at each budget.
async fn ask(app: &App, query: &str, search_type: &str) -> Outcome {
    let found = post(app, FIND_PATH, &json!({"query": query, "limit": TOP, "search_type": search_type})).await;
    let mut hits: Vec<(f64, String)> = ["memories", "resources", "skills"]
        .iter()
        .flat_map(|list| found["result"][list].as_array().cloned().unwrap_or_default())
        .filter_map(|hit| Some((hit["score"].as_f64().unwrap_or(f64::NEG_INFINITY), file_uri(hit["uri"].as_str()?))))
        .collect();
    // Stable: equal scores keep the lists' order.
    hits.sort_by(|a, b| b.0.total_cmp(&a.0));
    let mut ranking: Vec<String> = Vec::new();
    for (_, uri) in hits {
        if !ranking.contains(&uri) {
            ranking.push(uri);
        }
    }
    ranking.truncate(TOP);
    let mut blocks: [Block; 2] = Default::default();
    for (block, budget) in blocks.iter_mut().zip(BUDGETS) {
        let body = json!({"query": query, "mode": "context", "max_tokens": budget, "search_type": search_type});
        let reply = post(app, SEARCH_PATH, &body).await;
        let result = &reply["result"];
        block.entries = result["entries"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|e| {
                (file_uri(e["uri"].as_str().unwrap_or_default()), e["detail"].as_str().is_some_and(|d| d != "uri"))
            })
            .collect();
        block.raw = result["rendered"].as_str().unwrap_or_default().to_owned();
        block.text = normal(&unescape(&block.raw));
    }
    Outcome { ranking, blocks }
}

/// `POST path` with `body` through the library handler; anything but
/// status 200 aborts the bench.
async fn post(app: &App, path: &str, body: &Value) -> Value {
    let request = skald_lambda::to_library_request(event("POST", path, Some(body)));
    let response = if path == FIND_PATH {
        Box::pin(skald::api::find::handle(app, request)).await
    } else {
        Box::pin(skald::api::search::handle(app, request)).await
    };
    if response.status() != 200 {
        fail(path, format!("status {}: {}", response.status(), response.body()));
    }
    parse_body(response.body())
}

/// The scores of one query answered one way.
fn score(q: &Query, outcome: &Outcome) -> Tally {
    let mut t = Tally { queries: 1, entries: outcome.blocks[1].entries.len(), ..Tally::default() };
    if q.ranked() {
        let wanted: Vec<String> = q.relevant.iter().map(|u| file_uri(u)).collect();
        t.ranked = 1;
        let found = wanted.iter().filter(|w| outcome.ranking.contains(w)).count();
        t.recall = found as f64 / wanted.len() as f64;
        t.reciprocal =
            outcome.ranking.iter().position(|u| wanted.contains(u)).map_or(0.0, |rank| 1.0 / (rank + 1) as f64);
        let wanted: Vec<&String> = wanted.iter().filter(|w| !served_by_session_start(w)).collect();
        if !wanted.is_empty() {
            t.in_context = 1;
            for (served, block) in t.served.iter_mut().zip(&outcome.blocks) {
                let held = wanted.iter().filter(|w| block.entries.iter().any(|(u, text)| *text && u == **w)).count();
                *served = held as f64 / wanted.len() as f64;
            }
            let block = &outcome.blocks[1];
            t.injected = block.entries.len();
            t.injected_relevant = block.entries.iter().filter(|(u, _)| wanted.contains(&u)).count();
        }
    } else {
        t.unanswerable = 1;
        t.abstained = usize::from(outcome.blocks[1].entries.len() <= 1);
    }
    if let Some(paragraph) = &q.answer_paragraph {
        t.paragraphs = 1;
        t.paragraph_held = usize::from(outcome.blocks[1].text.contains(&normal(paragraph)));
    }
    t
}

/// Whether context mode leaves `uri` to the session start: the user's
/// profile is never a candidate (the plugins and `bootstrap` inject it when
/// a session starts), so the context columns do not count it as wanted.
fn served_by_session_start(uri: &str) -> bool {
    uri.ends_with("/memories/profile.md")
}

/// Whether the 1600 block missed: a relevant file not served with text,
/// the answer paragraph absent, or more than one entry for an
/// unanswerable query.
fn missed(q: &Query, t: &Tally) -> bool {
    if q.ranked() {
        (t.in_context == 1 && t.served[1] < 1.0) || t.paragraphs > t.paragraph_held
    } else {
        t.abstained == 0
    }
}

fn print_miss(q: &Query, method: &str, block: &Block) {
    println!("  miss [{method}] {} ({}, {}) {}", q.id, q.kind, q.lang, q.query);
    if !q.relevant.is_empty() {
        println!("    relevant: {}", q.relevant.join(", "));
    }
    let served: Vec<String> =
        block.entries.iter().map(|(u, text)| if *text { u.clone() } else { format!("{u} (uri only)") }).collect();
    println!("    1600 block: {}", if served.is_empty() { "(empty)".to_owned() } else { served.join(", ") });
    if std::env::var_os("SKALD_SHOW_BLOCKS").is_some() {
        println!("{}", block.raw);
    }
}

fn print_tables(tallies: &BTreeMap<(String, usize), Tally>) {
    let header = |first: &str| {
        println!(
            "| {} |",
            COLUMNS.iter().map(|c| if *c == "slice" { first } else { c }).collect::<Vec<_>>().join(" | ")
        );
        println!("|{}", "---|".repeat(COLUMNS.len()));
    };
    let rows = |slice: &str, label: &str| {
        for (method, name) in METHODS.iter().enumerate() {
            if let Some(t) = tallies.get(&(slice.to_owned(), method)) {
                println!("| {label} | {name} | {} |", t.cells().join(" | "));
            }
        }
    };
    println!("### overall");
    println!();
    header("slice");
    rows("all", "all");
    println!();
    println!("### by language");
    println!();
    header("lang");
    for lang in LANGS {
        rows(&format!("lang {lang}"), lang);
    }
    println!();
    println!("### by kind");
    println!();
    header("kind");
    for kind in KINDS {
        rows(&format!("kind {kind}"), kind);
    }
}

/// `uri` without anything from its first `#` (a passage suffix).
fn file_uri(uri: &str) -> String {
    uri.split_once('#').map_or(uri, |(file, _)| file).to_owned()
}

/// The baseline's view of the corpus: every file the demo and the long
/// documents hold (directory sidecars aside), cut into passages.
struct Corpus {
    /// File URIs.
    files: Vec<String>,
    /// Each passage's file (index into `files`) and text.
    passages: Vec<(usize, String)>,
    bm25: Bm25,
}

impl Corpus {
    fn read(docs: &[PathBuf]) -> Self {
        let demo = repo().join("samplconfigs/demo");
        let mut sources: Vec<(String, PathBuf)> = Vec::new();
        walk(&demo, &mut |path| {
            let rel = path.strip_prefix(&demo).unwrap_or(path);
            let hidden = rel.components().any(|c| c.as_os_str().to_string_lossy().starts_with('.'));
            if !hidden {
                let rel: Vec<String> = rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
                sources.push((format!("viking://{}", rel.join("/")), path.to_path_buf()));
            }
        });
        for doc in docs {
            let name = doc.file_name().unwrap_or_default().to_string_lossy();
            sources.push((format!("viking://{LONGDOCS}/{name}"), doc.clone()));
        }
        sources.sort();
        let mut files = Vec::new();
        let mut passages = Vec::new();
        for (uri, path) in sources {
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| fail(&path.display().to_string(), e));
            passages.extend(split_passages(&text).into_iter().map(|p| (files.len(), p)));
            files.push(uri);
        }
        let texts: Vec<&str> = passages.iter().map(|(_, p)| p.as_str()).collect();
        let bm25 = Bm25::new(&texts);
        Self { files, passages, bm25 }
    }

    /// The baseline's answer: files by their best passage, and the best
    /// passages packed whole into each budget.
    fn answer(&self, query: &str) -> Outcome {
        let ranked = self.bm25.rank(query);
        let mut ranking: Vec<String> = Vec::new();
        for &i in &ranked {
            let uri = &self.files[self.passages[i].0];
            if !ranking.contains(uri) {
                ranking.push(uri.clone());
                if ranking.len() == TOP {
                    break;
                }
            }
        }
        let mut blocks: [Block; 2] = Default::default();
        for (block, budget) in blocks.iter_mut().zip(BUDGETS) {
            let (mut used, mut text) = (0, Vec::new());
            for &i in &ranked {
                let (file, passage) = &self.passages[i];
                let cost = skald::tokens::estimate_tokens(passage);
                if used + cost > budget {
                    continue;
                }
                used += cost;
                block.entries.push((self.files[*file].clone(), true));
                text.push(passage.as_str());
            }
            block.raw = text.join("\n\n");
            block.text = normal(&block.raw);
        }
        Outcome { ranking, blocks }
    }
}

/// Calls `visit` with every file under `dir`, recursively.
fn walk(dir: &Path, visit: &mut dyn FnMut(&Path)) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| fail(&dir.display().to_string(), e));
    for entry in entries {
        let path = entry.unwrap_or_else(|e| fail(&dir.display().to_string(), e)).path();
        if path.is_dir() {
            walk(&path, visit);
        } else {
            visit(&path);
        }
    }
}

/// `text` as passages: its paragraphs (separated by blank lines), whole,
/// joined while a passage stays within [`PASSAGE_BYTES`]; a text that
/// short is one passage, a longer paragraph is a passage of its own.
fn split_passages(text: &str) -> Vec<String> {
    if text.len() <= PASSAGE_BYTES {
        return vec![text.to_owned()];
    }
    let mut paragraphs: Vec<String> = Vec::new();
    let mut current: Vec<&str> = Vec::new();
    for line in text.lines() {
        if line.trim().is_empty() {
            if !current.is_empty() {
                paragraphs.push(current.join("\n"));
                current.clear();
            }
        } else {
            current.push(line);
        }
    }
    if !current.is_empty() {
        paragraphs.push(current.join("\n"));
    }
    let mut passages: Vec<String> = Vec::new();
    let mut passage = String::new();
    for paragraph in paragraphs {
        if !passage.is_empty() && passage.len() + 2 + paragraph.len() > PASSAGE_BYTES {
            passages.push(std::mem::take(&mut passage));
        }
        if !passage.is_empty() {
            passage.push_str("\n\n");
        }
        passage.push_str(&paragraph);
    }
    if !passage.is_empty() {
        passages.push(passage);
    }
    passages
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passages_keep_paragraphs_whole() {
        assert_eq!(split_passages("short\n\nfile"), vec!["short\n\nfile"]);
        let a = "a".repeat(600);
        let b = "b".repeat(300);
        let c = "c".repeat(1200);
        let text = format!("{a}\n\n{b}\n  \n{c}\n\n{a}\n");
        assert_eq!(split_passages(&text), vec![format!("{a}\n\n{b}"), c, a]);
    }

    #[test]
    fn uris_lose_their_passage_suffix() {
        assert_eq!(file_uri("viking://resources/longdocs/x.md#L10-L40"), "viking://resources/longdocs/x.md");
        assert_eq!(file_uri("viking://resources/a.md"), "viking://resources/a.md");
        assert_eq!(unescape("a &amp;lt; b &lt;c&gt;"), "a &lt; b <c>");
    }
}
