//! Configuration: one JSON document, read once at init. Every default lives
//! here. Relative paths resolve against the configuration file's directory.
//!
//! Sources, later ones winning: the file named by `SKALD_CONFIG` (if set),
//! then `SKALD_STORE` (store location), `SKALD_S3_ENDPOINT` (S3 endpoint
//! override), `SKALD_EMBEDDER` (`use-m3` or `use-m3+e5`),
//! `SKALD_USE_M3_DIR` (the USE-m3 model's directory, e.g. a
//! Lambda layer's `/opt`), `SKALD_E5_DIR` (`use-m3+e5`'s e5 model) and the models (`SKALD_LLM_*`,
//! `SKALD_QUERY_PLANNER_*`, see [`ModelConfig::from_env_prefix`]) from the
//! environment.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::store::StoreLocation;

/// What went wrong reading the configuration. Messages name the file or key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {message}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        message: String,
    },
    /// The file is not valid configuration.
    #[error("invalid config {path}: {message}")]
    Invalid {
        /// The file (or `environment`).
        path: String,
        /// What is wrong, with the key.
        message: String,
    },
}

/// The whole configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Where the store lives: a directory or `s3://bucket/prefix`.
    /// Default `.skald/store` (relative to the config file).
    pub store: String,
    /// S3 client settings (used for `s3://` stores).
    pub s3: S3Config,
    /// How requests are given an identity.
    pub identity: IdentityConfig,
    /// The embedder.
    pub embedding: EmbeddingConfig,
    /// Index settings.
    pub index: IndexConfig,
    /// Request limits.
    pub limits: LimitsConfig,
    /// The main chat model (none by default: both LLM stages are `off`).
    pub llm: Option<ModelConfig>,
    /// A dedicated query-planner model for expansion and rewrite (falls
    /// back to `llm`); `rewrite: "auto"` engages only when it is set.
    pub query_planner: Option<ModelConfig>,
    /// A dedicated model for memory extraction (falls back to `llm`; with
    /// neither, commits keep episodes only).
    pub extraction: Option<ModelConfig>,
    /// A reranker (none by default): context mode then orders its
    /// candidates by this model's scores and leaves out those at or below
    /// `retrieval.rerank_threshold`. Provider `openai` only: a service's
    /// `POST {base_url}/rerank` in Cohere's shape ([`crate::llm::rerank`]);
    /// its key as a chat model's (`api_key_env`, `api_key_secret`). Set by
    /// `SKALD_RERANK_*` ([`ModelConfig::from_env_prefix`]).
    pub rerank: Option<ModelConfig>,
    /// Retrieval stage settings: LLM stage caps and the deadline.
    pub retrieval: RetrievalConfig,
    /// The MCP endpoint's settings.
    pub mcp: McpConfig,
    /// What a session commit makes of the conversation.
    pub memory: MemoryConfig,
    /// The directory relative paths resolve against (the config file's
    /// directory; the working directory without a file). Not read from JSON.
    #[serde(skip)]
    pub base_dir: PathBuf,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            store: ".skald/store".to_owned(),
            s3: S3Config::default(),
            identity: IdentityConfig::default(),
            embedding: EmbeddingConfig::default(),
            index: IndexConfig::default(),
            limits: LimitsConfig::default(),
            llm: None,
            query_planner: None,
            extraction: None,
            rerank: None,
            retrieval: RetrievalConfig::default(),
            mcp: McpConfig::default(),
            memory: MemoryConfig::default(),
            base_dir: PathBuf::from("."),
        }
    }
}

/// What a session commit makes of the conversation ([`crate::memory`]).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MemoryConfig {
    /// Keep each archive's messages as event memories (episodes, no
    /// model). Default true.
    pub episodes: bool,
    /// Do the store's event-driven work within the commit: index the
    /// memories it writes (else the `indexer` function does, on the
    /// store's notifications) and run model extraction (else the
    /// `extractor` function does, on the notification of the commit's
    /// task). Default (`null`): when the store is a local directory, which
    /// sends no notifications.
    pub index_inline: Option<bool>,
    /// Extract memories (profile, preferences, entities, events) with the
    /// `extraction` model, else `llm`, when one is configured. Default
    /// true.
    pub extract: bool,
    /// The most messages in one episode. Default 2 (one exchange).
    pub episode_messages: usize,
    /// The most estimated tokens in one episode (a longer message is an
    /// episode of its own). Default 600.
    pub episode_tokens: usize,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        let episodes = crate::memory::episodes::EpisodeOptions::default();
        Self {
            episodes: true,
            index_inline: None,
            extract: true,
            episode_messages: episodes.max_messages,
            episode_tokens: episodes.max_tokens,
        }
    }
}

impl MemoryConfig {
    /// How archives are cut into episodes.
    #[must_use]
    pub fn episode_options(&self) -> crate::memory::episodes::EpisodeOptions {
        crate::memory::episodes::EpisodeOptions {
            max_messages: self.episode_messages.max(1),
            max_tokens: self.episode_tokens.max(1),
            ..crate::memory::episodes::EpisodeOptions::default()
        }
    }
}

/// The MCP endpoint's settings (`POST /mcp`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct McpConfig {
    /// Browser origins allowed to call `/mcp` besides loopback ones
    /// (`https://app.example.com:443`, `https://*.example.com:*`): a request
    /// with any other `Origin` is a 403. Agent hosts send no `Origin`.
    /// Default: none. `SKALD_MCP_ALLOWED_ORIGINS` (comma-separated) adds to
    /// it.
    pub allowed_origins: Vec<String>,
}

/// S3 client settings.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct S3Config {
    /// Endpoint override (a local S3-protocol server). Default: AWS.
    pub endpoint_url: Option<String>,
    /// Path-style addressing (needed by most local servers). Default false.
    pub force_path_style: bool,
    /// Region. Default: from the environment, else `us-east-1`.
    pub region: Option<String>,
}

/// How a request's identity is established.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub enum IdentityMode {
    /// Only the API Gateway authorizer's claims (JWT), the default; also
    /// spelt `jwt`. A token without the account claim is a 401 unless
    /// [`IdentityConfig::jwt_default_account`] is set.
    #[default]
    #[serde(rename = "authorizer", alias = "jwt")]
    Authorizer,
    /// API keys checked by the function against the store's key table
    /// (`X-API-Key`, or `Authorization: Bearer`), see [`crate::keys`].
    #[serde(rename = "api_key")]
    ApiKey,
    /// Also trust `X-OpenViking-Account` / `-User` / `-Actor-Peer` headers,
    /// defaulting to the configured account and user. Local runs only.
    #[serde(rename = "dev")]
    Dev,
}

