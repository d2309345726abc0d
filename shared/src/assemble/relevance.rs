//! The relevance cut: candidates that are not relevant are not injected.
//! Pure: candidates in, candidates out; no I/O, no clock.
//!
//! Two bars, both on semantic and hybrid scores (keyword scores have
//! another scale and are not cut):
//! - a floor relative to the best candidate: one that ranks more than
//!   [`RelevanceCut::gap`] below the best is left out, so a block holds
//!   what is close to the best match, not the best match and ten strangers;
//! - an absolute floor per embedder ([`RelevanceCut::floor`]), a gate:
//!   when even the best candidate scores below it, nothing the memory
//!   holds is about the query and the block is empty (candidates below it
//!   beside a best above it stay, within the gap: a long document's
//!   abstract scores low against a question about one of its paragraphs). Its default is calibrated for the
//!   embedded USE-m3 model ([`default_floor`]); other embedders have none
//!   unless configured.
//!
//! With a reranker ([`crate::llm::rerank`]) both give way to a third bar on
//! its scores, per candidate ([`RelevanceCut::each`]): its threshold.
//!
//! `stats.relevance` says what was cut and, for an empty block, why.

use serde::Serialize;

use super::candidate::Candidate;
use crate::index::SearchKind;

/// The default absolute floor of the embedder named `embedder_id`, if it
/// has one: calibrated for USE-m3 (`use-m3…`) on the evaluation sets'
/// unanswerable questions (`BENCHMARKS.md`), and kept by `use-m3+e5`, whose
/// fused scores are on USE-m3's scale (`embed::ensemble`); `None` for any
/// other (a hashed or remote embedder's scores have another spread).
#[must_use]
pub fn default_floor(embedder_id: &str) -> Option<f64> {
    embedder_id.starts_with("use-m3").then_some(USE_M3_FLOOR)
}

/// USE-m3's absolute floor on `(1 + cos) / 2` (and hybrid) scores.
pub const USE_M3_FLOOR: f64 = 0.60;

/// The two bars of one request.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RelevanceCut {
    /// Cut candidates whose rank score is more than this below the best's
    /// (`None`: no relative cut).
    pub gap: Option<f64>,
    /// Cut every candidate when the best one scores below this (`None`:
    /// no absolute bar).
    pub floor: Option<f64>,
    /// Cut each candidate scoring at or below this (a reranker's
    /// threshold, on its scores; `None`: no such bar).
    pub each: Option<f64>,
}

impl RelevanceCut {
    /// The cut a search of `kind` gets: both bars on semantic and hybrid
    /// scores, none on keyword scores.
    #[must_use]
    pub fn for_kind(kind: SearchKind, gap: Option<f64>, floor: Option<f64>) -> Self {
        match kind {
            SearchKind::Keywords => Self::default(),
            SearchKind::Semantic | SearchKind::Hybrid => Self { gap, floor, each: None },
        }
    }

    /// The cut of reranked candidates: the reranker's `threshold` on each.
    #[must_use]
    pub fn reranked(threshold: f64) -> Self {
        Self { gap: None, floor: None, each: Some(threshold) }
    }
}

/// What the cut did, as `stats.relevance`.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct CutStats {
    /// The relative bar applied (`null`: none).
    pub gap: Option<f64>,
    /// The absolute bar applied (`null`: none).
    pub floor: Option<f64>,
    /// The reranker's threshold applied to each candidate (only then).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
    /// The best candidate's score before the cut (`null`: no candidates).
    pub best: Option<f64>,
    /// Candidates cut.
    pub cut: usize,
    /// Why the block is empty, when the cut left nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub empty: Option<String>,
}

