//! An OpenAI-compatible `/v1/embeddings` client (OpenAI, Volcengine Ark,
//! vLLM, Ollama, LiteLLM, …). The HTTP client is built on first use, so a
//! process that never embeds pays nothing for it.

use std::sync::OnceLock;
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;

use super::{EmbedError, Embedder, l2_normalise};

/// Texts sent per request.
const BATCH: usize = 64;

/// Settings of an OpenAI-compatible embedder.
#[derive(Debug, Clone)]
pub struct OpenAiEmbedderConfig {
    /// Base URL up to and including `/v1` (e.g. `https://api.openai.com/v1`).
    pub base_url: String,
    /// Model name sent as `model`.
    pub model: String,
    /// Expected dimension; sent as `dimensions` when `send_dimensions` is set.
    pub dimension: usize,
    /// Whether to send `dimensions` (models that support shortening).
    pub send_dimensions: bool,
    /// API key (sent as a bearer token when present).
    pub api_key: Option<String>,
    /// Per-request timeout. Default 30 s.
    pub timeout: Duration,
}

/// The client. Cheap to construct: no connection or TLS setup until the
/// first [`Embedder::embed`].
#[derive(Debug)]
pub struct OpenAiEmbedder {
    id: String,
    config: OpenAiEmbedderConfig,
    client: OnceLock<reqwest::Client>,
}

impl OpenAiEmbedder {
    /// A client for `config`; id `openai:{model}/{dimension}`.
    #[must_use]
    pub fn new(config: OpenAiEmbedderConfig) -> Self {
        Self { id: format!("openai:{}/{}", config.model, config.dimension), config, client: OnceLock::new() }
    }

    fn client(&self) -> Result<&reqwest::Client, EmbedError> {
        if let Some(client) = self.client.get() {
            return Ok(client);
        }
        let client = reqwest::Client::builder()
            .timeout(self.config.timeout)
            .build()
            .map_err(|e| EmbedError::Config(format!("cannot build http client: {e}")))?;
        Ok(self.client.get_or_init(|| client))
    }

    fn fail(&self, message: String) -> EmbedError {
        EmbedError::Provider { provider: self.id.clone(), message }
    }

    async fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        #[derive(Deserialize)]
        struct Item {
            index: usize,
            embedding: Vec<f32>,
        }
        #[derive(Deserialize)]
        struct Reply {
            data: Vec<Item>,
        }
        let url = format!("{}/embeddings", self.config.base_url.trim_end_matches('/'));
        let mut body = serde_json::json!({ "model": self.config.model, "input": texts });
        if self.config.send_dimensions {
            body["dimensions"] = self.config.dimension.into();
        }
        let mut request = self.client()?.post(&url).json(&body);
        if let Some(key) = &self.config.api_key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.map_err(|e| self.fail(format!("POST {url}: {e}")))?;
        let status = response.status();
        if !status.is_success() {
            let text = response.text().await.unwrap_or_default();
            let snippet: String = text.chars().take(300).collect();
            return Err(self.fail(format!("POST {url}: HTTP {status}: {snippet}")));
        }
        let reply: Reply = response.json().await.map_err(|e| self.fail(format!("bad reply from {url}: {e}")))?;
        if reply.data.len() != texts.len() {
            return Err(EmbedError::Shape { provider: self.id.clone(), want: texts.len(), got: reply.data.len() });
        }
        let mut out = vec![Vec::new(); texts.len()];
        for item in reply.data {
            if item.embedding.len() != self.config.dimension {
                return Err(EmbedError::Shape {
                    provider: self.id.clone(),
                    want: self.config.dimension,
                    got: item.embedding.len(),
                });
            }
            let Some(slot) = out.get_mut(item.index) else {
                return Err(self.fail(format!("reply index {} out of range", item.index)));
            };
            *slot = item.embedding;
            l2_normalise(slot);
        }
        if out.iter().any(Vec::is_empty) {
            return Err(self.fail("reply is missing an index".to_owned()));
        }
        Ok(out)
    }
}

#[async_trait]
impl Embedder for OpenAiEmbedder {
    fn id(&self) -> &str {
        &self.id
    }

    fn dimension(&self) -> usize {
        self.config.dimension
    }

    async fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut out = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(BATCH) {
            // Providers reject empty strings; a single space embeds the same "nothing".
            let chunk: Vec<&str> = chunk.iter().map(|t| if t.trim().is_empty() { " " } else { *t }).collect();
            out.extend(self.embed_batch(&chunk).await?);
        }
        Ok(out)
    }
}