impl IdentityMode {
    /// The mode's name as configured and as `GET /health` reports it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Authorizer => "authorizer",
            Self::ApiKey => "api_key",
            Self::Dev => "dev",
        }
    }

    /// The mode named `text` (`authorizer` or `jwt`, `api_key`, `dev`).
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "authorizer" | "jwt" => Some(Self::Authorizer),
            "api_key" => Some(Self::ApiKey),
            "dev" => Some(Self::Dev),
            _ => None,
        }
    }
}

/// Identity settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IdentityConfig {
    /// `authorizer` (or `jwt`, the default), `api_key` or `dev`.
    /// `SKALD_IDENTITY_MODE` overrides it.
    pub mode: IdentityMode,
    /// The JWT claim naming the user. Default `sub`.
    pub user_claim: String,
    /// The JWT claim naming the account. Default `custom:account`.
    pub account_claim: String,
    /// The single tenant's account, for a JWT without the account claim.
    /// Default none: such a token is refused with 401, never served from
    /// some default account. `SKALD_JWT_DEFAULT_ACCOUNT` sets it.
    pub jwt_default_account: Option<String>,
    /// Account used in dev mode when no header names one. Default `default`.
    pub default_account: String,
    /// User used in dev mode when no header names one. Default `default`.
    pub default_user: String,
    /// How long a warm function trusts its cached copy of an API key's
    /// record (or of its absence) before reading it again: a revoked key
    /// stops working within this time. Default 30000 (30 s); 0 reads the
    /// record on every request.
    pub key_revalidate_ms: u64,
}

impl Default for IdentityConfig {
    fn default() -> Self {
        Self {
            mode: IdentityMode::Authorizer,
            user_claim: "sub".to_owned(),
            account_claim: "custom:account".to_owned(),
            jwt_default_account: None,
            default_account: "default".to_owned(),
            default_user: "default".to_owned(),
            key_revalidate_ms: 30_000,
        }
    }
}

/// Which embedder to use.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "provider", rename_all = "lowercase", deny_unknown_fields)]
pub enum EmbeddingConfig {
    /// The hashed n-gram test double (`dimension`, default 256).
    Hashed {
        /// Vector dimension.
        #[serde(default = "default_hashed_dimension")]
        dimension: usize,
    },
    /// An OpenAI-compatible `/v1/embeddings` service.
    Openai {
        /// Base URL including `/v1`.
        base_url: String,
        /// Model name.
        model: String,
        /// Vector dimension the model returns.
        dimension: usize,
        /// Environment variable holding the API key. Default `OPENAI_API_KEY`.
        #[serde(default = "default_api_key_env")]
        api_key_env: String,
        /// Send `dimensions` with each request. Default false.
        #[serde(default)]
        send_dimensions: bool,
        /// Request timeout in milliseconds. Default 30000.
        #[serde(default = "default_embed_timeout_ms")]
        timeout_ms: u64,
    },
    /// The embedded Universal Sentence Encoder multilingual v3 (`use-m3`,
    /// id `use-m3-v3/512`, 512 dimensions), run in process from the model
    /// file `scripts/setup-model.sh` converts. Opened on first use.
    #[serde(rename = "use-m3")]
    UseM3 {
        /// The directory holding `model.bin`; a relative path resolves
        /// against [`Config::base_dir`] (see [`Config::embedding_resolved`]).
        /// Default `.skald/models/use-m3`.
        #[serde(default = "default_use_m3_dir")]
        model_dir: String,
    },
    /// USE-m3 beside the embedded multilingual-e5-small (`use-m3+e5`),
    /// fused by script ([`crate::embed::ensemble`]): more of a
    /// conversation's answers found within one language, at ~15× USE-m3's
    /// embedding cost and a 4.5× larger index (`BENCHMARKS.md`). Both
    /// models come from `scripts/setup-model.sh`; opened on first use.
    #[serde(rename = "use-m3+e5")]
    UseM3E5 {
        /// USE-m3's directory, as [`EmbeddingConfig::UseM3`]'s. Default
        /// `.skald/models/use-m3`.
        #[serde(default = "default_use_m3_dir")]
        model_dir: String,
        /// The directory holding `e5-small-q4.bin`; a relative path
        /// resolves against [`Config::base_dir`]. Default `.skald/models/e5`.
        #[serde(default = "default_e5_dir")]
        e5_model_dir: String,
    },
}

fn default_hashed_dimension() -> usize {
    256
}
fn default_api_key_env() -> String {
    "OPENAI_API_KEY".to_owned()
}
fn default_embed_timeout_ms() -> u64 {
    30_000
}
fn default_use_m3_dir() -> String {
    ".skald/models/use-m3".to_owned()
}
fn default_e5_dir() -> String {
    ".skald/models/e5".to_owned()
}

impl EmbeddingConfig {
    /// These settings with a relative model directory (of `use-m3` and
    /// `use-m3+e5`) joined onto `base_dir`; other providers are returned
    /// unchanged.
    #[must_use]
    pub fn resolved(&self, base_dir: &Path) -> Self {
        let resolve = |dir: &str| {
            if Path::new(dir).is_relative() { base_dir.join(dir).display().to_string() } else { dir.to_owned() }
        };
        match self {
            Self::UseM3 { model_dir } => Self::UseM3 { model_dir: resolve(model_dir) },
            Self::UseM3E5 { model_dir, e5_model_dir } => {
                Self::UseM3E5 { model_dir: resolve(model_dir), e5_model_dir: resolve(e5_model_dir) }
            }
            other => other.clone(),
        }
    }
}

/// The embedded default: USE-m3 from `.skald/models/use-m3`.
impl Default for EmbeddingConfig {
    fn default() -> Self {
        Self::UseM3 { model_dir: default_use_m3_dir() }
    }
}

