//! The reranker: a second model that scores how well each candidate
//! answers the query, so context mode injects what answers it and leaves
//! out what only resembles it. Configured as `rerank` (an OpenAI-style
//! service, see [`crate::config::Config::rerank`]); without one nothing
//! here runs.
//!
//! The wire is the rerank API Cohere defined, which Jina, Voyage, vLLM,
//! llama.cpp's server, Hugging Face TEI and LiteLLM also serve:
//! `POST {base_url}/rerank` with `{"model", "query", "documents",
//! "top_n"}`, answered by `{"results": [{"index", "relevance_score"}]}`
//! (Voyage's `data`, TEI's bare array and a `score` field are read too).
//! The HTTP client is built on the first call; the caller bounds the call's
//! time.

use serde::Deserialize;
use serde_json::json;

use super::LlmError;
use super::openai::{ApiKey, Connection};
use crate::config::ModelConfig;

/// Documents sent in one call at most: the best-ranked candidates; the
/// rest are not scored (context mode leaves them out: they ranked below
/// every scored one).
pub const MAX_DOCUMENTS: usize = 64;

/// Characters of a document sent at most (a long passage is cut: its start
/// says what it is about, and rerankers read ~512 tokens).
pub const MAX_DOCUMENT_CHARS: usize = 2_000;

/// A reranker client. Cheap to construct; connects on the first call.
#[derive(Debug)]
pub struct Reranker {
    id: String,
    url: String,
    model: String,
    /// Why every call fails (a provider with no rerank API), if it does.
    unusable: Option<String>,
    connection: Connection,
}

impl Reranker {
    /// A client for `model` at `base_url` (up to and including `/v1`; the
    /// client posts to `{base_url}/rerank`).
    #[must_use]
    pub fn new(base_url: &str, model: &str, key: ApiKey) -> Self {
        Self {
            id: format!("rerank:{model}"),
            url: format!("{}/rerank", base_url.trim_end_matches('/')),
            model: model.to_owned(),
            unusable: None,
            connection: Connection::new(key),
        }
    }

    /// The client `config` describes. Only the `openai` provider has a
    /// rerank API here: for another, every call fails with
    /// [`LlmError::Config`] (the configuration check refuses it first).
    #[must_use]
    pub fn from_config(config: &ModelConfig) -> Self {
        match config {
            ModelConfig::Openai { base_url, model, api_key_env, api_key_secret, api_key } => {
                Self::new(base_url, model, ApiKey::of(api_key.as_ref(), api_key_secret.as_ref(), api_key_env))
            }
            ModelConfig::Bedrock { model_id, .. } => Self {
                unusable: Some("rerank.provider must be openai (a /rerank API); bedrock has none here".into()),
                ..Self::new("", model_id, ApiKey::None)
            },
        }
    }

    /// `rerank:{model}`, for logs, errors and `stats.rerank.model`.
    #[must_use]
    pub fn id(&self) -> &str {
        &self.id
    }

    /// One score per document, in the documents' order (higher is more
    /// relevant; the scale is the model's). Each document is cut to
    /// [`MAX_DOCUMENT_CHARS`]. No timeout of its own beyond the connect
    /// timeout: the caller bounds it.
    ///
    /// # Errors
    /// [`LlmError`] for a transport failure, an error status, or an answer
    /// that does not score every document exactly once with a finite
    /// number.
    pub async fn scores(&self, query: &str, documents: &[&str]) -> Result<Vec<f64>, LlmError> {
        if let Some(message) = &self.unusable {
            return Err(LlmError::Config { model: self.id.clone(), message: message.clone() });
        }
        if documents.is_empty() {
            return Ok(Vec::new());
        }
        let cut: Vec<&str> = documents.iter().map(|d| prefix(d, MAX_DOCUMENT_CHARS)).collect();
        let body = json!({"model": self.model, "query": query, "documents": cut, "top_n": cut.len()});
        let (status, text) = self.connection.post_json(&self.id, &self.url, &body).await?;
        if !status.is_success() {
            let message: String = text.chars().take(300).collect();
            return Err(LlmError::Status { model: self.id.clone(), status: status.as_u16(), message });
        }
        let malformed = |message: String| LlmError::Malformed { model: self.id.clone(), message };
        let answer: Answer = serde_json::from_str(&text).map_err(|e| malformed(e.to_string()))?;
        in_order(documents.len(), answer.items()).map_err(malformed)
    }
}

