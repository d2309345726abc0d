//! Memory from conversations: what a committed session said becomes memory
//! that later sessions find.
//!
//! A commit archives the session's messages ([`crate::sessions`]) and then
//! remembers the archive ([`remember_archive`]): its messages become
//! episodes ([`episodes`]), event memories of the user's tree written as
//! files under `memories/events/`, which reach the index as any file does
//! (the store's change notifications and the `indexer` function; inline,
//! through the same [`crate::indexer::apply`], where the store sends none).
//! Each commit records a task ([`tasks`]) saying what was made of it.
//!
//! Everything is repeatable: episode names are built from the session,
//! the archive and the window only, written create-if-absent, so a retried
//! commit or a redelivered event writes the same files once.

pub mod episodes;
pub mod tasks;

use futures_util::{StreamExt as _, TryStreamExt as _, stream};
use time::OffsetDateTime;

use crate::app::App;
use crate::identity::Identity;
use crate::indexer::{Change, IndexerReport};
use crate::sessions::{SessionId, StoredMessage};
use crate::store::{PutMode, SharedStore, StoreError};
use crate::uri::{VikingUri, tree_key};
use episodes::{Episode, EpisodeOptions};

/// Episode writes in flight at once.
const WRITE_CONCURRENCY: usize = 8;

/// What remembering one archive failed to do.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// The store failed writing a memory.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The memories were written but indexing them inline failed (the
    /// next change to them, or an ingest, indexes them).
    #[error("memories written but not indexed: {0}")]
    Index(String),
}

/// What remembering one archive made.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Remembered {
    /// The event memories the archive makes, written now or by an earlier
    /// attempt (whose files are left as they are).
    pub events: Vec<VikingUri>,
    /// Of those, how many this call wrote.
    pub written: usize,
    /// The inline indexing's report (`None`: left to notifications).
    pub indexed: Option<IndexerReport>,
}

/// Writes the episodes of archive `archive` of `session` (its `messages`,
/// oldest first) into `identity`'s tree: `memories/events/YYYY/MM/DD/…`,
/// each by create-if-absent. `now` dates messages whose `created_at` does
/// not parse.
///
/// Cost: one PUT per episode (one exchange),
/// [`WRITE_CONCURRENCY`] at a time.
///
/// Unknown outcomes: a `Conflict` means the file is there (this archive's
/// episode from an earlier attempt, or a user's edit of it since: either
/// way it is left alone); a `Backend` error fails the call, and running it
/// again writes what is missing.
///
/// # Errors
/// [`MemoryError::Store`] when a write fails.
pub async fn write_episodes(
    store: &SharedStore,
    identity: &Identity,
    session: &SessionId,
    archive: u64,
    messages: &[StoredMessage],
    now: OffsetDateTime,
    options: &EpisodeOptions,
) -> Result<(Vec<VikingUri>, usize), MemoryError> {
    let root = identity.user_root();
    let made = episodes::episodes(session, archive, messages, now, options);
    let placed: Vec<(VikingUri, Episode)> = made
        .into_iter()
        .filter_map(|episode| {
            // Paths are built from validated parts; one that still does not
            // parse is left out, never written elsewhere.
            let uri = root.join(&episode.path).ok()?;
            Some((uri, episode))
        })
        .collect();
    // Owned items: a future that borrowed from the stream's items would
    // not be `Send` for every lifetime, as the Lambda runtime needs.
    let writes: Vec<(String, bytes::Bytes)> = placed
        .iter()
        .map(|(uri, episode)| (tree_key(&identity.account, uri), bytes::Bytes::from(episode.body.clone())))
        .collect();
    let written: Vec<bool> = stream::iter(writes)
        .map(|(key, body)| async move {
            match store.put(&key, body, PutMode::CreateNew).await {
                Ok(_) => Ok(true),
                Err(StoreError::Conflict(_)) => Ok(false),
                Err(e) => Err(MemoryError::Store(e)),
            }
        })
        .buffered(WRITE_CONCURRENCY)
        .try_collect()
        .await?;
    let count = written.iter().filter(|w| **w).count();
    Ok((placed.into_iter().map(|(uri, _)| uri).collect(), count))
}

/// Remembers archive `archive` of `session`: writes its episodes
/// ([`write_episodes`], when `memory.episodes` is on) and, when the app
/// indexes memories inline ([`crate::config::Config::memory_index_inline`]),
/// indexes them through [`crate::indexer::apply`], as a notification of
/// each file would.
///
/// Cost: the episode writes; inline, an embedding per new episode and one
/// index commit.
///
/// # Errors
/// [`MemoryError`]: a write failed (nothing is lost: the archive holds the
/// messages, and remembering it again writes what is missing), or the
/// inline indexing failed.
pub async fn remember_archive(
    app: &App,
    identity: &Identity,
    session: &SessionId,
    archive: u64,
    messages: &[StoredMessage],
    now: OffsetDateTime,
) -> Result<Remembered, MemoryError> {
    if !app.config.memory.episodes {
        return Ok(Remembered::default());
    }
    let options = app.config.memory.episode_options();
    let (events, written) = write_episodes(&app.store, identity, session, archive, messages, now, &options).await?;
    let indexed = if app.config.memory_index_inline() && !events.is_empty() {
        let changes: Vec<Change> = events
            .iter()
            .map(|uri| Change { key: tree_key(&identity.account, uri), at: now.unix_timestamp(), version: None })
            .collect();
        let report = crate::indexer::apply(app, &changes).await.map_err(|e| MemoryError::Index(e.to_string()))?;
        Some(report)
    } else {
        None
    };
    Ok(Remembered { events, written, indexed })
}
