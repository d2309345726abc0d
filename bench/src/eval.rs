//! The evaluations' shared pieces: the BM25 baseline and the text
//! normalisation that finds a message or paragraph in a block.

use std::collections::HashMap;

/// Whitespace collapsed, so a text is found however a block wraps it.
#[must_use]
pub fn normal(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A block's XML escapes undone (`&amp;` last).
#[must_use]
pub fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&#13;", "\r")
        .replace("&amp;", "&")
}

/// Okapi BM25 (k1 1.2, b 0.75) over a fixed set of documents, with
/// Skald's keyword terms (`skald::index::lexical::for_each_term`, so
/// CJK-aware): the plain baseline the evaluations report beside Skald.
pub struct Bm25 {
    docs: Vec<HashMap<String, u32>>,
    lengths: Vec<f64>,
    df: HashMap<String, usize>,
    average: f64,
}

impl Bm25 {
    /// The index of `texts`.
    #[must_use]
    pub fn new<S: AsRef<str>>(texts: &[S]) -> Self {
        let mut docs = Vec::with_capacity(texts.len());
        let mut df: HashMap<String, usize> = HashMap::new();
        let mut lengths = Vec::with_capacity(texts.len());
        for text in texts {
            let text = text.as_ref();
            let mut counts: HashMap<String, u32> = HashMap::new();
            let mut length = 0u32;
            skald::index::lexical::for_each_term(text, |t| {
                *counts.entry(t.to_owned()).or_default() += 1;
                length += 1;
            });
            for term in counts.keys() {
                *df.entry(term.clone()).or_default() += 1;
            }
            lengths.push(f64::from(length));
            docs.push(counts);
        }
        let average = if lengths.is_empty() { 1.0 } else { lengths.iter().sum::<f64>() / lengths.len() as f64 };
        Self { docs, lengths, df, average: average.max(1.0) }
    }

    /// Every document with a query term, best first (ties by position).
    #[must_use]
    pub fn rank(&self, query: &str) -> Vec<usize> {
        let (k1, b) = (1.2, 0.75);
        let n = self.docs.len() as f64;
        let mut terms = Vec::new();
        skald::index::lexical::for_each_term(query, |t| terms.push(t.to_owned()));
        terms.sort();
        terms.dedup();
        let mut scored: Vec<(f64, usize)> = self
            .docs
            .iter()
            .enumerate()
            .filter_map(|(i, doc)| {
                let score: f64 = terms
                    .iter()
                    .filter_map(|t| {
                        let tf = f64::from(*doc.get(t)?);
                        let df = *self.df.get(t)? as f64;
                        let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
                        Some(idf * tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * self.lengths[i] / self.average)))
                    })
                    .sum();
                (score > 0.0).then_some((score, i))
            })
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        scored.into_iter().map(|(_, i)| i).collect()
    }
}
