//! A deterministic hashed character n-gram embedder: a test double only.
//!
//! It needs no model and no network, and similar spellings give similar
//! vectors, but it knows nothing of meaning and nothing across languages
//! (recall@5 ≈ 0.5 on the demo check). Tests use it where retrieval quality
//! is not what they measure.

use async_trait::async_trait;

use super::{EmbedError, Embedder, l2_normalise};

/// Hashes lowercase character 1-, 2- and 3-grams (with word boundaries)
/// into `dimension` signed buckets.
#[derive(Debug, Clone)]
pub struct HashedEmbedder {
    id: String,
    dimension: usize,
}

impl HashedEmbedder {
    /// A hashed embedder of `dimension` (at least 8) buckets; id
    /// `hashed-ngram-v1/{dimension}`.
    #[must_use]
    pub fn new(dimension: usize) -> Self {
        let dimension = dimension.max(8);
        Self { id: format!("hashed-ngram-v1/{dimension}"), dimension }
    }

    /// The vector of one text (synchronous; cost linear in its length).
    #[must_use]
    pub fn embed_one(&self, text: &str) -> Vec<f32> {
        let mut v = vec![0.0f32; self.dimension];
        let chars: Vec<char> =
            std::iter::once(' ').chain(text.chars().flat_map(char::to_lowercase)).chain(std::iter::once(' ')).collect();
        for n in 1..=3usize {
            if chars.len() < n {
                continue;
            }
            let weight = n as f32;
            for gram in chars.windows(n) {
                if n == 1 && gram[0].is_whitespace() {
                    continue;
                }
                let h = fnv1a(gram);
                let bucket = (h % self.dimension as u64) as usize;
                let sign = if (h >> 63) == 0 { 1.0 } else { -1.0 };
                v[bucket] += sign * weight;
            }
        }
        l2_normalise(&mut v);
        v
    }
}

fn fnv1a(chars: &[char]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for c in chars {
        for b in u32::from(*c).to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

#[async_trait]
impl Embedder for HashedEmbedder {
    fn id(&self) -> &str {
        &self.id
    }

    fn dimension(&self) -> usize {
        self.dimension
    }

    async fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts.iter().map(|t| self.embed_one(t)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::dot;

    #[test]
    fn deterministic_unit_vectors_where_similar_text_scores_higher() {
        let e = HashedEmbedder::new(256);
        let a = e.embed_one("S3 conditional writes with If-Match");
        assert_eq!(a, e.embed_one("S3 conditional writes with If-Match"));
        assert!((dot(&a, &a) - 1.0).abs() < 1e-5);
        let near = e.embed_one("conditional writes in S3");
        let far = e.embed_one("my cat likes tuna");
        assert!(dot(&a, &near) > dot(&a, &far) + 0.1);
        assert_eq!(e.embed_one("").len(), 256);
    }
}
