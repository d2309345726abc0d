//! An OpenAI-compatible chat-completions client (`POST {base}/chat/completions`).
//! The HTTP client (reqwest with rustls) is built on the first call.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use reqwest::StatusCode;
use serde::Deserialize;
use serde_json::json;

use super::{ChatModel, ChatRequest, Completion, LlmError, Usage};

/// How long a connection may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the API key comes from.
#[derive(Debug, Clone)]
pub enum ApiKey {
    /// Read from this environment variable when the client is first used.
    Env(String),
    /// Resolved at init (from a secret, see
    /// [`crate::config::ModelConfig::Openai`]'s `api_key_secret`).
    Value(crate::config::Secret),
    /// A secret this binary did not resolve (built without the feature
    /// `secrets`): every call fails with [`LlmError::Config`] naming the
    /// secret, rather than sending no key.
    Unresolved(String),
    /// No key (local servers).
    None,
}

/// The client. Cheap to construct.
#[derive(Debug)]
pub struct OpenAiChat {
    id: String,
    url: String,
    model: String,
    connection: Connection,
    /// Set once the server refused `response_format`: JSON is then asked
    /// for by the instructions alone.
    no_json_mode: AtomicBool,
}

impl OpenAiChat {
    /// A client for `model` at `base_url` (up to and including `/v1`).
    #[must_use]
    pub fn new(base_url: &str, model: &str, key: ApiKey) -> Self {
        Self {
            id: format!("openai:{model}"),
            url: format!("{}/chat/completions", base_url.trim_end_matches('/')),
            model: model.to_owned(),
            connection: Connection::new(key),
            no_json_mode: AtomicBool::new(false),
        }
    }

    /// One POST of `request` (with `response_format` when `json_mode`):
    /// the status and the body text.
    async fn post(&self, request: &ChatRequest<'_>, json_mode: bool) -> Result<(StatusCode, String), LlmError> {
        let mut body = json!({
            "model": self.model,
            "messages": [
                {"role": "system", "content": request.system},
                {"role": "user", "content": request.user},
            ],
            "temperature": 0,
            "max_tokens": request.max_tokens,
        });
        if json_mode {
            body["response_format"] = json!({"type": "json_object"});
        }
        self.connection.post_json(&self.id, &self.url, &body).await
    }
}

impl ApiKey {
    /// The key of an OpenAI-compatible model's settings: the one resolved
    /// at init (`api_key`), else the unresolved secret it names, else the
    /// variable `api_key_env`.
    #[must_use]
    pub fn of(api_key: Option<&crate::config::Secret>, secret: Option<&String>, api_key_env: &str) -> Self {
        match (api_key, secret) {
            (Some(key), _) => Self::Value(key.clone()),
            (None, Some(secret)) => Self::Unresolved(secret.clone()),
            (None, None) => Self::Env(api_key_env.to_owned()),
        }
    }

    /// The key to send, read now (`Env`), or why there is none to send
    /// (`Unresolved`: [`LlmError::Config`] naming the secret).
    fn resolve(&self, model: &str) -> Result<Option<String>, LlmError> {
        match self {
            Self::Env(var) => Ok(std::env::var(var).ok().filter(|k| !k.is_empty())),
            Self::Value(key) => Ok(Some(key.expose().to_owned())),
            Self::Unresolved(secret) => Err(LlmError::Config {
                model: model.to_owned(),
                message: format!("the api key secret {secret:?} was not resolved: this build has no feature `secrets`"),
            }),
            Self::None => Ok(None),
        }
    }
}

/// A model service's HTTP client (rustls, [`CONNECT_TIMEOUT`]) and the key
/// it sends, both set up on the first call: shared by the chat client and
/// the reranker ([`super::rerank`]).
#[derive(Debug)]
pub(crate) struct Connection {
    key: ApiKey,
    ready: OnceLock<(reqwest::Client, Option<String>)>,
}

impl Connection {
    /// A connection that will send `key`. Builds nothing.
    pub(crate) fn new(key: ApiKey) -> Self {
        Self { key, ready: OnceLock::new() }
    }

    /// One POST of `body` as JSON to `url`, with the key as a bearer
    /// token when there is one: the status and the body text. `model`
    /// names the model in errors.
    ///
    /// # Errors
    /// [`LlmError::Config`] when the client cannot be built or the key's
    /// secret was not resolved; [`LlmError::Transport`] when the request
    /// does not complete.
    pub(crate) async fn post_json(
        &self,
        model: &str,
        url: &str,
        body: &serde_json::Value,
    ) -> Result<(StatusCode, String), LlmError> {
        let (client, key) = self.ready(model)?;
        let mut call = client.post(url).json(body);
        if let Some(key) = key {
            call = call.bearer_auth(key);
        }
        let transport = |e: reqwest::Error| LlmError::Transport { model: model.to_owned(), message: e.to_string() };
        let response = call.send().await.map_err(transport)?;
        let status = response.status();
        Ok((status, response.text().await.map_err(transport)?))
    }

    fn ready(&self, model: &str) -> Result<&(reqwest::Client, Option<String>), LlmError> {
        if let Some(ready) = self.ready.get() {
            return Ok(ready);
        }
        let client = reqwest::Client::builder().connect_timeout(CONNECT_TIMEOUT).build().map_err(|e| {
            LlmError::Config { model: model.to_owned(), message: format!("cannot build http client: {e}") }
        })?;
        let key = self.key.resolve(model)?;
        Ok(self.ready.get_or_init(|| (client, key)))
    }
}

/// Whether an answer is a server refusing `response_format` (a 400 or 422
/// that names it), as servers without a JSON mode answer.
fn refuses_json_mode(status: StatusCode, text: &str) -> bool {
    matches!(status.as_u16(), 400 | 422) && (text.contains("response_format") || text.contains("json_object"))
}

#[derive(Deserialize)]
struct Reply {
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<ReplyUsage>,
}

#[derive(Deserialize)]
struct Choice {
    message: Message,
}

#[derive(Deserialize)]
struct Message {
    #[serde(default)]
    content: Option<String>,
}

#[derive(Deserialize)]
struct ReplyUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}

#[async_trait]
impl ChatModel for OpenAiChat {
    fn id(&self) -> &str {
        &self.id
    }

    async fn complete(&self, request: &ChatRequest<'_>) -> Result<Completion, LlmError> {
        let json_mode = request.json && !self.no_json_mode.load(Ordering::Relaxed);
        let (status, text) = self.post(request, json_mode).await?;
        let (status, text) = if json_mode && refuses_json_mode(status, &text) {
            // Some OpenAI-compatible servers have no JSON mode: remember it
            // and ask again without (the instructions still ask for JSON).
            tracing::warn!(model = self.id, "the model refused response_format; asking for JSON without it");
            self.no_json_mode.store(true, Ordering::Relaxed);
            self.post(request, false).await?
        } else {
            (status, text)
        };
        if !status.is_success() {
            let message: String = text.chars().take(300).collect();
            return Err(LlmError::Status { model: self.id.clone(), status: status.as_u16(), message });
        }
        let reply: Reply = serde_json::from_str(&text)
            .map_err(|e| LlmError::Malformed { model: self.id.clone(), message: e.to_string() })?;
        let content = reply.choices.into_iter().next().and_then(|c| c.message.content).ok_or_else(|| {
            LlmError::Malformed { model: self.id.clone(), message: "no choices[0].message.content".into() }
        })?;
        let usage =
            reply.usage.map(|u| Usage { prompt_tokens: u.prompt_tokens, completion_tokens: u.completion_tokens });
        Ok(Completion { text: content, usage })
    }
}