/// The first `max` characters of `text` (all of it when shorter).
fn prefix(text: &str, max: usize) -> &str {
    text.char_indices().nth(max).map_or(text, |(at, _)| &text[..at])
}

/// A rerank answer in any of the shapes servers send.
#[derive(Deserialize)]
#[serde(untagged)]
enum Answer {
    /// Cohere, Jina, vLLM, llama.cpp, LiteLLM: `{"results": [...]}`;
    /// Voyage: `{"data": [...]}`.
    Wrapped {
        #[serde(default, alias = "data")]
        results: Vec<Scored>,
    },
    /// Hugging Face TEI: a bare array.
    Bare(Vec<Scored>),
}

impl Answer {
    fn items(self) -> Vec<Scored> {
        match self {
            Self::Wrapped { results } | Self::Bare(results) => results,
        }
    }
}

/// One scored document.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct Scored {
    /// The document's position in the request.
    pub index: usize,
    /// Its score (`relevance_score`, or `score`).
    #[serde(alias = "score")]
    pub relevance_score: f64,
}

/// The scores of documents `0..n` in their order, from `items` in any
/// order. Pure.
///
/// # Errors
/// A message naming what is wrong: an index out of range or repeated, a
/// score that is not finite, or a document left unscored.
pub fn in_order(n: usize, items: Vec<Scored>) -> Result<Vec<f64>, String> {
    let mut scores: Vec<Option<f64>> = vec![None; n];
    for item in items {
        let slot =
            scores.get_mut(item.index).ok_or_else(|| format!("index {} is not one of {n} documents", item.index))?;
        if slot.is_some() {
            return Err(format!("document {} is scored twice", item.index));
        }
        if !item.relevance_score.is_finite() {
            return Err(format!("document {} has no finite score", item.index));
        }
        *slot = Some(item.relevance_score);
    }
    let scored = scores.iter().filter(|s| s.is_some()).count();
    if scored < n {
        return Err(format!("the answer scores {scored} of {n} documents"));
    }
    Ok(scores.into_iter().flatten().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scored(pairs: &[(usize, f64)]) -> Vec<Scored> {
        pairs.iter().map(|&(index, relevance_score)| Scored { index, relevance_score }).collect()
    }

    #[test]
    fn scores_come_back_in_the_documents_order_or_the_answer_is_refused() {
        // (what, n, answer, scores or the error's words)
        type Case = (&'static str, usize, Vec<Scored>, Result<Vec<f64>, &'static str>);
        let table: [Case; 6] = [
            ("best first, as servers sort", 3, scored(&[(2, 0.9), (0, 0.5), (1, 0.1)]), Ok(vec![0.5, 0.1, 0.9])),
            ("raw logits may be negative", 2, scored(&[(0, -3.5), (1, 2.0)]), Ok(vec![-3.5, 2.0])),
            ("a document left out", 3, scored(&[(0, 0.9), (1, 0.1)]), Err("scores 2 of 3")),
            ("an index out of range", 2, scored(&[(0, 0.9), (2, 0.1)]), Err("index 2 is not one of 2")),
            ("one scored twice", 2, scored(&[(0, 0.9), (0, 0.1)]), Err("scored twice")),
            ("not a number", 1, scored(&[(0, f64::NAN)]), Err("no finite score")),
        ];
        for (what, n, items, want) in table {
            match (in_order(n, items), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{what}"),
                (Err(got), Err(words)) => assert!(got.contains(words), "{what}: {got}"),
                (got, want) => panic!("{what}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn every_servers_shape_is_read() {
        for (what, body) in [
            ("cohere", r#"{"id":"x","results":[{"index":1,"relevance_score":0.8},{"index":0,"relevance_score":0.2}]}"#),
            ("voyage", r#"{"data":[{"index":1,"relevance_score":0.8},{"index":0,"relevance_score":0.2}]}"#),
            ("tei", r#"[{"index":1,"score":0.8},{"index":0,"score":0.2}]"#),
        ] {
            let answer: Answer = serde_json::from_str(body).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(in_order(2, answer.items()), Ok(vec![0.2, 0.8]), "{what}");
        }
    }

    #[test]
    fn a_long_document_is_cut_on_a_character_boundary() {
        assert_eq!(prefix("猫が好き", 2), "猫が");
        assert_eq!(prefix("cat", 10), "cat");
    }
}
