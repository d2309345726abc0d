//! Keyword (lexical) search: one tokenizer for indexed text and queries,
//! each record's term counts stored with it in its segment, a segment's
//! postings built from them on the first keyword search it serves, and
//! BM25 scoring mapped into `[0, 1]`.
//!
//! **Terms.** Text is folded (full-width ASCII forms to ASCII, lowercase)
//! and split into words at Unicode word boundaries (UAX #29, the
//! `unicode-segmentation` crate), so punctuation, scripts and digits split
//! as a reader expects and `snake_case`, `E0425` or `3.14` stay whole. Runs
//! of Chinese characters and Hiragana, which have no spaces between words,
//! become their single characters and every overlapping pair (周报 → 周, 报,
//! 周报): the bigram indexing of Lucene's and Elasticsearch's CJK analysers.
//! It needs no dictionary (nothing to load at a cold start) and finds a
//! word whichever way a dictionary segmenter would have cut the text
//! around it. English words lose a plural `s` (Harman's S-stemmer: `reports`
//! → `report`, `queries` → `query`), and a few dozen English function words
//! are dropped; nothing else is stemmed.
//!
//! **Scores.** BM25 (`k1` 1.2, `b` 0.75) over the live records, divided by
//! the query's upper bound (each term's IDF × (`k1` + 1)): a record matching
//! every query term once, at average length, scores 1 / (`k1` + 1) ≈ 0.45;
//! the score approaches 1 only as every term repeats.
//!
//! **Why no search engine crate.** The postings are built from term counts
//! already in memory (193 ms for 100,000 records, `BENCHMARKS.md`); an
//! engine would add files of its own to fetch at a cold start, and a CJK
//! tokenizer, for what BM25 over bigrams already does.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use unicode_segmentation::UnicodeSegmentation as _;

use super::record::Record;

/// The most text of one record that is tokenized (bytes, at a character
/// boundary): 64 KiB, enough for any memory and most documents' opening.
pub const LEXICAL_MAX_BYTES: usize = 64 * 1024;
/// Longer words are not terms (hashes, base64, minified code).
pub const MAX_TERM_BYTES: usize = 64;
/// The most query terms a keyword search scores: the rarest that some
/// record holds (a whole pasted prompt can have thousands); the rest are
/// neither scored nor counted in the score's bound.
pub const MAX_QUERY_TERMS: usize = 64;
/// BM25's term-frequency saturation.
pub const K1: f64 = 1.2;
/// BM25's length normalisation.
pub const B: f64 = 0.75;

/// English function words that carry no meaning as search terms.
const STOPWORDS: &[&str] = &[
    "a", "about", "an", "and", "are", "as", "at", "be", "been", "but", "by", "can", "did", "do", "does", "for", "from",
    "had", "has", "have", "how", "i", "if", "in", "into", "is", "it", "its", "me", "my", "no", "not", "of", "on", "or",
    "our", "so", "than", "that", "the", "their", "them", "then", "there", "these", "they", "this", "to", "was", "we",
    "were", "what", "when", "where", "which", "who", "why", "will", "with", "would", "you", "your",
];

/// Chinese characters (the unified ideographs, their extensions and
/// compatibility forms) and Hiragana: scripts written without spaces, which
/// UAX #29 splits into single characters.
fn is_unspaced(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x309F | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF | 0x20000..=0x2FA1F)
}

/// Full-width ASCII forms (U+FF01–FF5E) and the ideographic space as ASCII
/// (the part of NFKC that matters in CJK text), then lowercase.
fn fold(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let c = match c as u32 {
            0xFF01..=0xFF5E => char::from_u32(c as u32 - 0xFEE0).unwrap_or(c),
            0x3000 => ' ',
            _ => c,
        };
        out.extend(c.to_lowercase());
    }
    out
}

/// Harman's S-stemmer on an ASCII word: `ies` → `y`, `es` → `e`, `s` → ``
/// (not after `u` or `s`, nor `aies`/`eies`, `aes`/`ees`/`oes`).
fn stem(word: &str) -> Cow<'_, str> {
    if word.len() <= 3 || !word.bytes().all(|b| b.is_ascii_lowercase()) {
        return Cow::Borrowed(word);
    }
    let ends = |s: &str| word.ends_with(s);
    if ends("ies") && !ends("eies") && !ends("aies") {
        return Cow::Owned(format!("{}y", &word[..word.len() - 3]));
    }
    if (ends("es") && !ends("aes") && !ends("ees") && !ends("oes")) || (ends("s") && !ends("us") && !ends("ss")) {
        return Cow::Borrowed(&word[..word.len() - 1]);
    }
    Cow::Borrowed(word)
}

