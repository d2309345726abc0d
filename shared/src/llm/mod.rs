//! Chat models for the two optional LLM stages: query
//! expansion ([`expansion`]) and the digest rewrite ([`rewrite`]); and the
//! optional reranker ([`rerank`]), a scoring model rather than a chat one.
//!
//! Providers sit behind one trait, [`ChatModel`]: an OpenAI-compatible
//! chat-completions client ([`openai`]) and Amazon Bedrock Converse
//! ([`bedrock`], feature `bedrock`). [`Models`] holds the configured main
//! model and the optional query planner and builds each client on its first
//! call, so a request that needs no model never pays for one. Timeouts are
//! the caller's: a stage wraps [`ChatModel::complete`] in its budget.

use std::fmt;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use serde::Serialize;

pub use crate::config::ModelConfig;

pub mod archive;
#[cfg(feature = "bedrock")]
pub mod bedrock;
pub mod expansion;
pub mod openai;
pub mod rerank;
pub mod rewrite;

/// One completion request: a system text, a user text, and how much to
/// generate. Temperature is always 0.
#[derive(Debug, Clone, Copy)]
pub struct ChatRequest<'a> {
    /// The instructions.
    pub system: &'a str,
    /// The material and the question.
    pub user: &'a str,
    /// Ask for a JSON object (OpenAI `response_format`; Bedrock has no
    /// switch and relies on the instructions).
    pub json: bool,
    /// Most tokens to generate.
    pub max_tokens: u32,
}

/// Token usage as the provider reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// Prompt (input) tokens.
    pub prompt_tokens: u64,
    /// Completion (output) tokens.
    pub completion_tokens: u64,
}

/// A model's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// The generated text.
    pub text: String,
    /// Usage, when the provider sent it.
    pub usage: Option<Usage>,
}

/// What a model call failed with. Messages never carry credentials.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// The model is not usable as configured (missing key, feature not
    /// built, client could not be created).
    #[error("model {model}: {message}")]
    Config {
        /// The model's id.
        model: String,
        /// What is missing.
        message: String,
    },
    /// The request did not complete (connection refused, reset, TLS).
    #[error("model {model}: request failed: {message}")]
    Transport {
        /// The model's id.
        model: String,
        /// The transport error.
        message: String,
    },
    /// The provider answered with an error status.
    #[error("model {model}: HTTP {status}: {message}")]
    Status {
        /// The model's id.
        model: String,
        /// The HTTP status.
        status: u16,
        /// The start of the provider's error body.
        message: String,
    },
    /// The answer could not be decoded.
    #[error("model {model}: malformed answer: {message}")]
    Malformed {
        /// The model's id.
        model: String,
        /// What was wrong.
        message: String,
    },
}

/// A chat model. Implementations are cheap to construct and connect on
/// first use.
#[async_trait]
pub trait ChatModel: Send + Sync + fmt::Debug {
    /// `provider:model`, for logs and errors.
    fn id(&self) -> &str;

    /// One completion. No timeout of its own beyond a connect timeout: the
    /// caller bounds it.
    ///
    /// # Errors
    /// [`LlmError`] for transport failures, error statuses and malformed
    /// answers.
    async fn complete(&self, request: &ChatRequest<'_>) -> Result<Completion, LlmError>;
}

/// The client for `config`. Cheap: nothing connects, no TLS, no
/// credential lookup until the first call. An OpenAI-compatible model's
/// key is the one resolved at init from its `api_key_secret`, else the
/// environment variable `api_key_env` read on the first call.
#[must_use]
pub fn client(config: &ModelConfig) -> Arc<dyn ChatModel> {
    match config {
        ModelConfig::Openai { base_url, model, api_key_env, api_key_secret, api_key } => {
            let key = openai::ApiKey::of(api_key.as_ref(), api_key_secret.as_ref(), api_key_env);
            Arc::new(openai::OpenAiChat::new(base_url, model, key))
        }
        #[cfg(feature = "bedrock")]
        ModelConfig::Bedrock { model_id, region, endpoint_url } => {
            Arc::new(bedrock::BedrockChat::new(model_id, region.clone(), endpoint_url.clone()))
        }
        #[cfg(not(feature = "bedrock"))]
        ModelConfig::Bedrock { .. } => Arc::new(Unbuilt { id: config.id() }),
    }
}

/// A configured provider this binary was built without: every call fails
/// with [`LlmError::Config`].
#[cfg(not(feature = "bedrock"))]
#[derive(Debug)]
struct Unbuilt {
    id: String,
}

#[cfg(not(feature = "bedrock"))]
#[async_trait]
impl ChatModel for Unbuilt {
    fn id(&self) -> &str {
        &self.id
    }

    async fn complete(&self, _request: &ChatRequest<'_>) -> Result<Completion, LlmError> {
        Err(LlmError::Config { model: self.id.clone(), message: "this build has no Bedrock client".into() })
    }
}

/// The process's models: the main one (`llm`) and the query planner
/// (`query_planner`, falling back to the main one). Both LLM stages —
/// query expansion and the digest rewrite — use the query planner when one
/// is configured, else the main model; its client is built on first use.
#[derive(Debug, Default)]
pub struct Models {
    /// The stages' model settings: the query planner, else the main model.
    config: Option<ModelConfig>,
    /// Whether a query planner is configured (`rewrite: "auto"`).
    dedicated: bool,
    client: OnceLock<Option<Arc<dyn ChatModel>>>,
    /// Memory extraction's model settings: the `extraction` model, else
    /// the main one.
    extraction: Option<ModelConfig>,
    extraction_client: OnceLock<Option<Arc<dyn ChatModel>>>,
}

impl Models {
    /// The models for these settings (no client is built here).
    #[must_use]
    pub fn new(main: Option<ModelConfig>, planner: Option<ModelConfig>) -> Self {
        Self {
            dedicated: planner.is_some(),
            extraction: main.clone(),
            config: planner.or(main),
            client: OnceLock::new(),
            extraction_client: OnceLock::new(),
        }
    }

