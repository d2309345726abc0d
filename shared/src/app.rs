//! The process-wide context a function builds once at init: configuration,
//! store, embedder, the warm index cache and (lazily) the chat models.

use std::sync::Arc;
use std::time::Duration;

use crate::config::{Config, ConfigError, EmbeddingConfig};
use crate::embed::Embedder;
use crate::embed::hashed::HashedEmbedder;
use crate::index::{EmbedderInfo, IndexCache};
use crate::keys::KeyTable;
use crate::store::local::LocalStore;
use crate::store::{SharedStore, StoreError, StoreLocation};

/// What init failed to build.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// Bad configuration.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The store could not be opened.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The configured embedder could not be built.
    #[error("embedder: {0}")]
    Embedder(String),
    /// A model's API key secret could not be read (the message names the
    /// setting, its variable and the secret's id, never its value).
    #[cfg(feature = "secrets")]
    #[error(transparent)]
    Secret(#[from] crate::secrets::SecretError),
}

/// Everything a handler needs; built once per process and shared.
#[derive(Debug)]
pub struct App {
    /// The configuration.
    pub config: Config,
    /// The store.
    pub store: SharedStore,
    /// The query and ingest embedder.
    pub embedder: Arc<dyn Embedder>,
    /// Warm index snapshots per account.
    pub index: IndexCache,
    /// The API key table as this process has read it (`api_key` mode).
    pub keys: KeyTable,
    /// The Amazon S3 Vectors bucket (`index.s3vectors`), its client built
    /// on first use: the accounts whose index is there, and new accounts
    /// when `index.backend` is `s3vectors`.
    #[cfg(feature = "s3")]
    pub vectors: crate::index::s3vectors::VectorBucket,
    /// The chat models of the LLM stages, built on first use.
    #[cfg(feature = "llm")]
    pub models: crate::llm::Models,
    /// The reranker (`rerank`), when one is configured; it connects on its
    /// first call.
    #[cfg(feature = "llm")]
    pub reranker: Option<crate::llm::rerank::Reranker>,
}

impl App {
    /// Builds the store, embedder and index cache for `config`. Clients that
    /// talk to the network connect on first use, with one exception: in
    /// builds with the feature `secrets`, the API key secrets the models
    /// name (`api_key_secret`) are read here, once (see
    /// [`crate::secrets`]; nothing is built or called when none is named).
    ///
    /// # Errors
    /// [`InitError`] naming what could not be built or resolved.
    pub async fn new(config: Config) -> Result<Self, InitError> {
        config.check_index()?;
        #[cfg(feature = "secrets")]
        let config = {
            let mut config = config;
            crate::secrets::resolve_model_keys(&mut config).await?;
            config
        };
        let store = open_store(&config).await?;
        let embedder = build_embedder(&config.embedding_resolved())?;
        Ok(Self::with_parts(config, store, embedder))
    }

    /// An app over an existing store and embedder (tests, tools).
    #[must_use]
    pub fn with_parts(config: Config, store: SharedStore, embedder: Arc<dyn Embedder>) -> Self {
        let revalidate = Duration::from_millis(config.index.revalidate_after_ms);
        let index = IndexCache::new(Arc::clone(&store), revalidate, config.index.cache_max_bytes);
        let keys = KeyTable::new(Arc::clone(&store), Duration::from_millis(config.identity.key_revalidate_ms));
        #[cfg(feature = "s3")]
        let vectors = {
            let v = &config.index.s3vectors;
            crate::index::s3vectors::VectorBucket::new(
                v.bucket.as_deref().unwrap_or_default(),
                &v.index_prefix,
                v.region.as_deref().or(config.s3.region.as_deref()),
                v.endpoint_url.as_deref(),
            )
        };
        #[cfg(feature = "llm")]
        let models = crate::llm::Models::new(config.llm.clone(), config.query_planner.clone())
            .with_extraction(config.extraction.clone());
        #[cfg(feature = "llm")]
        let reranker = config.rerank.as_ref().map(crate::llm::rerank::Reranker::from_config);
        Self {
            config,
            store,
            embedder,
            index,
            keys,
            #[cfg(feature = "s3")]
            vectors,
            #[cfg(feature = "llm")]
            models,
            #[cfg(feature = "llm")]
            reranker,
        }
    }