/// Index settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IndexConfig {
    /// Abstract size in bytes. Default 400; an episode's digest keeps at
    /// least [`crate::memory::episodes::DIGEST_MAX_BYTES`].
    pub abstract_max_bytes: usize,
    /// Bytes of a file's text (abstract first, then body) that are embedded.
    /// Default 2000.
    pub embed_max_bytes: usize,
    /// How long a warm process trusts its loaded index before it checks the
    /// manifest's etag again, in milliseconds. Default 0 (every request).
    pub revalidate_after_ms: u64,
    /// The most estimated memory, in bytes, the warm process keeps in
    /// loaded indexes (vectors and records) across accounts; beyond it the
    /// least recently used accounts' indexes are dropped and reloaded on
    /// their next request. Default 201326592 (192 MiB, for a 512 MB
    /// function that also maps the 82 MB USE-m3 model).
    pub cache_max_bytes: usize,
    /// The backend a new account's index starts on: `segments` (segment
    /// objects in the store, loaded whole and searched exactly) or
    /// `s3vectors` (one Amazon S3 Vectors index per account, in
    /// `s3vectors.bucket`, which it needs). Default `segments`. An existing
    /// account stays where its manifest says until `skald index migrate`
    /// moves it. `SKALD_INDEX_BACKEND` overrides it.
    pub backend: crate::index::Backend,
    /// The Amazon S3 Vectors settings.
    pub s3vectors: S3VectorsConfig,
}

/// Where accounts' S3 Vectors indexes live.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct S3VectorsConfig {
    /// The vector bucket new accounts' indexes are created in (and
    /// migrations copy to). Default: none. `SKALD_VECTOR_BUCKET` sets it.
    pub bucket: Option<String>,
    /// Index names start with this (then the account): default `skald-`.
    pub index_prefix: String,
    /// An endpoint instead of AWS's (a local emulator). Default: none.
    /// `SKALD_S3VECTORS_ENDPOINT` sets it.
    pub endpoint_url: Option<String>,
    /// Region. Default: the environment's, else `us-east-1`.
    pub region: Option<String>,
    /// The most vectors a second written to one index (the service allows
    /// 2,500). Default 2500.
    pub write_rate: f64,
}

impl Default for S3VectorsConfig {
    fn default() -> Self {
        Self { bucket: None, index_prefix: "skald-".into(), endpoint_url: None, region: None, write_rate: 2500.0 }
    }
}

/// [`IndexConfig::cache_max_bytes`]'s default.
pub const DEFAULT_CACHE_MAX_BYTES: usize = 192 * 1024 * 1024;

impl Default for IndexConfig {
    fn default() -> Self {
        Self {
            abstract_max_bytes: 400,
            embed_max_bytes: 2000,
            revalidate_after_ms: 0,
            cache_max_bytes: DEFAULT_CACHE_MAX_BYTES,
            backend: crate::index::Backend::Segments,
            s3vectors: S3VectorsConfig::default(),
        }
    }
}

/// Lambda's limit on a synchronous invocation response, in bytes: the
/// default of `limits.max_response_bytes`.
pub const LAMBDA_RESPONSE_LIMIT: usize = 6_291_456;

/// Bytes of a response kept for what surrounds a result in the invocation
/// response: the status code, the headers, the event's own keys, the
/// envelope's `status`, `telemetry` and `truncated` members (16 KiB; they
/// take well under 2 KiB).
pub const RESPONSE_RESERVE: usize = 16 * 1024;

/// Request limits.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Largest accepted request body. Default 262144 (256 KiB).
    pub max_body_bytes: usize,
    /// The most bytes a response may take in the Lambda invocation
    /// response (the envelope as a JSON string, with the headers): a
    /// result that would take more is cut — fewer items or shorter text —
    /// and answered with `"truncated": true` (the routes' `payload`
    /// module). Default 6291456, Lambda's synchronous
    /// limit; lower it behind a gateway with a smaller one (an Application
    /// Load Balancer takes 1 MB).
    pub max_response_bytes: usize,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self { max_body_bytes: 256 * 1024, max_response_bytes: LAMBDA_RESPONSE_LIMIT }
    }
}

impl LimitsConfig {
    /// The bytes a response's result may take under
    /// `max_response_bytes`: the limit less [`RESPONSE_RESERVE`] (0 under
    /// it).
    #[must_use]
    pub fn result_bytes(&self) -> usize {
        self.max_response_bytes.saturating_sub(RESPONSE_RESERVE)
    }
}

/// A chat model (`llm` or `query_planner`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "provider", rename_all = "lowercase", deny_unknown_fields)]
pub enum ModelConfig {
    /// An OpenAI-compatible `/chat/completions` service (OpenAI, vLLM,
    /// Ollama, LiteLLM, Volcengine Ark, …).
    Openai {
        /// Base URL up to and including `/v1`.
        base_url: String,
        /// Model name sent as `model`.
        model: String,
        /// Environment variable holding the API key (read when the client
        /// is first used; unset sends no key). Default `OPENAI_API_KEY`.
        /// Not read when `api_key_secret` is set.
        #[serde(default = "default_api_key_env")]
        api_key_env: String,
        /// An AWS Secrets Manager secret (its ARN, or its name in the
        /// function's region) holding the API key, which
        /// [`crate::app::App::new`] reads once at init in builds with the
        /// feature `secrets` (one `GetSecretValue` call, shared by both
        /// models when they name the same secret) into `api_key`. The
        /// secret is the key as plain text, or a JSON object with one
        /// string member. Default none; `{prefix}_API_KEY_SECRET` sets it
        /// (see [`ModelConfig::from_env_prefix`]).
        #[serde(default)]
        api_key_secret: Option<String>,
        /// The key resolved from `api_key_secret` at init: held in memory
        /// only, never read from JSON and never printed (see [`Secret`]).
        #[serde(skip)]
        api_key: Option<Secret>,
    },
    /// Amazon Bedrock Converse, with the function's AWS credentials.
    Bedrock {
        /// The model or inference-profile id.
        model_id: String,
        /// Region. Default: the environment's (`AWS_REGION`).
        #[serde(default)]
        region: Option<String>,
        /// Endpoint override (a VPC endpoint or a local stand-in).
        #[serde(default)]
        endpoint_url: Option<String>,
    },
}

