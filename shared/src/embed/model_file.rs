//! What the embedded embedders share about their model files: the bytes,
//! memory-mapped read-only (or owned, for tests and tools), and opening
//! them once, lazily, on tokio's blocking pool.

use std::ops::Range;
use std::path::Path;

use super::EmbedError;

/// A model file's bytes: mapped, or owned.
pub(crate) enum ModelBytes {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl std::ops::Deref for ModelBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Self::Mapped(m) => m,
            Self::Owned(v) => v,
        }
    }
}

/// An unusable model file `path` of the model `what`, and how to fix it.
pub(crate) fn invalid(what: &str, path: &Path, e: impl std::fmt::Display) -> EmbedError {
    EmbedError::Config(format!(
        "{what} model file {}: {e}; run scripts/setup-model.sh to fetch it again",
        path.display()
    ))
}

impl ModelBytes {
    /// Maps `path` read-only. Cost: a system call; no page is read.
    ///
    /// # Errors
    /// [`EmbedError::Config`] naming `what` and the file, saying to run
    /// `scripts/setup-model.sh` when it is missing or unreadable.
    #[allow(unsafe_code)]
    pub(crate) fn map(what: &str, path: &Path) -> Result<Self, EmbedError> {
        let file = std::fs::File::open(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                EmbedError::Config(format!(
                    "{what} model file {} not found: run scripts/setup-model.sh",
                    path.display()
                ))
            } else {
                invalid(what, path, e)
            }
        })?;
        // SAFETY: the mapping is read-only and the file was opened
        // read-only. `scripts/setup-model.sh` writes a model file to a
        // temporary name and renames it into place; nothing in Skald writes
        // to it afterwards (a new file renamed over the name leaves this
        // inode and the mapping intact). Truncating it from outside would be
        // the only way to invalidate the mapping, which is outside our
        // contract.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| invalid(what, path, e))?;
        Ok(Self::Mapped(map))
    }

    /// Advises the kernel that `range` is read at random (no readahead or
    /// fault-around), so only the rows a text uses become resident.
    /// Advisory: a refusal, or owned bytes, change nothing.
    pub(crate) fn advise_random(&self, range: Range<usize>) {
        #[cfg(unix)]
        if let Self::Mapped(map) = self {
            let _ = map.advise_range(memmap2::Advice::Random, range.start, range.len());
        }
        #[cfg(not(unix))]
        let _ = range;
    }
}

/// The value in `cell`, made by `open` on tokio's blocking pool on the
/// first call; a failed open is retried by the next call.
///
/// # Errors
/// `open`'s error, or [`EmbedError::Provider`] naming `id` when the
/// blocking task failed.
pub(crate) async fn open_once<'a, T: Send + 'static>(
    cell: &'a tokio::sync::OnceCell<T>,
    id: &str,
    open: impl FnOnce() -> Result<T, EmbedError> + Send + 'static,
) -> Result<&'a T, EmbedError> {
    cell.get_or_try_init(|| async {
        tokio::task::spawn_blocking(open).await.map_err(|e| EmbedError::Provider {
            provider: id.to_owned(),
            message: format!("opening the model failed: {e}"),
        })?
    })
    .await
}

/// `embed(texts)` on tokio's blocking pool (an embedded model computes on
/// the calling thread); no texts, no task.
///
/// # Errors
/// [`EmbedError::Provider`] naming `id` when the blocking task failed.
pub(crate) async fn embed_blocking(
    id: &str,
    texts: &[&str],
    embed: impl FnOnce(&[&str]) -> Vec<Vec<f32>> + Send + 'static,
) -> Result<Vec<Vec<f32>>, EmbedError> {
    if texts.is_empty() {
        return Ok(Vec::new());
    }
    let owned: Vec<String> = texts.iter().map(|t| (*t).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let refs: Vec<&str> = owned.iter().map(String::as_str).collect();
        embed(&refs)
    })
    .await
    .map_err(|e| EmbedError::Provider { provider: id.to_owned(), message: format!("embedding task failed: {e}") })
}
