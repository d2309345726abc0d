//! Generates USE-m3's language axis (`skald::embed::use_m3::language`):
//! embeds the sentence pairs of `language_pairs.tsv` as documents, derives
//! the axis and writes it to `shared/src/embed/use_m3/language_axis.in`.
//! Run it after changing the pairs or the model; `use_m3_parity::` checks
//! that the file matches.
//!
//! ```text
//! scripts/setup-model.sh        # once (the USE-m3 model)
//! cargo run --release -p skald-bench --bin language_axis
//! ```
// A generator reports on stdout by design.
#![allow(clippy::print_stdout)]

use skald::embed::use_m3::UseM3Embedder;
use skald::embed::use_m3::language::{PAIRS, derive, pairs};
use skald_bench::{fail, repo, use_m3_dir};

fn main() {
    let model = UseM3Embedder::open(use_m3_dir()).unwrap_or_else(|e| fail("the USE-m3 model", e));
    let pairs = pairs(PAIRS);
    let (english, chinese): (Vec<&str>, Vec<&str>) = pairs.iter().copied().unzip();
    let axis = derive(&model.embed_blocking(&english), &model.embed_blocking(&chinese))
        .unwrap_or_else(|| fail("the axis", "the two languages' means coincide"));
    let values: Vec<String> = axis.iter().map(|x| format!("{x:?}")).collect();
    let lines: Vec<String> = values.chunks(8).map(|row| format!("    {},", row.join(", "))).collect();
    let text = format!("[\n{}\n]\n", lines.join("\n"));
    let path = repo().join("shared/src/embed/use_m3/language_axis.in");
    std::fs::write(&path, text).unwrap_or_else(|e| fail(&path.display().to_string(), e));
    println!("{}: the axis of {} pairs", path.display(), pairs.len());
}