    /// Where this process's commits go ([`crate::index::Target`]): the
    /// store, the vector bucket, and the backend new accounts start on.
    #[must_use]
    pub fn index_target(&self) -> crate::index::Target<'_> {
        crate::index::Target {
            store: &self.store,
            #[cfg(feature = "s3")]
            vectors: Some(&self.vectors),
            #[cfg(not(feature = "s3"))]
            vectors: None,
            new_accounts: self.config.index.backend,
            write_rate: self.config.index.s3vectors.write_rate,
        }
    }

    /// The vector bucket's client, when this build has one.
    #[must_use]
    pub fn vector_bucket(&self) -> Option<&crate::index::account::VectorBucket> {
        #[cfg(feature = "s3")]
        return Some(&self.vectors);
        #[cfg(not(feature = "s3"))]
        return None;
    }

    /// The embedder as the index records it.
    #[must_use]
    pub fn embedder_info(&self) -> EmbedderInfo {
        EmbedderInfo { id: self.embedder.id().to_owned(), dimension: self.embedder.dimension() }
    }
}

/// Opens the configured store: a local directory, or S3 (with the
/// configured endpoint, path style and region).
///
/// # Errors
/// [`InitError`] when the location is invalid or cannot be opened.
pub async fn open_store(config: &Config) -> Result<SharedStore, InitError> {
    match config.store_location()? {
        StoreLocation::Local(dir) => Ok(Arc::new(LocalStore::open(dir)?)),
        #[cfg(feature = "s3")]
        StoreLocation::S3 { bucket, prefix } => {
            let options = crate::store::s3::S3Options {
                endpoint_url: config.s3.endpoint_url.clone(),
                force_path_style: config.s3.force_path_style,
                region: config.s3.region.clone(),
            };
            Ok(Arc::new(crate::store::s3::S3Store::connect(&bucket, &prefix, &options).await?))
        }
        #[cfg(not(feature = "s3"))]
        StoreLocation::S3 { .. } => Err(InitError::Embedder("this build has no S3 support".into())),
    }
}

/// Builds the configured embedder. Network clients connect on first use;
/// the embedded USE-m3 model is opened (memory-mapped) on the first embed,
/// from `model_dir` as given (relative to the working directory: pass
/// [`Config::embedding_resolved`] to resolve it against the config file).
///
/// # Errors
/// [`InitError::Embedder`] when the provider is not built into this binary.
pub fn build_embedder(config: &EmbeddingConfig) -> Result<Arc<dyn Embedder>, InitError> {
    match config {
        EmbeddingConfig::Hashed { dimension } => Ok(Arc::new(HashedEmbedder::new(*dimension))),
        #[cfg(feature = "openai")]
        EmbeddingConfig::Openai { base_url, model, dimension, api_key_env, send_dimensions, timeout_ms } => {
            use crate::embed::openai::{OpenAiEmbedder, OpenAiEmbedderConfig};
            Ok(Arc::new(OpenAiEmbedder::new(OpenAiEmbedderConfig {
                base_url: base_url.clone(),
                model: model.clone(),
                dimension: *dimension,
                send_dimensions: *send_dimensions,
                api_key: std::env::var(api_key_env).ok().filter(|k| !k.is_empty()),
                timeout: Duration::from_millis(*timeout_ms),
            })))
        }
        #[cfg(not(feature = "openai"))]
        EmbeddingConfig::Openai { .. } => Err(InitError::Embedder("this build has no OpenAI client".into())),
        #[cfg(feature = "use-m3")]
        EmbeddingConfig::UseM3 { model_dir } => {
            Ok(Arc::new(crate::embed::use_m3::LazyUseM3Embedder::new(model_dir.as_str())))
        }
        #[cfg(not(feature = "use-m3"))]
        EmbeddingConfig::UseM3 { .. } => Err(InitError::Embedder("this build has no USE-m3 embedder".into())),
        #[cfg(all(feature = "use-m3", feature = "e5"))]
        EmbeddingConfig::UseM3E5 { model_dir, e5_model_dir } => Ok(Arc::new(crate::embed::ensemble::Ensemble::new(
            Arc::new(crate::embed::use_m3::LazyUseM3Embedder::new(model_dir.as_str())),
            Arc::new(crate::embed::e5::LazyE5Embedder::new(e5_model_dir.as_str())),
        ))),
        #[cfg(not(all(feature = "use-m3", feature = "e5")))]
        EmbeddingConfig::UseM3E5 { .. } => {
            Err(InitError::Embedder("this build has no USE-m3 and e5 embedders (features use-m3, e5)".into()))
        }
    }
}

#[cfg(all(test, feature = "use-m3"))]
mod tests {
    use super::*;

    #[tokio::test]
    async fn use_m3_is_built_without_touching_the_model_and_opened_on_first_embed() {
        let config = EmbeddingConfig::UseM3 { model_dir: "/nonexistent/skald-use-m3".into() };
        let embedder = build_embedder(&config).expect("building never opens the model");
        assert_eq!((embedder.id(), embedder.dimension()), ("use-m3-v3/512", 512));
        let err = embedder.embed(&["hello"]).await.expect_err("the model is missing");
        assert!(err.to_string().contains("scripts/setup-model.sh"), "{err}");
    }
}