/// A credential held in memory: its `Debug` prints `Secret(..)`, never the
/// value, so configurations and errors can be logged.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value`.
    #[must_use]
    pub fn new(value: String) -> Self {
        Self(value)
    }

    /// The value, for the one place that sends it (a request header).
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl ModelConfig {
    /// `openai:{model}` or `bedrock:{model_id}`.
    #[must_use]
    pub fn id(&self) -> String {
        match self {
            Self::Openai { model, .. } => format!("openai:{model}"),
            Self::Bedrock { model_id, .. } => format!("bedrock:{model_id}"),
        }
    }

    /// Why this cannot be a reranker (`rerank`), if it cannot: only an
    /// `openai` service has a `/rerank` API here.
    #[must_use]
    pub fn rerank_problem(&self) -> Option<String> {
        matches!(self, Self::Bedrock { .. })
            .then(|| "rerank.provider must be openai (a service with POST /rerank), not bedrock".to_owned())
    }

    /// The reranker `SKALD_RERANK_*` describes ([`ModelConfig::from_variables`]
    /// over `lookup`), or `None` when `SKALD_RERANK_MODEL` is unset.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for a provider other than `openai`, or
    /// without `SKALD_RERANK_BASE_URL` (OpenAI's own API has no `/rerank`:
    /// the service must be named).
    pub fn rerank_from_variables(lookup: impl Fn(&str) -> Option<String>) -> Result<Option<Self>, ConfigError> {
        let named = lookup("SKALD_RERANK_BASE_URL").is_some_and(|url| !url.is_empty());
        let Some(model) = Self::from_variables("SKALD_RERANK", lookup)? else { return Ok(None) };
        let problem = model
            .rerank_problem()
            .or_else(|| (!named).then(|| "SKALD_RERANK_BASE_URL is required with SKALD_RERANK_MODEL".to_owned()));
        match problem {
            Some(message) => Err(ConfigError::Invalid { path: "environment".into(), message }),
            None => Ok(Some(model)),
        }
    }

    /// The model an environment prefix describes (`{prefix}_MODEL`, with
    /// `{prefix}_PROVIDER` = `openai` (default) or `bedrock`; for OpenAI
    /// `{prefix}_BASE_URL` (default `https://api.openai.com/v1`) and the key
    /// from the Secrets Manager secret `{prefix}_API_KEY_SECRET` names
    /// (its `api_key_secret`, resolved at init),
    /// else from `{prefix}_API_KEY` (local runs); for Bedrock
    /// `{prefix}_REGION`), or `None` when `{prefix}_MODEL` is unset.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for an unknown provider.
    pub fn from_env_prefix(prefix: &str) -> Result<Option<Self>, ConfigError> {
        Self::from_variables(prefix, |name| std::env::var(name).ok())
    }

    /// [`ModelConfig::from_env_prefix`] over any variable lookup (`lookup`
    /// gets the full variable name; empty values count as unset).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for an unknown provider.
    pub fn from_variables(prefix: &str, lookup: impl Fn(&str) -> Option<String>) -> Result<Option<Self>, ConfigError> {
        let var = |name: &str| lookup(&format!("{prefix}_{name}")).filter(|v| !v.is_empty());
        let Some(model) = var("MODEL") else { return Ok(None) };
        match var("PROVIDER").as_deref() {
            None | Some("openai") => Ok(Some(Self::Openai {
                base_url: var("BASE_URL").unwrap_or_else(|| "https://api.openai.com/v1".to_owned()),
                model,
                api_key_env: format!("{prefix}_API_KEY"),
                api_key_secret: var("API_KEY_SECRET"),
                api_key: None,
            })),
            Some("bedrock") => Ok(Some(Self::Bedrock { model_id: model, region: var("REGION"), endpoint_url: None })),
            Some(other) => Err(ConfigError::Invalid {
                path: "environment".to_owned(),
                message: format!("{prefix}_PROVIDER must be openai or bedrock, not {other:?}"),
            }),
        }
    }
}

/// Retrieval stage settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetrievalConfig {
    /// Query expansion's cap in seconds. Default 10.
    pub recall_intent_timeout_s: f64,
    /// The rewrite's cap in seconds. Default 60.
    pub recall_rewrite_timeout_s: f64,
    /// The API Gateway integration limit in seconds, counted from the
    /// invocation start. Default 29.
    pub gateway_timeout_s: f64,
    /// Time kept back after an LLM stage for the rest of the request, in
    /// milliseconds (expansion keeps twice this: retrieval follows it).
    /// Default 1000.
    pub stage_reserve_ms: u64,
    /// Whether query expansion may run at all. Default true.
    pub enable_intent: bool,
    /// Purpose presets by name: a name `chat` or `coding` replaces that
    /// built-in preset, any other name adds one that requests may send as
    /// `purpose`. Default: none (the built-in `chat` and `coding` only).
    pub purpose_profiles: BTreeMap<String, PurposeProfileConfig>,
    /// Context mode's relative relevance bar in flat retrieval (quotas keep
    /// their breadth): a candidate that ranks more than this below the best
    /// one is not injected. In `[0, 1]`; 1 keeps
    /// every candidate. Default [`DEFAULT_RELEVANCE_GAP`].
    pub relevance_gap: f64,
    /// Context mode's absolute relevance bar on semantic and hybrid
    /// scores, a gate: when even the best candidate scores below it, the
    /// block is empty (nothing the memory holds is about the prompt). In
    /// `[0, 1]`; 0 turns it off. Default: the embedder's own (0.60 for
    /// USE-m3, none for others).
    pub relevance_floor: Option<f64>,
    /// With a reranker (`rerank`): a candidate it scores at or below this
    /// is not injected (OpenViking's `score > threshold`), and the
    /// embedder's bars give way to it. On the reranker's own scale (a
    /// probability for most; llama.cpp sends logits). Default 0.1.
    pub rerank_threshold: f64,
    /// The reranker's cap in seconds, within the request's deadline less
    /// `stage_reserve_ms`; when it fails or runs out, the block keeps the
    /// search's order and bars, and `stats.rerank` says why. Default 5.
    pub rerank_timeout_s: f64,
}

/// `retrieval.relevance_gap`'s default: a candidate more than this below
/// the best one's rank score is not injected. Calibrated on the
/// conversational evaluation and the retrieval set (`BENCHMARKS.md`).
pub const DEFAULT_RELEVANCE_GAP: f64 = 0.15;

/// `retrieval.rerank_threshold`'s default, OpenViking's: a reranked
/// candidate must score above it.
pub const DEFAULT_RERANK_THRESHOLD: f64 = 0.1;

