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
//! the archive and the window only, and the archive lists the episodes
//! its attempts wrote, so a retried commit writes the same files once and
//! leaves none of an earlier attempt's windows behind ([`write_episodes`]).

pub mod commit;
pub mod episodes;
#[cfg(feature = "llm")]
pub mod extract;
#[cfg(feature = "llm")]
pub mod extractor;
pub mod tasks;

use futures_util::{StreamExt as _, TryStreamExt as _, stream};
use time::OffsetDateTime;

use crate::app::App;
use crate::identity::Identity;
use crate::indexer::Change;
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
    /// The memories were written but indexing them inline failed: the
    /// commit fails, and its retry indexes them.
    #[error("memories written but not indexed: {0}")]
    Index(String),
}

/// Writes the episodes of archive `archive` of `session` (its `messages`,
/// oldest first) into `identity`'s tree: `memories/events/YYYY/MM/DD/…`.
/// Returns their URIs, and the URIs of episodes an earlier attempt wrote
/// that this one does not make (removed).
///
/// An archive's messages can differ between attempts of one commit (a
/// late append fills a gap of the range before the mark moves), and so can
/// its windows: `.episodes.json` in the archive's directory lists every
/// episode any attempt may have written. Each attempt first adds its own
/// to that list, then writes them (create-if-absent; one that exists with
/// other content, an earlier attempt's, is replaced by compare-and-swap),
/// then deletes the listed episodes it does not make and lists only its
/// own. The attempt whose commit lands leaves exactly its episodes.
///
/// Cost: a GET and two PUTs of the list, one PUT per episode (one
/// exchange), [`WRITE_CONCURRENCY`] at a time, a GET more per episode that
/// exists, a DELETE per stale one.
///
/// Unknown outcomes: every step is repeatable; an error fails the call,
/// and running it again writes what is missing.
///
/// # Errors
/// [`MemoryError::Store`] when a read or write fails.
pub async fn write_episodes(
    store: &SharedStore,
    identity: &Identity,
    session: &SessionId,
    archive: u64,
    messages: &[StoredMessage],
    now: OffsetDateTime,
    options: &EpisodeOptions,
) -> Result<(Vec<VikingUri>, Vec<VikingUri>), MemoryError> {
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
    let ours: Vec<String> = placed.iter().map(|(uri, _)| uri.as_str().to_owned()).collect();
    let list_key = format!(
        "{}/.episodes.json",
        tree_key(&identity.account, &crate::sessions::Sessions::new(store, identity).archive_uri(session, archive))
    );
    let listed = read_list(store, &list_key).await?;
    let mut all = listed.clone();
    all.extend(ours.iter().filter(|u| !listed.contains(u)).cloned());
    if all != listed {
        store.put(&list_key, list_body(&all), PutMode::Overwrite).await?;
    }
    // Owned items: a future that borrowed from the stream's items would
    // not be `Send` for every lifetime, as the Lambda runtime needs.
    let writes: Vec<(String, bytes::Bytes)> = placed
        .iter()
        .map(|(uri, episode)| (tree_key(&identity.account, uri), bytes::Bytes::from(episode.body.clone())))
        .collect();
    let _: Vec<()> = stream::iter(writes)
        .map(|(key, body)| async move { put_episode(store, &key, body).await })
        .buffered(WRITE_CONCURRENCY)
        .try_collect()
        .await?;
    // Only ever episodes: the list is a file of the user's tree, and what
    // it names outside the user's events is never deleted.
    let events = root
        .join("memories/events")
        .map_err(|e| MemoryError::Store(StoreError::InvalidKey(format!("{root}/memories/events: {e}"))))?;
    let stale: Vec<VikingUri> = listed
        .iter()
        .filter(|u| !ours.contains(u))
        .filter_map(|u| VikingUri::parse(u).ok())
        .filter(|u| u.is_under(&events) && u != &events)
        .collect();
    for uri in &stale {
        store.delete(&tree_key(&identity.account, uri)).await?;
    }
    if all != ours {
        store.put(&list_key, list_body(&ours), PutMode::Overwrite).await?;
    }
    Ok((placed.into_iter().map(|(uri, _)| uri).collect(), stale))
}