/// Applies `cut` to `candidates` (best first), keeping their order.
#[must_use]
pub fn apply(candidates: Vec<Candidate>, cut: &RelevanceCut) -> (Vec<Candidate>, CutStats) {
    let best_rank = candidates.iter().map(|c| c.rank_score).fold(f64::NEG_INFINITY, f64::max);
    let best = candidates.iter().map(|c| c.score).fold(None, |m: Option<f64>, s| Some(m.map_or(s, |m| m.max(s))));
    let before = candidates.len();
    // The floor is a gate: when even the best candidate is below it,
    // nothing is relevant; otherwise the gap alone decides.
    let gated = matches!((best, cut.floor), (Some(best), Some(floor)) if best < floor);
    let kept: Vec<Candidate> = if gated {
        Vec::new()
    } else {
        candidates
            .into_iter()
            .filter(|c| cut.gap.is_none_or(|gap| c.rank_score >= best_rank - gap))
            .filter(|c| cut.each.is_none_or(|threshold| c.score > threshold))
            .collect()
    };
    let empty = match (kept.is_empty(), best, cut.floor, cut.each) {
        (true, Some(best), Some(floor), _) => Some(format!(
            "nothing relevant: the best match scored {best:.2}, below the relevance floor {floor:.2}; find lists \
             every match"
        )),
        (true, Some(best), None, Some(threshold)) => Some(format!(
            "nothing relevant: the reranker scored the best match {best:.2}, not above its threshold \
             {threshold:.2}; find lists every match"
        )),
        _ => None,
    };
    let stats = CutStats { gap: cut.gap, floor: cut.floor, threshold: cut.each, best, cut: before - kept.len(), empty };
    (kept, stats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assemble::candidate::event as cand;

    fn names(cs: &[Candidate]) -> Vec<String> {
        cs.iter().map(|c| c.abstract_text.clone()).collect()
    }

    #[test]
    fn the_cut_keeps_what_is_close_to_a_best_above_the_floor() {
        let cut = RelevanceCut { gap: Some(0.1), floor: Some(0.62), each: None };
        // (name, score, rank score); the other peer's hit is ranked lower.
        // (what, candidates as (name, score, rank score), kept, cut)
        type Case = (&'static str, Vec<(&'static str, f64, f64)>, Vec<&'static str>, usize);
        let table: [Case; 5] = [
            (
                "a cat question: the cat memories, then strangers",
                vec![
                    ("cat-food", 0.70, 0.70),
                    ("cat-vet", 0.67, 0.67),
                    ("kyoto", 0.59, 0.59),
                    ("marathon", 0.55, 0.55),
                ],
                vec!["cat-food", "cat-vet"],
                2,
            ),
            (
                "close scores stay, below the floor too when the best is above it",
                vec![("a", 0.70, 0.70), ("b", 0.68, 0.68), ("c", 0.66, 0.66), ("d", 0.61, 0.61)],
                vec!["a", "b", "c", "d"],
                0,
            ),
            (
                "the floor gates on the best, it is no bar for each",
                vec![("a", 0.68, 0.68), ("b", 0.60, 0.60)],
                vec!["a", "b"],
                0,
            ),
            (
                "the gap is on rank scores: a penalised peer hit falls out",
                vec![("own", 0.75, 0.75), ("peer", 0.74, 0.64)],
                vec!["own"],
                1,
            ),
            ("nothing relevant: below the floor", vec![("a", 0.60, 0.60), ("b", 0.58, 0.58)], vec![], 2),
        ];
        for (what, given, kept, cut_count) in table {
            let cs: Vec<Candidate> = given.iter().map(|(n, s, r)| cand(n, *s, *r)).collect();
            let (out, stats) = apply(cs, &cut);
            assert_eq!(names(&out), kept, "{what}");
            assert_eq!(stats.cut, cut_count, "{what}");
            assert_eq!(stats.empty.is_some(), kept.is_empty(), "{what}: {stats:?}");
        }
    }

    #[test]
    fn an_empty_block_says_why_and_no_bars_cut_nothing() {
        let (out, stats) =
            apply(vec![cand("a", 0.58, 0.58)], &RelevanceCut { gap: None, floor: Some(0.62), each: None });
        assert!(out.is_empty());
        let why = stats.empty.expect("a reason");
        assert!(why.contains("0.58") && why.contains("0.62"), "{why}");
        let cs = vec![cand("a", 0.9, 0.9), cand("b", 0.2, 0.2)];
        let (out, stats) = apply(cs, &RelevanceCut::default());
        assert_eq!((out.len(), stats.cut, stats.empty), (2, 0, None));
        let (out, stats) = apply(Vec::new(), &RelevanceCut { gap: Some(0.1), floor: Some(0.62), each: None });
        assert_eq!((out.len(), stats.best, stats.empty), (0, None, None), "no candidates: nothing to explain");
    }

    #[test]
    fn a_reranker_cuts_each_candidate_at_its_threshold_and_nothing_else() {
        let cut = RelevanceCut::reranked(0.1);
        // A wide spread the embedder's gap would thin: the reranker's bar
        // alone decides, strictly above it.
        let cs = vec![cand("a", 0.98, 0.98), cand("b", 0.40, 0.40), cand("c", 0.1, 0.1), cand("d", 0.02, 0.02)];
        let (out, stats) = apply(cs, &cut);
        assert_eq!(names(&out), ["a", "b"]);
        assert_eq!((stats.cut, stats.threshold, stats.gap, stats.floor), (2, Some(0.1), None, None));
        let (out, stats) = apply(vec![cand("a", 0.05, 0.05)], &cut);
        assert!(out.is_empty());
        let why = stats.empty.expect("a reason");
        assert!(why.contains("reranker") && why.contains("0.05") && why.contains("0.10"), "{why}");
    }

    #[test]
    fn keyword_scores_are_not_cut() {
        assert_eq!(RelevanceCut::for_kind(SearchKind::Keywords, Some(0.1), Some(0.62)), RelevanceCut::default());
        let hybrid = RelevanceCut::for_kind(SearchKind::Hybrid, Some(0.1), Some(0.62));
        assert_eq!((hybrid.gap, hybrid.floor), (Some(0.1), Some(0.62)));
        assert_eq!(default_floor("use-m3-v3/512"), Some(USE_M3_FLOOR));
        assert_eq!(default_floor("hashed-ngram-v1/256"), None);
    }
}