/// One configured purpose preset (`retrieval.purpose_profiles.<name>`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PurposeProfileConfig {
    /// Entries per bucket; keys `events`, `entities`, `preferences`,
    /// `experiences`, `resources`, `skills` (a bucket not named gets none),
    /// each at most [`MAX_PROFILE_QUOTA`], at least one above 0.
    pub quotas: BTreeMap<String, usize>,
    /// The share of `max_tokens` event entries may take, in (0, 1].
    /// Default: the built-in preset's of the same name; none (no cap) for a
    /// new name.
    pub events_budget_share: Option<f64>,
}

/// The largest quota a configured preset may give a bucket (as a request's
/// `quotas`).
pub const MAX_PROFILE_QUOTA: usize = 1000;

impl PurposeProfileConfig {
    /// Checks the preset named `name`; the message names the bad key.
    fn validate(&self, name: &str) -> Result<(), String> {
        let key = format!("retrieval.purpose_profiles.{name}");
        let valid_name = !name.is_empty()
            && name.len() <= 64
            && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        if !valid_name {
            return Err(format!("{key}: a purpose name is 1 to 64 of a-z, 0-9, '_' and '-'"));
        }
        for (bucket, &n) in &self.quotas {
            let known = crate::index::Category::parse(bucket).is_some_and(|c| c != crate::index::Category::Memories);
            if !known {
                return Err(format!(
                    "{key}.quotas: unknown bucket {bucket:?}; allowed: events, entities, preferences, experiences, resources, skills"
                ));
            }
            if n > MAX_PROFILE_QUOTA {
                return Err(format!("{key}.quotas.{bucket}: {n} is more than {MAX_PROFILE_QUOTA}"));
            }
        }
        if self.quotas.values().all(|&n| n == 0) {
            return Err(format!("{key}.quotas: at least one bucket needs a quota above 0"));
        }
        if let Some(share) = self.events_budget_share.filter(|s| !(s.is_finite() && *s > 0.0 && *s <= 1.0)) {
            return Err(format!("{key}.events_budget_share must be in (0, 1], not {share}"));
        }
        Ok(())
    }
}

impl Default for RetrievalConfig {
    fn default() -> Self {
        Self {
            recall_intent_timeout_s: 10.0,
            recall_rewrite_timeout_s: 60.0,
            gateway_timeout_s: 29.0,
            stage_reserve_ms: 1_000,
            enable_intent: true,
            purpose_profiles: BTreeMap::new(),
            relevance_gap: DEFAULT_RELEVANCE_GAP,
            relevance_floor: None,
            rerank_threshold: DEFAULT_RERANK_THRESHOLD,
            rerank_timeout_s: 5.0,
        }
    }
}

impl RetrievalConfig {
    /// Seconds as a duration; non-finite or negative values count as 0.
    #[must_use]
    pub fn seconds(value: f64) -> std::time::Duration {
        std::time::Duration::try_from_secs_f64(value).unwrap_or_default()
    }
}

impl Config {
    /// Parses a configuration document; relative paths resolve against
    /// `base_dir`.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the bad key.
    pub fn from_json(text: &str, origin: &str, base_dir: &Path) -> Result<Self, ConfigError> {
        let mut config: Self = serde_json::from_str(text)
            .map_err(|e| ConfigError::Invalid { path: origin.to_owned(), message: e.to_string() })?;
        let r = &config.retrieval;
        for (key, value) in [
            ("retrieval.recall_intent_timeout_s", r.recall_intent_timeout_s),
            ("retrieval.recall_rewrite_timeout_s", r.recall_rewrite_timeout_s),
            ("retrieval.gateway_timeout_s", r.gateway_timeout_s),
            ("retrieval.rerank_timeout_s", r.rerank_timeout_s),
        ] {
            if !(value.is_finite() && value > 0.0) {
                return Err(ConfigError::Invalid {
                    path: origin.to_owned(),
                    message: format!("{key} must be a positive number of seconds, not {value}"),
                });
            }
        }
        for (key, value) in
            [("retrieval.relevance_gap", Some(r.relevance_gap)), ("retrieval.relevance_floor", r.relevance_floor)]
        {
            if let Some(value) = value
                && !(0.0..=1.0).contains(&value)
            {
                return Err(ConfigError::Invalid {
                    path: origin.to_owned(),
                    message: format!("{key} must be a number from 0 to 1, not {value}"),
                });
            }
        }
        if !r.rerank_threshold.is_finite() {
            return Err(ConfigError::Invalid {
                path: origin.to_owned(),
                message: format!("retrieval.rerank_threshold must be a number, not {}", r.rerank_threshold),
            });
        }
        if let Some(message) = config.rerank.as_ref().and_then(ModelConfig::rerank_problem) {
            return Err(ConfigError::Invalid { path: origin.to_owned(), message });
        }
        for (name, profile) in &config.retrieval.purpose_profiles {
            profile.validate(name).map_err(|message| ConfigError::Invalid { path: origin.to_owned(), message })?;
        }
        config.base_dir = base_dir.to_path_buf();
        let rate = config.index.s3vectors.write_rate;
        if !(rate.is_finite() && rate > 0.0) {
            return Err(ConfigError::Invalid {
                path: origin.to_owned(),
                message: format!("index.s3vectors.write_rate must be a positive number, not {rate}"),
            });
        }
        Ok(config)
    }

    /// Checks the index settings once every source is applied (the file,
    /// then the environment): `s3vectors` needs a vector bucket, and the
    /// write rate must be positive. [`Config::from_env`] and `App::new`
    /// call it.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the key.
    pub fn check_index(&self) -> Result<(), ConfigError> {
        let v = &self.index.s3vectors;
        let message = if self.index.backend == crate::index::Backend::S3vectors
            && v.bucket.as_deref().is_none_or(str::is_empty)
        {
            Some("index.backend s3vectors needs index.s3vectors.bucket (SKALD_VECTOR_BUCKET)".to_owned())
        } else if !(v.write_rate.is_finite() && v.write_rate > 0.0) {
            Some(format!("index.s3vectors.write_rate must be a positive number, not {}", v.write_rate))
        } else {
            None
        };
        message.map_or(Ok(()), |message| Err(ConfigError::Invalid { path: "configuration".into(), message }))
    }