    /// These models with memory extraction on `extraction` when given
    /// (else it stays on the main model).
    #[must_use]
    pub fn with_extraction(mut self, extraction: Option<ModelConfig>) -> Self {
        if extraction.is_some() {
            self.extraction = extraction;
        }
        self
    }

    /// Models over a ready client (tests, tools) that serves both stages;
    /// `dedicated` says whether `rewrite: "auto"` engages.
    #[must_use]
    pub fn with_client(client: Arc<dyn ChatModel>, dedicated: bool) -> Self {
        Self {
            config: None,
            dedicated,
            extraction: None,
            extraction_client: OnceLock::from(Some(client.clone())),
            client: OnceLock::from(Some(client)),
        }
    }

    /// Whether any model is configured (else both stages are `off`).
    #[must_use]
    pub fn any(&self) -> bool {
        self.config.is_some() || matches!(self.client.get(), Some(Some(_)))
    }

    /// Whether a query planner (`query_planner`) is configured: what
    /// `rewrite: "auto"` needs.
    #[must_use]
    pub fn has_query_planner(&self) -> bool {
        self.dedicated
    }

    /// The client the LLM stages call (the query planner, else the main
    /// model), built on the first call; `None` when neither is configured.
    #[must_use]
    pub fn stage_model(&self) -> Option<Arc<dyn ChatModel>> {
        self.client.get_or_init(|| self.config.as_ref().map(client)).clone()
    }

    /// The client memory extraction calls (the `extraction` model, else
    /// the main one), built on the first call; `None` when neither is
    /// configured: commits then keep episodes only.
    #[must_use]
    pub fn extraction_model(&self) -> Option<Arc<dyn ChatModel>> {
        self.extraction_client.get_or_init(|| self.extraction.as_ref().map(client)).clone()
    }
}

/// The characters of the user's query a prompt carries: 2000 (about 500
/// tokens). The request keeps up to 4096 (the search reads them); a
/// prompt needs the query's gist next to the session and the fragments,
/// and a pasted log would otherwise crowd them out and slow the stage
/// that runs under the tightest deadline. A longer query is cut, never
/// refused: see [`prompt_query`].
pub const PROMPT_QUERY_CHARS: usize = 2000;

/// `query` as a prompt carries it: as sent when it has at most
/// [`PROMPT_QUERY_CHARS`] characters, else cut there (at a character
/// boundary) and marked `…(cut)` on a line of its own.
#[must_use]
pub fn prompt_query(query: &str) -> std::borrow::Cow<'_, str> {
    let cut = cut_chars(query, PROMPT_QUERY_CHARS);
    if cut.len() == query.len() { cut.into() } else { format!("{cut}\n…(cut)").into() }
}

/// Cuts `text` to at most `max` characters (not bytes), on a character
/// boundary.
#[must_use]
pub fn cut_chars(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stages_fall_back_to_the_main_model_and_auto_needs_a_query_planner() {
        let main = ModelConfig::Openai {
            base_url: "http://x/v1".into(),
            model: "big".into(),
            api_key_env: "K".into(),
            api_key_secret: None,
            api_key: None,
        };
        let small = ModelConfig::Bedrock { model_id: "anthropic.haiku".into(), region: None, endpoint_url: None };
        let none = Models::new(None, None);
        assert!(!none.any() && none.stage_model().is_none());
        let only_main = Models::new(Some(main.clone()), None);
        assert!(only_main.any() && !only_main.has_query_planner());
        assert_eq!(only_main.stage_model().map(|m| m.id().to_owned()).as_deref(), Some("openai:big"));
        let both = Models::new(Some(main), Some(small));
        assert!(both.has_query_planner());
        assert_eq!(both.stage_model().map(|m| m.id().to_owned()).as_deref(), Some("bedrock:anthropic.haiku"));
        let ready: Arc<dyn ChatModel> = Arc::new(openai::OpenAiChat::new("http://x/v1", "m", openai::ApiKey::None));
        let given = Models::with_client(ready, false);
        assert!(given.any() && !given.has_query_planner());
        assert_eq!(given.stage_model().map(|m| m.id().to_owned()).as_deref(), Some("openai:m"));
    }

    #[test]
    fn a_prompt_carries_at_most_the_bounded_query_and_says_it_was_cut() {
        assert_eq!(prompt_query("  what now?\n"), "  what now?\n");
        let exact = "年".repeat(PROMPT_QUERY_CHARS);
        assert_eq!(prompt_query(&exact), exact.as_str());
        let long = format!("{exact}糕 and more");
        assert_eq!(prompt_query(&long), format!("{exact}\n…(cut)"));
    }

    #[test]
    fn cut_chars_counts_characters() {
        assert_eq!(cut_chars("héllo", 2), "hé");
        assert_eq!(cut_chars("记忆很好", 3), "记忆很");
        assert_eq!(cut_chars("ab", 5), "ab");
    }
}