/// The episode list at `key` (empty when there is none). A body that
/// does not decode is read once more (a response cut in transit decodes
/// on the second read) and is then an error, never an empty list: what it
/// names would be left behind as duplicates.
async fn read_list(store: &SharedStore, key: &str) -> Result<Vec<String>, MemoryError> {
    for attempt in 1..=2 {
        let object = match store.get(key).await {
            Ok(object) => object,
            Err(StoreError::NotFound(_)) => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        match serde_json::from_slice(&object.body) {
            Ok(listed) => return Ok(listed),
            Err(e) if attempt == 2 => {
                return Err(MemoryError::Store(StoreError::Backend {
                    op: "get",
                    key: key.to_owned(),
                    message: format!("the episode list does not decode: {e}"),
                }));
            }
            Err(_) => {}
        }
    }
    Ok(Vec::new())
}

fn list_body(uris: &[String]) -> bytes::Bytes {
    bytes::Bytes::from(serde_json::to_vec(uris).unwrap_or_default())
}

/// Writes one episode: created, or, when a file with other content is
/// there (an earlier attempt's window), replaced by compare-and-swap.
async fn put_episode(store: &SharedStore, key: &str, body: bytes::Bytes) -> Result<(), MemoryError> {
    for _ in 0..4 {
        match store.put(key, body.clone(), PutMode::CreateNew).await {
            Ok(_) => return Ok(()),
            Err(StoreError::Conflict(_)) => {}
            Err(e) => return Err(e.into()),
        }
        let existing = match store.get(key).await {
            Ok(existing) => existing,
            // Removed meanwhile: create it again.
            Err(StoreError::NotFound(_)) => continue,
            Err(e) => return Err(e.into()),
        };
        if existing.body == body {
            return Ok(());
        }
        match store.put(key, body.clone(), PutMode::IfMatch(existing.meta.etag)).await {
            Ok(_) => return Ok(()),
            Err(StoreError::Conflict(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Err(MemoryError::Store(StoreError::Conflict(key.to_owned())))
}

/// Remembers archive `archive` of `session`: writes its episodes
/// ([`write_episodes`], when `memory.episodes` is on) and, when the app
/// indexes memories inline ([`crate::config::Config::memory_index_inline`]),
/// indexes them (and removes the stale ones) through
/// [`crate::indexer::apply`], as a notification of each file would.
/// Returns the event memories the archive makes.
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
) -> Result<Vec<VikingUri>, MemoryError> {
    if !app.config.memory.episodes {
        return Ok(Vec::new());
    }
    let options = app.config.memory.episode_options();
    let (events, stale) = write_episodes(&app.store, identity, session, archive, messages, now, &options).await?;
    if app.config.memory_index_inline() {
        // The stale ones are gone from the store: the indexer removes them.
        let changed: Vec<VikingUri> = events.iter().chain(&stale).cloned().collect();
        index_now(app, identity, &changed, now.unix_timestamp()).await.map_err(MemoryError::Index)?;
    }
    Ok(events)
}

/// Brings the index in step with `uris` of `identity`'s tree, written or
/// removed at `at` (Unix seconds), through the indexer's own
/// [`crate::indexer::apply`], as the store's notifications of them would:
/// what a store that sends none needs. Nothing to do for no URIs.
///
/// Cost: [`crate::indexer::apply`] over them (an embedding per changed
/// file, one index commit).
///
/// # Errors
/// The indexer's error, as text.
pub async fn index_now(app: &App, identity: &Identity, uris: &[VikingUri], at: i64) -> Result<(), String> {
    if uris.is_empty() {
        return Ok(());
    }
    let changes: Vec<Change> =
        uris.iter().map(|uri| Change { key: tree_key(&identity.account, uri), at, version: None }).collect();
    crate::indexer::apply(app, &changes).await.map(|_| ()).map_err(|e| e.to_string())
}