/// Calls `emit` with every term of `text`, in order (repeats included).
///
/// Cost: one pass over the text plus its folded copy.
pub fn for_each_term(text: &str, mut emit: impl FnMut(&str)) {
    let folded = fold(text);
    let mut run = String::new();
    let mut run_end = 0;
    let flush = |run: &mut String, emit: &mut dyn FnMut(&str)| {
        let chars: Vec<(usize, char)> = run.char_indices().collect();
        for (k, (at, c)) in chars.iter().enumerate() {
            emit(&run[*at..*at + c.len_utf8()]);
            if let Some((next, d)) = chars.get(k + 1) {
                emit(&run[*at..*next + d.len_utf8()]);
            }
        }
        run.clear();
    };
    for (start, word) in folded.unicode_word_indices() {
        let mut chars = word.chars();
        if let (Some(c), None) = (chars.next(), chars.next())
            && is_unspaced(c)
        {
            if start != run_end {
                flush(&mut run, &mut emit);
            }
            run.push(c);
            run_end = start + word.len();
            continue;
        }
        flush(&mut run, &mut emit);
        if word.len() > MAX_TERM_BYTES || STOPWORDS.binary_search(&word).is_ok() {
            continue;
        }
        emit(&stem(word));
    }
    flush(&mut run, &mut emit);
}

/// The distinct terms of `text`, in first-seen order (a query's terms).
#[must_use]
pub fn query_terms(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for_each_term(text, |t| {
        if !out.iter().any(|o| o == t) {
            out.push(t.to_owned());
        }
    });
    out
}

/// The term counts of `texts` (each cut to [`LEXICAL_MAX_BYTES`] together)
/// as a record stores them: `term:count` pairs joined by spaces, sorted by
/// term (so the encoding is deterministic). Empty when there is no term.
#[must_use]
pub fn encode_counts(texts: &[&str]) -> String {
    let mut counts: BTreeMap<String, u32> = BTreeMap::new();
    let mut left = LEXICAL_MAX_BYTES;
    for text in texts {
        let mut cut = left.min(text.len());
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        left -= cut;
        for_each_term(&text[..cut], |t| *counts.entry(t.to_owned()).or_default() += 1);
    }
    let mut out = String::new();
    for (term, count) in counts {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&term);
        out.push(':');
        out.push_str(&count.to_string());
    }
    out
}

/// The `(term, count)` pairs of an encoding from [`encode_counts`]; pairs
/// that do not parse are skipped.
pub fn decode_counts(encoded: &str) -> impl Iterator<Item = (&str, u32)> {
    encoded.split(' ').filter_map(|pair| {
        let (term, count) = pair.rsplit_once(':')?;
        Some((term, count.parse().ok()?)).filter(|(t, _)| !t.is_empty())
    })
}

/// A segment's inverted index: for each term, the rows holding it and how
/// often; and each row's length in terms.
#[derive(Debug, Clone, Default)]
pub struct Postings {
    terms: HashMap<Box<str>, Vec<(u32, u32)>>,
    lengths: Vec<u32>,
    bytes: usize,
}

impl Postings {
    /// Builds the postings of `records` (row order) from their stored term
    /// counts. Cost: one pass over every record's counts.
    #[must_use]
    pub fn build(records: &[Record]) -> Self {
        let mut out = Self { terms: HashMap::new(), lengths: Vec::with_capacity(records.len()), bytes: 0 };
        for (row, record) in records.iter().enumerate() {
            let row = u32::try_from(row).unwrap_or(u32::MAX);
            let mut length = 0u32;
            for (term, count) in decode_counts(&record.terms) {
                length = length.saturating_add(count);
                match out.terms.get_mut(term) {
                    Some(list) => list.push((row, count)),
                    None => {
                        out.terms.insert(term.into(), vec![(row, count)]);
                    }
                }
            }
            out.lengths.push(length);
        }
        out.bytes = out.terms.iter().map(|(t, rows)| t.len() + 48 + rows.capacity() * 8).sum::<usize>()
            + out.lengths.capacity() * 4;
        out
    }