    /// Reads a configuration file.
    ///
    /// # Errors
    /// [`ConfigError`] when it cannot be read or parsed.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::Read { path: path.display().to_string(), message: e.to_string() })?;
        let base = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        Self::from_json(&text, &path.display().to_string(), base)
    }

    /// The configuration from `SKALD_CONFIG` (or the defaults) with the
    /// environment overrides applied.
    ///
    /// # Errors
    /// [`ConfigError`] when the file cannot be read or parsed.
    pub fn from_env() -> Result<Self, ConfigError> {
        let mut config = match std::env::var_os("SKALD_CONFIG") {
            Some(path) if !path.is_empty() => Self::from_file(Path::new(&path))?,
            _ => Self::default(),
        };
        if let Ok(store) = std::env::var("SKALD_STORE")
            && !store.is_empty()
        {
            config.store = store;
        }
        if let Ok(endpoint) = std::env::var("SKALD_S3_ENDPOINT")
            && !endpoint.is_empty()
        {
            config.s3.endpoint_url = Some(endpoint);
            config.s3.force_path_style = true;
        }
        if let Ok(name) = std::env::var("SKALD_EMBEDDER") {
            config.set_embedder(&name)?;
        }
        if let Ok(dir) = std::env::var("SKALD_USE_M3_DIR") {
            config.set_use_m3_dir(&dir);
        }
        if let Ok(dir) = std::env::var("SKALD_E5_DIR") {
            config.set_e5_dir(&dir);
        }
        if let Some(model) = ModelConfig::from_env_prefix("SKALD_LLM")? {
            config.llm = Some(model);
        }
        if let Some(model) = ModelConfig::from_env_prefix("SKALD_QUERY_PLANNER")? {
            config.query_planner = Some(model);
        }
        if let Some(model) = ModelConfig::from_env_prefix("SKALD_EXTRACTION")? {
            config.extraction = Some(model);
        }
        if let Some(model) = ModelConfig::rerank_from_variables(|name| std::env::var(name).ok())? {
            config.rerank = Some(model);
        }
        if let Ok(mode) = std::env::var("SKALD_IDENTITY_MODE")
            && !mode.is_empty()
        {
            config.identity.mode = IdentityMode::parse(&mode).ok_or_else(|| ConfigError::Invalid {
                path: "environment".into(),
                message: format!("SKALD_IDENTITY_MODE must be authorizer, jwt, api_key or dev, not {mode:?}"),
            })?;
        }
        if let Ok(account) = std::env::var("SKALD_JWT_DEFAULT_ACCOUNT")
            && !account.is_empty()
        {
            config.identity.jwt_default_account = Some(account);
        }
        if let Ok(backend) = std::env::var("SKALD_INDEX_BACKEND")
            && !backend.is_empty()
        {
            config.index.backend = crate::index::Backend::parse(&backend).ok_or_else(|| ConfigError::Invalid {
                path: "environment".into(),
                message: format!("SKALD_INDEX_BACKEND must be segments or s3vectors, not {backend:?}"),
            })?;
        }
        if let Ok(bucket) = std::env::var("SKALD_VECTOR_BUCKET")
            && !bucket.is_empty()
        {
            config.index.s3vectors.bucket = Some(bucket);
        }
        if let Ok(endpoint) = std::env::var("SKALD_S3VECTORS_ENDPOINT")
            && !endpoint.is_empty()
        {
            config.index.s3vectors.endpoint_url = Some(endpoint);
        }
        config.check_index()?;
        if let Ok(origins) = std::env::var("SKALD_MCP_ALLOWED_ORIGINS") {
            let listed = origins.split(',').map(str::trim).filter(|o| !o.is_empty()).map(str::to_owned);
            config.mcp.allowed_origins.extend(listed);
        }
        Ok(config)
    }

    /// Switches between the embedded embedders (`SKALD_EMBEDDER`): `use-m3`
    /// or `use-m3+e5`, each with its default model directories; nothing
    /// when `name` is empty or already the configured one (its directories
    /// stay).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming `SKALD_EMBEDDER` and the value for
    /// any other name.
    pub fn set_embedder(&mut self, name: &str) -> Result<(), ConfigError> {
        self.embedding = match (name, &self.embedding) {
            ("", _) | ("use-m3", EmbeddingConfig::UseM3 { .. }) | ("use-m3+e5", EmbeddingConfig::UseM3E5 { .. }) => {
                return Ok(());
            }
            ("use-m3", _) => EmbeddingConfig::UseM3 { model_dir: default_use_m3_dir() },
            ("use-m3+e5", _) => {
                EmbeddingConfig::UseM3E5 { model_dir: default_use_m3_dir(), e5_model_dir: default_e5_dir() }
            }
            (other, _) => {
                return Err(ConfigError::Invalid {
                    path: "environment".to_owned(),
                    message: format!("SKALD_EMBEDDER must be use-m3 or use-m3+e5, not {other:?}"),
                });
            }
        };
        Ok(())
    }

    /// Points the USE-m3 embedder (alone or in `use-m3+e5`) at `dir`
    /// (`SKALD_USE_M3_DIR`); nothing when `dir` is empty or another
    /// embedder is configured.
    pub fn set_use_m3_dir(&mut self, dir: &str) {
        if let EmbeddingConfig::UseM3 { model_dir } | EmbeddingConfig::UseM3E5 { model_dir, .. } = &mut self.embedding
            && !dir.is_empty()
        {
            dir.clone_into(model_dir);
        }
    }

    /// Points `use-m3+e5`'s e5 model at `dir` (`SKALD_E5_DIR`); nothing
    /// when `dir` is empty or another embedder is configured.
    pub fn set_e5_dir(&mut self, dir: &str) {
        if let EmbeddingConfig::UseM3E5 { e5_model_dir, .. } = &mut self.embedding
            && !dir.is_empty()
        {
            dir.clone_into(e5_model_dir);
        }
    }

    /// Whether a commit indexes the memories it writes itself
    /// ([`MemoryConfig::index_inline`], else: the store is a local
    /// directory, which sends no change notifications).
    #[must_use]
    pub fn memory_index_inline(&self) -> bool {
        self.memory.index_inline.unwrap_or_else(|| matches!(self.store_location(), Ok(StoreLocation::Local(_))))
    }

    /// The embedding settings with relative paths resolved against
    /// [`Config::base_dir`] (what [`crate::app::App::new`] builds from).
    #[must_use]
    pub fn embedding_resolved(&self) -> EmbeddingConfig {
        self.embedding.resolved(&self.base_dir)
    }

    /// The store location, with a relative directory resolved against
    /// [`Config::base_dir`].
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] when `store` is not a valid location.
    pub fn store_location(&self) -> Result<StoreLocation, ConfigError> {
        let location = StoreLocation::parse(&self.store)
            .map_err(|message| ConfigError::Invalid { path: "store".to_owned(), message })?;
        Ok(match location {
            StoreLocation::Local(dir) if dir.is_relative() => StoreLocation::Local(self.base_dir.join(dir)),
            other => other,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_s3vectors_backend_needs_a_bucket_and_a_positive_rate() {
        let base = Path::new("/etc/skald");
        let c = Config::from_json(r#"{}"#, "t.json", base).expect("valid");
        assert_eq!(c.index.backend, crate::index::Backend::Segments);
        assert_eq!((c.index.s3vectors.index_prefix.as_str(), c.index.s3vectors.write_rate), ("skald-", 2500.0));
        // The bucket may come from the environment: checked once all is applied.
        let mut c = Config::from_json(r#"{"index": {"backend": "s3vectors"}}"#, "t.json", base).expect("valid");
        let message = c.check_index().expect_err("no bucket").to_string();
        assert!(message.contains("index.s3vectors.bucket") && message.contains("SKALD_VECTOR_BUCKET"), "{message}");
        c.index.s3vectors.bucket = Some("vectors".into());
        assert!(c.check_index().is_ok());
        let zero = r#"{"index": {"s3vectors": {"write_rate": 0}}}"#;
        assert!(Config::from_json(zero, "t.json", base).expect_err("rate 0").to_string().contains("write_rate"));
        let unknown = r#"{"index": {"backend": "faiss"}}"#;
        assert!(Config::from_json(unknown, "t.json", base).is_err(), "an unknown backend is refused");
    }

    #[test]
    fn defaults_fill_what_the_file_omits() {
        let c =
            Config::from_json(r#"{"identity": {"mode": "dev"}}"#, "t.json", Path::new("/etc/skald")).expect("valid");
        assert_eq!(c.identity.mode, IdentityMode::Dev);
        assert_eq!(c.identity.default_user, "default");
        assert_eq!(c.limits.max_body_bytes, 262_144);
        assert_eq!(c.embedding, EmbeddingConfig::UseM3 { model_dir: ".skald/models/use-m3".into() });
        assert_eq!(c.store_location().ok(), Some(StoreLocation::Local("/etc/skald/.skald/store".into())));
    }

    #[test]
    fn the_use_m3_directory_can_be_set_apart_from_the_file() {
        let mut c = Config::default();
        c.set_use_m3_dir("/opt");
        assert_eq!(c.embedding_resolved(), EmbeddingConfig::UseM3 { model_dir: "/opt".into() });
        c.set_use_m3_dir("");
        assert_eq!(c.embedding, EmbeddingConfig::UseM3 { model_dir: "/opt".into() }, "empty changes nothing");
        let mut openai = Config::from_json(
            r#"{"embedding": {"provider": "openai", "base_url": "http://x/v1", "model": "m", "dimension": 8}}"#,
            "t.json",
            Path::new("."),
        )
        .expect("valid");
        let before = openai.embedding.clone();
        openai.set_use_m3_dir("/opt");
        assert_eq!(openai.embedding, before, "another embedder is left alone");
    }

    #[test]
    fn models_come_from_prefixed_variables() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| (*v).to_owned())
        };
        assert_eq!(
            ModelConfig::from_variables("SKALD_LLM", vars(&[("SKALD_LLM_BASE_URL", "http://x/v1")])).ok(),
            Some(None)
        );
        assert_eq!(
            ModelConfig::from_variables("SKALD_LLM", vars(&[("SKALD_LLM_MODEL", "gpt"), ("SKALD_LLM_PROVIDER", "")]))
                .ok()
                .flatten(),
            Some(ModelConfig::Openai {
                base_url: "https://api.openai.com/v1".into(),
                model: "gpt".into(),
                api_key_env: "SKALD_LLM_API_KEY".into(),
                api_key_secret: None,
                api_key: None,
            })
        );
        const ARN: &str = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:skald/llm-AbCdEf";
        let with_secret = vars(&[("SKALD_LLM_MODEL", "gpt"), ("SKALD_LLM_API_KEY_SECRET", ARN)]);
        let Some(Some(ModelConfig::Openai { api_key_secret, api_key, .. })) =
            ModelConfig::from_variables("SKALD_LLM", with_secret).ok()
        else {
            panic!("an OpenAI model");
        };
        assert_eq!((api_key_secret.as_deref(), api_key), (Some(ARN), None), "named, resolved only at init");
        let bedrock = vars(&[
            ("SKALD_QUERY_PLANNER_MODEL", "anthropic.haiku"),
            ("SKALD_QUERY_PLANNER_PROVIDER", "bedrock"),
            ("SKALD_QUERY_PLANNER_REGION", "eu-west-1"),
        ]);
        assert_eq!(
            ModelConfig::from_variables("SKALD_QUERY_PLANNER", bedrock).ok().flatten(),
            Some(ModelConfig::Bedrock {
                model_id: "anthropic.haiku".into(),
                region: Some("eu-west-1".into()),
                endpoint_url: None
            })
        );
        let bad = vars(&[("SKALD_LLM_MODEL", "m"), ("SKALD_LLM_PROVIDER", "azure")]);
        let err = ModelConfig::from_variables("SKALD_LLM", bad).expect_err("unknown provider");
        assert!(err.to_string().contains("SKALD_LLM_PROVIDER"), "{err}");
    }

    #[test]
    fn a_model_names_its_key_secret_but_never_carries_the_key_in_json() {
        let c = Config::from_json(
            r#"{"llm": {"provider": "openai", "base_url": "http://x/v1", "model": "m", "api_key_secret": "skald/llm"}}"#,
            "t.json",
            Path::new("."),
        )
        .expect("valid");
        assert!(
            matches!(&c.llm, Some(ModelConfig::Openai { api_key_secret: Some(s), api_key: None, .. }) if s == "skald/llm")
        );
        let err = Config::from_json(
            r#"{"llm": {"provider": "openai", "base_url": "http://x/v1", "model": "m", "api_key": "sk-1"}}"#,
            "t.json",
            Path::new("."),
        )
        .expect_err("a key in the file is refused");
        assert!(err.to_string().contains("unknown field `api_key`"), "{err}");
        let shown = format!("{:?}", Secret::new("sk-very-secret".into()));
        assert_eq!(shown, "Secret(..)");
    }

    #[test]
    fn stage_timeouts_must_be_positive() {
        for bad in [r#"{"retrieval": {"gateway_timeout_s": 0}}"#, r#"{"retrieval": {"recall_rewrite_timeout_s": -1}}"#]
        {
            let err = Config::from_json(bad, "t.json", Path::new(".")).expect_err("refused");
            assert!(err.to_string().contains("must be a positive number of seconds"), "{err}");
        }
        let c = Config::from_json(r#"{"retrieval": {"recall_intent_timeout_s": 2.5}}"#, "t.json", Path::new("."))
            .expect("valid");
        assert_eq!(
            RetrievalConfig::seconds(c.retrieval.recall_intent_timeout_s),
            std::time::Duration::from_millis(2500)
        );
        assert_eq!(c.retrieval.stage_reserve_ms, 1000);
    }

    #[test]
    fn purpose_profiles_are_checked_by_key() {
        let ok = r#"{"retrieval": {"purpose_profiles": {
            "support": {"quotas": {"entities": 6, "resources": 4}, "events_budget_share": 0.5},
            "chat": {"quotas": {"events": 3}}}}}"#;
        let c = Config::from_json(ok, "t.json", Path::new(".")).expect("valid");
        let support = &c.retrieval.purpose_profiles["support"];
        assert_eq!(support.quotas.get("entities"), Some(&6));
        assert_eq!(support.events_budget_share, Some(0.5));
        assert_eq!(c.retrieval.purpose_profiles["chat"].events_budget_share, None);
        for (bad, names) in [
            (r#"{"Chat!": {"quotas": {"events": 1}}}"#, "retrieval.purpose_profiles.Chat!"),
            (r#"{"x": {"quotas": {"memories": 1}}}"#, "unknown bucket \"memories\""),
            (r#"{"x": {"quotas": {"events": 1001}}}"#, "retrieval.purpose_profiles.x.quotas.events"),
            (r#"{"x": {"quotas": {"events": 0}}}"#, "at least one bucket"),
            (r#"{"x": {"quotas": {}}}"#, "at least one bucket"),
            (r#"{"x": {"quotas": {"events": 1}, "events_budget_share": 0}}"#, "events_budget_share must be in (0, 1]"),
            (r#"{"x": {"quotas": {"events": 1}, "events_budget_share": 1.5}}"#, "events_budget_share"),
            (r#"{"x": {"quotas": {"events": -1}}}"#, "invalid value"),
            (r#"{"x": {"quota": {"events": 1}}}"#, "unknown field `quota`"),
        ] {
            let text = format!(r#"{{"retrieval": {{"purpose_profiles": {bad}}}}}"#);
            let err = Config::from_json(&text, "t.json", Path::new(".")).expect_err(bad);
            assert!(err.to_string().contains(names), "{bad}: {err}");
        }
    }

    #[test]
    fn unknown_keys_are_refused_by_name() {
        let err = Config::from_json(r#"{"stor": "x"}"#, "t.json", Path::new(".")).expect_err("unknown key");
        assert!(err.to_string().contains("stor"), "{err}");
        let err = Config::from_json(r#"{"embedding": {"provider": "nope"}}"#, "t.json", Path::new("."))
            .expect_err("unknown provider");
        assert!(err.to_string().contains("nope"), "{err}");
    }

    #[test]
    fn use_m3_model_dir_defaults_and_resolves_against_the_config_directory() {
        let c = Config::from_json(r#"{"embedding": {"provider": "use-m3"}}"#, "t.json", Path::new("/etc/skald"))
            .expect("valid");
        assert_eq!(c.embedding, EmbeddingConfig::UseM3 { model_dir: ".skald/models/use-m3".into() });
        assert_eq!(
            c.embedding_resolved(),
            EmbeddingConfig::UseM3 { model_dir: "/etc/skald/.skald/models/use-m3".into() }
        );
        let c = Config::from_json(
            r#"{"embedding": {"provider": "use-m3", "model_dir": "/opt/use-m3"}}"#,
            "t.json",
            Path::new("/etc/skald"),
        )
        .expect("valid");
        assert_eq!(c.embedding_resolved(), EmbeddingConfig::UseM3 { model_dir: "/opt/use-m3".into() });
    }

    #[test]
    fn the_fused_embedder_resolves_both_model_directories() {
        let mut c = Config::from_json(
            r#"{"embedding": {"provider": "use-m3+e5", "e5_model_dir": "/opt/e5"}}"#,
            "t.json",
            Path::new("/etc/skald"),
        )
        .expect("valid");
        assert_eq!(
            c.embedding_resolved(),
            EmbeddingConfig::UseM3E5 {
                model_dir: "/etc/skald/.skald/models/use-m3".into(),
                e5_model_dir: "/opt/e5".into()
            }
        );
        c.set_use_m3_dir("/layer/use-m3");
        c.set_e5_dir("models/e5");
        assert_eq!(
            c.embedding_resolved(),
            EmbeddingConfig::UseM3E5 { model_dir: "/layer/use-m3".into(), e5_model_dir: "/etc/skald/models/e5".into() }
        );
    }

    #[test]
    fn the_embedder_switches_by_name_and_refuses_others() {
        let mut c = Config::from_json("{}", "t.json", Path::new("/etc/skald")).expect("valid");
        c.set_embedder("use-m3+e5").expect("known");
        assert_eq!(
            c.embedding,
            EmbeddingConfig::UseM3E5 {
                model_dir: ".skald/models/use-m3".into(),
                e5_model_dir: ".skald/models/e5".into()
            }
        );
        c.set_e5_dir("/opt");
        c.set_embedder("use-m3+e5").expect("the same one");
        assert!(matches!(&c.embedding, EmbeddingConfig::UseM3E5 { e5_model_dir, .. } if e5_model_dir == "/opt"));
        c.set_embedder("use-m3").expect("known");
        assert_eq!(c.embedding, EmbeddingConfig::UseM3 { model_dir: ".skald/models/use-m3".into() });
        let err = c.set_embedder("e5").expect_err("unknown").to_string();
        assert!(err.contains("SKALD_EMBEDDER") && err.contains("\"e5\""), "{err}");
    }
}
