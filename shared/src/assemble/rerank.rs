//! The rerank stage of context mode: with a reranker configured
//! (`rerank`), the gathered candidates are scored by it, reordered by its
//! scores, and cut at its threshold ([`super::relevance::RelevanceCut::reranked`])
//! instead of the embedder's bars. The call is bounded by the time the
//! request's deadline leaves; when it fails or runs out, the candidates
//! keep the search's scores and bars, and `stats.rerank` says why.
//!
//! [`apply`] is pure; [`rerank`] makes the one call.

use std::time::Duration;

use serde::Serialize;

use super::candidate::Candidate;
use crate::llm::rerank::{MAX_DOCUMENTS, Reranker};

/// What the stage did, as `stats.rerank` (present only when a reranker is
/// configured).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RerankStats {
    /// The reranker (`rerank:{model}`).
    pub model: String,
    /// `ok`, `failed`, `timeout`, or `skipped` (no time left, or nothing
    /// to score).
    pub status: &'static str,
    /// Candidates scored (the best [`MAX_DOCUMENTS`] at most).
    pub scored: usize,
    /// The threshold a scored candidate must pass.
    pub threshold: f64,
    /// Why it failed or timed out (only then).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl RerankStats {
    /// Whether the candidates carry the reranker's scores.
    #[must_use]
    pub fn applied(&self) -> bool {
        self.status == "ok"
    }
}

/// Scores `candidates` (best first) against `query` with `reranker` within
/// `within`, and on success [`apply`]s the scores. `None` for `within`
/// skips the call.
///
/// Cost: one HTTP call carrying the best [`MAX_DOCUMENTS`] candidates'
/// abstracts; none when skipped or when there are no candidates.
pub async fn rerank(
    reranker: &Reranker,
    query: &str,
    candidates: &mut Vec<Candidate>,
    within: Option<Duration>,
    threshold: f64,
) -> RerankStats {
    let mut stats =
        RerankStats { model: reranker.id().to_owned(), status: "skipped", scored: 0, threshold, error: None };
    let Some(within) = within.filter(|_| !candidates.is_empty()) else { return stats };
    let documents: Vec<&str> = candidates.iter().take(MAX_DOCUMENTS).map(|c| c.abstract_text.as_str()).collect();
    match tokio::time::timeout(within, reranker.scores(query, &documents)).await {
        Ok(Ok(scores)) => {
            stats.scored = scores.len();
            stats.status = "ok";
            apply(candidates, &scores);
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "rerank failed; the block keeps the search's order");
            stats.status = "failed";
            stats.error = Some(e.to_string());
        }
        Err(_) => {
            tracing::warn!(within_ms = within.as_millis(), "rerank timed out; the block keeps the search's order");
            stats.status = "timeout";
            stats.error = Some(format!("no answer within {} ms", within.as_millis()));
        }
    }
    stats
}

/// Gives the first `scores.len()` candidates the reranker's scores, leaves
/// out the rest (they ranked below every scored one), and sorts them best
/// first (ties keep the search's order). A candidate ranked below its
/// score (another peer's hit, penalised) stays as far below its new score,
/// in proportion. Pure.
pub fn apply(candidates: &mut Vec<Candidate>, scores: &[f64]) {
    candidates.truncate(scores.len());
    for (candidate, &score) in candidates.iter_mut().zip(scores) {
        let kept = if candidate.score > 0.0 { (candidate.rank_score / candidate.score).clamp(0.0, 1.0) } else { 1.0 };
        candidate.score = score;
        // Lower either way: a share of a positive score, more below a negative one.
        candidate.rank_score = if score >= 0.0 { score * kept } else { score * (2.0 - kept) };
    }
    candidates.sort_by(|a, b| b.rank_score.total_cmp(&a.rank_score));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assemble::candidate::event as cand;

    fn order(cs: &[Candidate]) -> Vec<(&str, f64)> {
        cs.iter().map(|c| (c.abstract_text.as_str(), c.score)).collect()
    }

    #[test]
    fn the_rerankers_scores_reorder_the_candidates_and_the_unscored_leave() {
        // (what, candidates as (name, score, rank score), reranker scores, order after)
        type Case = (&'static str, Vec<(&'static str, f64, f64)>, Vec<f64>, Vec<(&'static str, f64)>);
        let table: [Case; 4] = [
            (
                "the answer ranked third comes first",
                vec![("kyoto", 0.70, 0.70), ("marathon", 0.69, 0.69), ("cat-food", 0.66, 0.66)],
                vec![0.02, 0.01, 0.97],
                vec![("cat-food", 0.97), ("kyoto", 0.02), ("marathon", 0.01)],
            ),
            (
                "only the scored ones stay",
                vec![("a", 0.7, 0.7), ("b", 0.6, 0.6), ("c", 0.5, 0.5)],
                vec![0.3, 0.9],
                vec![("b", 0.9), ("a", 0.3)],
            ),
            (
                "ties keep the search's order",
                vec![("a", 0.7, 0.7), ("b", 0.6, 0.6)],
                vec![0.5, 0.5],
                vec![("a", 0.5), ("b", 0.5)],
            ),
            (
                "a penalised peer hit stays below an equal own one, logits too",
                vec![("peer", 0.8, 0.4), ("own", 0.7, 0.7), ("peer-neg", 0.8, 0.4), ("own-neg", 0.7, 0.7)],
                vec![2.0, 2.0, -1.0, -1.0],
                vec![("own", 2.0), ("peer", 2.0), ("own-neg", -1.0), ("peer-neg", -1.0)],
            ),
        ];
        for (what, given, scores, want) in table {
            let mut cs: Vec<Candidate> = given.iter().map(|(n, s, r)| cand(n, *s, *r)).collect();
            apply(&mut cs, &scores);
            assert_eq!(order(&cs), want, "{what}");
        }
    }
}