    /// The rows holding `term`, with counts (empty when none does).
    #[must_use]
    pub fn rows(&self, term: &str) -> &[(u32, u32)] {
        self.terms.get(term).map_or(&[], Vec::as_slice)
    }

    /// Row `row`'s length in terms.
    #[must_use]
    pub fn length(&self, row: usize) -> u32 {
        self.lengths.get(row).copied().unwrap_or(0)
    }

    /// An estimate of the memory held: the term strings (with ~48 bytes of
    /// map entry each), the postings and the lengths. Cost: none (counted
    /// at build).
    #[must_use]
    pub fn memory_bytes(&self) -> usize {
        self.bytes
    }
}

/// A term's BM25 inverse document frequency among `live` records of which
/// `df` hold it (never negative).
#[must_use]
pub fn idf(live: usize, df: usize) -> f64 {
    let (n, df) = (live as f64, df as f64);
    (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
}

/// One term's BM25 weight in a record: `idf` × saturated, length-normalised
/// count.
#[must_use]
pub fn weight(idf: f64, count: u32, length: u32, average_length: f64) -> f64 {
    let tf = f64::from(count);
    let norm = if average_length > 0.0 { 1.0 - B + B * f64::from(length) / average_length } else { 1.0 };
    idf * tf * (K1 + 1.0) / (tf + K1 * norm)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        for_each_term(text, |t| out.push(t.to_owned()));
        out
    }

    #[test]
    fn english_splits_at_word_boundaries_drops_function_words_and_plurals() {
        assert_eq!(terms("Who does Dana report to?"), ["dana", "report"]);
        assert_eq!(terms("The reports, queries and classes"), ["report", "query", "classe"]);
        assert_eq!(
            terms("error E0425 in my_crate::resolve (v3.14)"),
            ["error", "e0425", "my_crate", "resolve", "v3.14"]
        );
        assert_eq!(terms("status bus"), ["status", "bus"], "no s is cut after u or s");
    }

    #[test]
    fn chinese_becomes_characters_and_overlapping_pairs() {
        assert_eq!(terms("周报"), ["周", "周报", "报"]);
        assert_eq!(terms("写周报。猫"), ["写", "写周", "周", "周报", "报", "猫"], "punctuation ends a run");
        assert_eq!(terms("Rust代码"), ["rust", "代", "代码", "码"]);
        assert_eq!(terms("ＡＢＣ　１２３"), ["abc", "123"], "full-width forms fold to ASCII");
    }

    #[test]
    fn counts_round_trip_and_are_sorted() {
        let encoded = encode_counts(&["cat food, cat", "猫粮"]);
        assert_eq!(encoded, "cat:2 food:1 猫:1 猫粮:1 粮:1");
        let decoded: Vec<(&str, u32)> = decode_counts(&encoded).collect();
        assert_eq!(decoded, [("cat", 2), ("food", 1), ("猫", 1), ("猫粮", 1), ("粮", 1)]);
        assert_eq!(encode_counts(&["the a of"]), "", "function words alone have no terms");
        assert_eq!(decode_counts("a:1 bad x:y :2 c:3").collect::<Vec<_>>(), [("a", 1), ("c", 3)]);
    }

    #[test]
    fn the_text_is_cut_at_a_character_boundary() {
        let long = "猫".repeat(LEXICAL_MAX_BYTES);
        let encoded = encode_counts(&[&long, "tail"]);
        assert!(!encoded.contains("tail"), "nothing past the cut");
        assert!(encoded.contains(&format!("猫:{}", LEXICAL_MAX_BYTES / 3)));
    }

    #[test]
    fn weights_saturate_and_idf_favours_rare_terms() {
        assert!(idf(100, 1) > idf(100, 50));
        assert!(idf(100, 100) > 0.0);
        let w1 = weight(1.0, 1, 10, 10.0);
        assert!((w1 - 1.0).abs() < 1e-12, "one occurrence at average length weighs its idf");
        assert!(weight(1.0, 100, 10, 10.0) < K1 + 1.0);
        assert!(weight(1.0, 1, 5, 10.0) > weight(1.0, 1, 20, 10.0), "shorter records weigh more");
    }

    #[test]
    fn stopwords_are_sorted_for_binary_search() {
        assert!(STOPWORDS.windows(2).all(|w| w[0] < w[1]));
    }
}
