//! Measures the embedded USE-m3 embedder: open time, first and warm query
//! times for a short and a long text, a 100-text batch, peak RSS and the
//! model file's size. Figures go to BENCHMARKS.md ("USE-m3 embedder").
//!
//! ```text
//! scripts/setup-model.sh
//! cargo run --release -p skald-bench --bin bench_use            # everything
//! cargo run --release -p skald-bench --bin bench_use -- rss     # open + 100 texts, then peak RSS only
//! ```
//!
//! The model directory is `SKALD_USE_M3_DIR` or `<repo>/.skald/models/use-m3`.

#![allow(clippy::print_stdout)]

use std::time::{Duration, Instant};

use skald::embed::use_m3::{MODEL_FILE, UseM3Embedder};
use skald_bench::{status, time_ms, use_m3_dir};

const SHORT: &str = "How do I reset my password on the staging cluster?";
const LONG: &str = "Skald assembles context for agents from their memories, resources and skills. A request names \
a budget; the planner picks candidates, excludes what the session has already seen, reads what it needs and renders \
it within the budget. Retrieval is exact: every record that passes the filter is scored by cosine similarity \
against the query vector, and the best ones are returned with their abstracts. The index lives in the store as \
immutable segments plus a manifest, so a reader always sees a consistent set of segments, even while the indexer \
is writing new ones after an upload. 索引器写入不可变的分段和一个清单，每个写入者都通过比较并交换来更新它，因此并发写入不会丢失任何内容。\
Sessions are never indexed, and a request sees one account only.";

fn open(dir: &std::path::Path) -> UseM3Embedder {
    UseM3Embedder::open(dir).unwrap_or_else(|e| {
        eprintln!("{e}\nrun scripts/setup-model.sh first (or set SKALD_USE_M3_DIR)");
        std::process::exit(2)
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn hundred_texts() -> Vec<String> {
    (0..100)
        .map(|i| match i % 4 {
            0 => format!("Note {i}: the user prefers dark mode and concise answers about topic {i}."),
            1 => format!("第{i}条记忆：用户喜欢深色模式和简洁的回答。"),
            2 => format!("{SHORT} (variant {i})"),
            _ => LONG[..LONG.len() / 2].to_owned(),
        })
        .collect()
}

fn main() {
    let dir = use_m3_dir();
    if std::env::args().nth(1).as_deref() == Some("rss") {
        let start = Instant::now();
        let model = open(&dir);
        let texts = hundred_texts();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let v = model.embed_blocking(&refs);
        println!(
            "open + 100 texts: {:.1} ms, {} vectors; VmHWM {}, VmRSS {}",
            ms(start.elapsed()),
            v.len(),
            status("VmHWM:"),
            status("VmRSS:")
        );
        return;
    }

    let bytes = std::fs::metadata(dir.join(MODEL_FILE)).map(|m| m.len()).unwrap_or(0);
    println!("model file: {} ({bytes} bytes, {:.1} MiB)", dir.join(MODEL_FILE).display(), bytes as f64 / 1048576.0);

    let start = Instant::now();
    let model = open(&dir);
    let first_open = ms(start.elapsed());
    let short_ids = model.token_ids(SHORT);
    let long_ids = model.token_ids(LONG);
    let start = Instant::now();
    let _ = model.embed_blocking(&[SHORT]);
    let first_short = ms(start.elapsed());
    let start = Instant::now();
    let _ = model.embed_blocking(&[LONG]);
    let first_long = ms(start.elapsed());
    println!("first open (mmap + header + tables): {first_open:.3} ms");
    println!("first query, short ({} tokens): {first_short:.2} ms", short_ids.len());
    println!("first query, long ({} tokens): {first_long:.2} ms", long_ids.len());

    let (open_med, open_p90) = time_ms(200, || open(&dir));
    println!("open, median of 200: {open_med:.3} ms (p90 {open_p90:.3})");
    let (tok_short, _) = time_ms(2000, || model.token_ids(SHORT));
    let (tok_long, _) = time_ms(500, || model.token_ids(LONG));
    println!("tokenize only: short {:.1} µs, long {:.1} µs", tok_short * 1e3, tok_long * 1e3);
    let (s_med, s_p90) = time_ms(300, || model.embed_blocking(&[SHORT]));
    println!("warm query, short ({} tokens): median {s_med:.2} ms, p90 {s_p90:.2} ms", short_ids.len());
    let (l_med, l_p90) = time_ms(60, || model.embed_blocking(&[LONG]));
    println!("warm query, long ({} tokens): median {l_med:.2} ms, p90 {l_p90:.2} ms", long_ids.len());

    let texts = hundred_texts();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let tokens: usize = refs.iter().map(|t| model.token_ids(t).len()).sum();
    let (b_med, _) = time_ms(5, || model.embed_blocking(&refs));
    println!(
        "100 texts ({tokens} tokens) in one call: median {b_med:.1} ms ({:.2} ms/text, {:.3} ms/token)",
        b_med / 100.0,
        b_med / tokens as f64
    );
    let one_by_one = time_ms(3, || refs.iter().map(|t| model.embed_blocking(&[t])).collect::<Vec<_>>()).0;
    println!("the same 100 texts one call each: median {one_by_one:.1} ms");
    println!("VmHWM {}, VmRSS {}", status("VmHWM:"), status("VmRSS:"));
}
