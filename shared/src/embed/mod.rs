//! Embedders behind one trait. Every vector an embedder returns is
//! L2-normalised, so cosine similarity is a dot product. Vectors from
//! different embedders are not comparable: the index records
//! [`Embedder::id`] and [`Embedder::dimension`] and refuses to mix.

use async_trait::async_trait;

#[cfg(feature = "e5")]
pub mod e5;
pub mod ensemble;
pub mod hashed;
#[cfg(any(feature = "use-m3", feature = "e5"))]
pub(crate) mod kernel;
#[cfg(any(feature = "use-m3", feature = "e5"))]
mod model_file;
#[cfg(feature = "openai")]
pub mod openai;
#[cfg(feature = "use-m3")]
pub mod use_m3;

/// What an embedder failed to do.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// The provider could not be reached or answered with an error.
    #[error("embedding provider {provider} failed: {message}")]
    Provider {
        /// The embedder id.
        provider: String,
        /// What went wrong.
        message: String,
    },
    /// The provider answered vectors of the wrong size or count.
    #[error("embedding provider {provider} returned {got} values where {want} were expected")]
    Shape {
        /// The embedder id.
        provider: String,
        /// Expected count or dimension.
        want: usize,
        /// What came back.
        got: usize,
    },
    /// The configuration is unusable (missing key, bad URL, …).
    #[error("embedder configuration: {0}")]
    Config(String),
}

/// Turns texts into L2-normalised vectors of a fixed dimension.
#[async_trait]
pub trait Embedder: Send + Sync + std::fmt::Debug {
    /// A stable id naming the model and its settings, recorded by the index
    /// (e.g. `hashed-ngram-v1/256`, `openai:text-embedding-3-small/512`).
    fn id(&self) -> &str;

    /// The vector dimension.
    fn dimension(&self) -> usize;

    /// Whether it can embed images (`image_url`). Default: no.
    fn supports_images(&self) -> bool {
        false
    }

    /// One L2-normalised vector per text, in order. An empty text gives a
    /// valid (possibly zero) vector, never an error.
    ///
    /// # Errors
    /// [`EmbedError`] when the provider fails or answers the wrong shape.
    async fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError>;

    /// One vector per search query, in order, to compare with the vectors
    /// [`Embedder::embed`] gives documents. An asymmetric model embeds a
    /// query unlike a document (E5's `query: ` and `passage: ` prefixes);
    /// the default embeds it as one. Every search embeds its queries here,
    /// ingest its documents through [`Embedder::embed`].
    ///
    /// # Errors
    /// As [`Embedder::embed`].
    async fn embed_queries(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.embed(texts).await
    }
}

/// Scales `v` to unit length in place (a zero vector stays zero).
pub fn l2_normalise(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 && norm.is_finite() {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

/// The dot product of two equally long vectors (cosine for unit vectors).
///
/// Cost: `len` multiply-adds over eight independent accumulators, which the
/// compiler vectorises.
#[must_use]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ca, ta) = a.as_chunks::<8>();
    let (cb, tb) = b.as_chunks::<8>();
    for (x, y) in ca.iter().zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let tail: f32 = ta.iter().zip(tb).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_matches_the_naive_sum() {
        let a: Vec<f32> = (0..37).map(|i| i as f32 * 0.5).collect();
        let b: Vec<f32> = (0..37).map(|i| 1.0 - i as f32 * 0.01).collect();
        let naive: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert!((dot(&a, &b) - naive).abs() < 1e-3);
    }

    #[test]
    fn normalise_gives_unit_length_and_keeps_zero() {
        let mut v = vec![3.0, 4.0];
        l2_normalise(&mut v);
        assert_eq!(v, vec![0.6, 0.8]);
        let mut z = vec![0.0; 3];
        l2_normalise(&mut z);
        assert_eq!(z, vec![0.0; 3]);
    }
}
