//! Measures the embedded multilingual-e5-small embedder: open time, first
//! and warm query times for a short and a long text, a 100-text batch and
//! peak RSS. Figures go to BENCHMARKS.md ("multilingual-e5-small").
//!
//! ```text
//! scripts/setup-model.sh
//! cargo run --release -p skald-bench --bin bench_e5             # everything
//! target/release/bench_e5 vectors < texts.tsv                   # `q` or `p`, a tab, a text per line: JSON vectors
//! ```
//!
//! The model directory is `SKALD_E5_DIR` or `<repo>/.skald/models/e5`.

#![allow(clippy::print_stdout)]

use std::io::BufRead;
use std::time::{Duration, Instant};

use skald::embed::e5::{E5Embedder, MODEL_FILE, Side};
use skald_bench::{e5_dir, status, time_ms};

const SHORT: &str = "How do I reset my password on the staging cluster?";
const LONG: &str = "Skald assembles context for agents from their memories, resources and skills. A request names \
a budget; the planner picks candidates, excludes what the session has already seen, reads what it needs and renders \
it within the budget. Retrieval is exact: every record that passes the filter is scored by cosine similarity \
against the query vector, and the best ones are returned with their abstracts. 索引器写入不可变的分段和一个清单，\
每个写入者都通过比较并交换来更新它，因此并发写入不会丢失任何内容。";

fn open(dir: &std::path::Path) -> E5Embedder {
    E5Embedder::open(dir).unwrap_or_else(|e| {
        eprintln!("{e}\nrun scripts/setup-model.sh first (or set SKALD_E5_DIR)");
        std::process::exit(2)
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// `q` or `p`, a tab, a text per line of stdin: one JSON array per line.
fn vectors(model: &E5Embedder) {
    for line in std::io::stdin().lock().lines().map_while(Result::ok) {
        let (side, text) = line.split_once('\t').unwrap_or(("p", line.as_str()));
        let side = if side == "q" { Side::Query } else { Side::Passage };
        let v = model.embed_blocking(&[text], side);
        println!("{}", serde_json::to_string(&v[0]).unwrap_or_default());
    }
}

fn main() {
    let dir = e5_dir();
    if std::env::args().nth(1).as_deref() == Some("vectors") {
        vectors(&open(&dir));
        return;
    }
    let bytes = std::fs::metadata(dir.join(MODEL_FILE)).map(|m| m.len()).unwrap_or(0);
    println!("model file: {} ({bytes} bytes, {:.1} MiB)", dir.join(MODEL_FILE).display(), bytes as f64 / 1048576.0);
    let start = Instant::now();
    let model = open(&dir);
    println!("open (map, piece table, decode the layers): {:.1} ms", ms(start.elapsed()));
    let (short, long) = (model.token_ids(SHORT, Side::Query).len(), model.token_ids(LONG, Side::Passage).len());
    let start = Instant::now();
    let _ = model.embed_blocking(&[SHORT], Side::Query);
    println!("first query ({short} tokens): {:.2} ms", ms(start.elapsed()));
    let (s_med, s_p90) = time_ms(50, || model.embed_blocking(&[SHORT], Side::Query));
    println!("warm query ({short} tokens): median {s_med:.2} ms, p90 {s_p90:.2} ms");
    let (l_med, l_p90) = time_ms(10, || model.embed_blocking(&[LONG], Side::Passage));
    println!("warm passage ({long} tokens): median {l_med:.2} ms, p90 {l_p90:.2} ms");
    let texts: Vec<String> = (0..100)
        .map(|i| match i % 3 {
            0 => format!("Note {i}: the user prefers dark mode and concise answers about topic {i}."),
            1 => format!("第{i}条记忆：用户喜欢深色模式和简洁的回答。"),
            _ => format!("{SHORT} (variant {i})"),
        })
        .collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let tokens: usize = refs.iter().map(|t| model.token_ids(t, Side::Passage).len()).sum();
    let (b_med, _) = time_ms(3, || model.embed_blocking(&refs, Side::Passage));
    println!(
        "100 passages ({tokens} tokens) in one call: median {b_med:.1} ms ({:.3} ms/token)",
        b_med / tokens as f64
    );
    println!("VmHWM {}, VmRSS {}", status("VmHWM:"), status("VmRSS:"));
}
