//! Sessions (CONTRACT §8): messages and a `meta.json` per session in the
//! store, under the owner's tree — the turn clock for dedup and the context
//! for query expansion. Sessions are never indexed.
//!
//! Layout under `accounts/{account}/tree/user/{user}/sessions/{id}/`:
//! `meta.json`, `messages/{seq:010}.json`, `.recall_log.json` (the ledger).
//!
//! Appends are safe under concurrency: each message claims its sequence
//! number by creating its object (create-if-absent), then `meta.json` is
//! updated by compare-and-swap, retried on conflict. A message sent with an
//! `id` that the session already holds is not appended again.

use std::collections::VecDeque;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::identity::Identity;
use crate::store::{PutMode, SharedStore, StoreError};
use crate::uri::{VikingUri, tree_key};

/// Compare-and-swap attempts before an append gives up.
const CAS_ATTEMPTS: u32 = 64;
/// Message ids remembered per session for idempotent appends.
pub const REMEMBERED_IDS: usize = 512;

/// What a session operation failed to do.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// No such session for this user.
    #[error("session {0} not found")]
    NotFound(String),
    /// Stored data could not be decoded.
    #[error("session data is corrupt: {0}")]
    Corrupt(String),
    /// Too many concurrent writers.
    #[error("session {0} is too busy; retry")]
    Contention(String),
}

/// A validated session id: 1-128 characters of `[A-Za-z0-9_.-]`, not `.`
/// or `..`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(String);

impl SessionId {
    /// Validates `text`.
    ///
    /// # Errors
    /// A message naming the value.
    pub fn new(text: &str) -> Result<Self, String> {
        let ok = (1..=128).contains(&text.len())
            && text != "."
            && text != ".."
            && text.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
        if ok {
            Ok(Self(text.to_owned()))
        } else {
            Err(format!("session_id {text:?} must be 1-128 characters of [A-Za-z0-9_.-]"))
        }
    }

    /// A fresh id: `s-` + 24 hex digits of a SHA-256 over the time, the
    /// process id and a process-wide counter (unique per process, spread
    /// over all 96 bits).
    #[must_use]
    pub fn generate() -> Self {
        use sha2::Digest as _;
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let mut hasher = sha2::Sha256::new();
        hasher.update(nanos.to_le_bytes());
        hasher.update(std::process::id().to_le_bytes());
        hasher.update(crate::index::unique().to_le_bytes());
        Self(format!("s-{}", hex::encode(&hasher.finalize()[..12])))
    }

    /// The id as text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A session's `meta.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionMeta {
    /// The id.
    pub session_id: String,
    /// Creation time (RFC 3339).
    pub created_at: String,
    /// Last change (RFC 3339).
    pub updated_at: String,
    /// Messages ever appended (monotonic; exact).
    pub total_message_count: u64,
    /// The next sequence number to try (≥ every claimed one + 1; a slot a
    /// duplicate retry gave back leaves a gap).
    #[serde(default)]
    pub next_seq: u64,
    /// User messages ever appended (monotonic): the turn clock.
    pub user_turn_count: u64,
    /// The most recent client message ids (for idempotent appends).
    #[serde(default)]
    pub recent_message_ids: VecDeque<String>,
}

/// A message as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredMessage {
    /// The client's id, or a generated one.
    pub id: String,
    /// `user` or `assistant`.
    pub role: String,
    /// Simple content.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub content: Option<String>,
    /// Parts (`text`, `context`, `tool`), as sent.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub parts: Option<Vec<Value>>,
    /// When it was created (as sent, else the server's time).
    pub created_at: String,
    /// The client's turn id.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub turn_id: Option<String>,
    /// `user_query`, `assistant_step`, `tool_transport` or `checkpoint`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub message_kind: Option<String>,
    /// The peer that sent it.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub peer_id: Option<String>,
    /// Source message ids (checkpoints).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub source_message_ids: Option<Vec<String>>,
    /// Its sequence number in the session.
    pub seq: u64,
}

impl StoredMessage {
    /// The message's text: `content`, else its text parts joined by newlines.
    #[must_use]
    pub fn text(&self) -> String {
        if let Some(c) = &self.content {
            return c.clone();
        }
        self.parts
            .iter()
            .flatten()
            .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// The sessions of one user in one store.
#[derive(Debug, Clone)]
pub struct Sessions<'a> {
    store: &'a SharedStore,
    identity: &'a Identity,
}

/// What an append did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    /// The meta after the append.
    pub meta: SessionMeta,
    /// Whether the message was new (false: its id was already there).
    pub added: bool,
}

impl<'a> Sessions<'a> {
    /// The sessions of `identity`'s user.
    #[must_use]
    pub fn new(store: &'a SharedStore, identity: &'a Identity) -> Self {
        Self { store, identity }
    }

    /// `viking://user/{user}/sessions/{id}`.
    #[must_use]
    pub fn uri(&self, id: &SessionId) -> VikingUri {
        self.identity.user_root().join(&format!("sessions/{}", id.as_str())).expect("validated session id")
    }

    fn key(&self, id: &SessionId, rest: &str) -> String {
        format!("{}/{rest}", tree_key(&self.identity.account, &self.uri(id)))
    }

    /// The store key of the session's dedup ledger.
    #[must_use]
    pub fn ledger_key(&self, id: &SessionId) -> String {
        self.key(id, ".recall_log.json")
    }

    fn meta_key(&self, id: &SessionId) -> String {
        self.key(id, "meta.json")
    }

    fn message_key(&self, id: &SessionId, seq: u64) -> String {
        self.key(id, &format!("messages/{seq:010}.json"))
    }

    /// The session's meta and its etag, or `None` when it does not exist.
    ///
    /// # Errors
    /// Store or decoding errors.
    pub async fn meta(&self, id: &SessionId) -> Result<Option<(SessionMeta, String)>, SessionError> {
        match self.store.get(&self.meta_key(id)).await {
            Ok(object) => {
                let meta = serde_json::from_slice(&object.body)
                    .map_err(|e| SessionError::Corrupt(format!("meta of {}: {e}", id.as_str())))?;
                Ok(Some((meta, object.meta.etag)))
            }
            Err(StoreError::NotFound(_)) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Creates the session if it does not exist; returns its meta and
    /// whether it was created now.
    ///
    /// # Errors
    /// Store or decoding errors.
    pub async fn create(&self, id: &SessionId, now: &str) -> Result<(SessionMeta, bool), SessionError> {
        let (meta, _, created) = self.meta_or_create(id, now).await?;
        Ok((meta, created))
    }

    /// The session's meta and its etag, creating the session first when it
    /// does not exist (`true`: created by this call). One read when it
    /// exists; a read and a create-if-absent when not (and a second read
    /// when a concurrent create won).
    async fn meta_or_create(&self, id: &SessionId, now: &str) -> Result<(SessionMeta, String, bool), SessionError> {
        if let Some((meta, etag)) = self.meta(id).await? {
            return Ok((meta, etag, false));
        }
        let meta = SessionMeta {
            session_id: id.as_str().to_owned(),
            created_at: now.to_owned(),
            updated_at: now.to_owned(),
            total_message_count: 0,
            next_seq: 0,
            user_turn_count: 0,
            recent_message_ids: VecDeque::new(),
        };
        match self.store.put(&self.meta_key(id), encode(&meta)?, PutMode::CreateNew).await {
            Ok(created) => Ok((meta, created.etag, true)),
            Err(StoreError::Conflict(_)) => {
                let (meta, etag) =
                    self.meta(id).await?.ok_or_else(|| SessionError::NotFound(id.as_str().to_owned()))?;
                Ok((meta, etag, false))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Appends `message` (its `seq` is assigned here), creating the session
    /// when needed. A message whose `id` the session already holds is not
    /// appended again.
    ///
    /// Cost: 3 store round trips in a row — a meta read (plus a meta create
    /// for a new session), a message create and a meta compare-and-swap;
    /// under contention each further attempt is a meta read and a
    /// compare-and-swap.
    ///
    /// # Errors
    /// Store errors, or contention after many retries.
    pub async fn append(
        &self,
        id: &SessionId,
        mut message: StoredMessage,
        now: &str,
    ) -> Result<Appended, SessionError> {
        let is_user = message.role == "user";
        let mut claimed: Option<u64> = None;
        // The first attempt works on the meta read (or created) here.
        let mut first = Some(self.meta_or_create(id, now).await?);
        for attempt in 1..=CAS_ATTEMPTS {
            let (mut meta, etag) = match first.take() {
                Some((meta, etag, _)) => (meta, etag),
                None => self.meta(id).await?.ok_or_else(|| SessionError::NotFound(id.as_str().to_owned()))?,
            };
            if meta.recent_message_ids.contains(&message.id) {
                if let Some(seq) = claimed {
                    // A concurrent retry of the same message won: give our slot back.
                    let _ = self.store.delete(&self.message_key(id, seq)).await;
                }
                return Ok(Appended { meta, added: false });
            }
            let seq = match claimed {
                Some(seq) => seq,
                None => {
                    let mut seq = meta.next_seq.max(meta.total_message_count);
                    loop {
                        message.seq = seq;
                        let body = encode(&message)?;
                        match self.store.put(&self.message_key(id, seq), body, PutMode::CreateNew).await {
                            Ok(_) => break,
                            Err(StoreError::Conflict(_)) => seq += 1,
                            Err(e) => return Err(e.into()),
                        }
                    }
                    claimed = Some(seq);
                    seq
                }
            };
            meta.total_message_count += 1;
            meta.next_seq = meta.next_seq.max(meta.total_message_count).max(seq + 1);
            if is_user {
                meta.user_turn_count += 1;
            }
            meta.updated_at = now.to_owned();
            meta.recent_message_ids.push_back(message.id.clone());
            while meta.recent_message_ids.len() > REMEMBERED_IDS {
                meta.recent_message_ids.pop_front();
            }
            match self.store.put(&self.meta_key(id), encode(&meta)?, PutMode::IfMatch(etag)).await {
                Ok(_) => return Ok(Appended { meta, added: true }),
                Err(StoreError::Conflict(_)) => {
                    tokio::time::sleep(std::time::Duration::from_millis(
                        u64::from(attempt.min(10)) * 3 + crate::index::unique() % 7,
                    ))
                    .await;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(SessionError::Contention(id.as_str().to_owned()))
    }

    /// The last `n` messages, oldest first: the `n` slots below the
    /// meta's `next_seq`, read concurrently (a slot a racing retry gave
    /// back is skipped, so fewer may come back).
    ///
    /// Cost: up to `n` concurrent GETs; no listing.
    ///
    /// # Errors
    /// Store or decoding errors.
    pub async fn recent_messages(
        &self,
        id: &SessionId,
        meta: &SessionMeta,
        n: usize,
    ) -> Result<Vec<StoredMessage>, SessionError> {
        let end = meta.next_seq.max(meta.total_message_count);
        let start = end.saturating_sub(n as u64);
        let reads = (start..end).map(|seq| {
            let key = self.message_key(id, seq);
            async move {
                match self.store.get(&key).await {
                    Ok(object) => serde_json::from_slice::<StoredMessage>(&object.body)
                        .map(Some)
                        .map_err(|e| SessionError::Corrupt(format!("message {key}: {e}"))),
                    Err(StoreError::NotFound(_)) => Ok(None),
                    Err(e) => Err(e.into()),
                }
            }
        });
        let read = futures_util::future::join_all(reads).await;
        read.into_iter().filter_map(Result::transpose).collect()
    }

    /// The session's newest archive overview
    /// (`history/archive_NNN/.overview.md`, by name) and the archive's URI;
    /// `None` when the session has no archive.
    ///
    /// Cost: one list of the session's `history/` and one GET.
    ///
    /// # Errors
    /// Store errors.
    pub async fn latest_archive_overview(&self, id: &SessionId) -> Result<Option<(VikingUri, String)>, SessionError> {
        let mut overviews: Vec<String> = self
            .store
            .list(&self.key(id, "history/"))
            .await?
            .into_iter()
            .map(|m| m.key)
            .filter(|k| k.ends_with("/.overview.md"))
            .collect();
        overviews.sort();
        let Some(key) = overviews.pop() else { return Ok(None) };
        let text = match self.store.get(&key).await {
            Ok(object) => String::from_utf8_lossy(&object.body).into_owned(),
            Err(StoreError::NotFound(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let uri = crate::uri::uri_for_tree_key(&self.identity.account, key.trim_end_matches("/.overview.md"));
        Ok(uri.map(|uri| (uri, crate::index::extract::directory_overview(&text).to_owned())))
    }
}

fn encode<T: Serialize>(value: &T) -> Result<Bytes, SessionError> {
    serde_json::to_vec(value).map(Bytes::from).map_err(|e| SessionError::Corrupt(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_are_validated() {
        assert!(SessionId::new("abc-123_x.y").is_ok());
        for bad in ["", ".", "..", "a/b", "a b", "../x", &"x".repeat(129)] {
            assert!(SessionId::new(bad).is_err(), "{bad:?}");
        }
        let generated = SessionId::generate();
        assert!(SessionId::new(generated.as_str()).is_ok());
        assert_eq!(generated.as_str().len(), 2 + 24, "{generated:?}");
        assert_ne!(generated, SessionId::generate());
        // Spread over all digits: the leading digit of 64 ids takes many values.
        let leading: std::collections::BTreeSet<u8> =
            (0..64).map(|_| SessionId::generate().as_str().as_bytes()[2]).collect();
        assert!(leading.len() > 4, "{leading:?}");
    }

    #[test]
    fn message_text_is_content_or_text_parts() {
        let mut m = StoredMessage {
            id: "m".into(),
            role: "user".into(),
            content: None,
            parts: Some(vec![
                serde_json::json!({"type": "text", "text": "a"}),
                serde_json::json!({"type": "context", "uri": "viking://x"}),
                serde_json::json!({"type": "text", "text": "b"}),
            ]),
            created_at: String::new(),
            turn_id: None,
            message_kind: None,
            peer_id: None,
            source_message_ids: None,
            seq: 0,
        };
        assert_eq!(m.text(), "a\nb");
        m.content = Some("c".into());
        assert_eq!(m.text(), "c");
    }
}
