//! Sessions: messages and a `meta.json` per session in the
//! store, under the owner's tree — the turn clock for dedup and the context
//! for query expansion. Sessions are never indexed.
//!
//! Layout under `accounts/{account}/tree/user/{user}/sessions/{id}/`:
//! `meta.json`, `messages/{seq:010}.json`, `.recall_log.json` (the ledger),
//! and one `history/archive_{NNN}/` per commit (`.meta.json` with the
//! archived sequence range, `.abstract.md`, `.overview.md`).
//!
//! Appends are safe under concurrency: each message claims its sequence
//! number by creating its object (create-if-absent), then `meta.json` is
//! updated by compare-and-swap, retried on conflict. A message exists only
//! once the meta records it: the meta's `gaps` name the slots below its
//! `next_seq` that it does not record (claims still in flight, or left by
//! appends that failed after claiming), and every read skips them. A
//! message sent with an `id` that the session already holds is not
//! appended again.
//!
//! When S3 leaves a write's outcome unknown (a timeout, a 5xx, or a 412
//! that may answer the SDK's retry of our own landed write), the next read
//! decides: a slot holding our append's claim token is our claim; a meta
//! recording our message id at our claimed sequence number is our landed
//! update. No slot a meta records is ever deleted; an unrecorded slot is
//! deleted only by the commit whose archive mark passes it, below which no
//! append claims again.
//!
//! A commit ([`Sessions::plan_commit`], then [`Sessions::write_archive`])
//! archives the messages since the last archive: it claims
//! `history/archive_{N}/.meta.json` by create-if-absent with the sequence
//! range it covers, writes the summaries, then moves the meta's archive mark
//! by compare-and-swap. Every step can be repeated: a retry after a write
//! whose outcome S3 left unknown finds its own claim (same range) and its
//! own meta update (mark already moved), and reports the same archive.

use std::collections::VecDeque;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::identity::Identity;
use crate::store::{PutMode, SharedStore, StoreError};
use crate::uri::{VikingUri, tree_key};

/// Compare-and-swap attempts before an append gives up.
const CAS_ATTEMPTS: u32 = 64;
/// Writes in a row whose outcome is unknown (each followed by the read
/// that decides) before an operation gives up with the store's error.
const UNKNOWN_ATTEMPTS: u32 = 3;
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
    /// An append gave up at its stop, crowded out by concurrent appends to
    /// the session: nothing was applied, and a retry after `retry_after_s`
    /// seconds (with the same message id) applies it once.
    #[error("session {session} is busy with concurrent appends; retry in {retry_after_s} s")]
    Busy {
        /// The session.
        session: String,
        /// Seconds to wait before retrying (1 to [`MAX_RETRY_AFTER_S`],
        /// spread so that the crowd's retries do not meet again).
        retry_after_s: u64,
    },
}

/// Meta compare-and-swaps an append may lose before it stops, crowded out
/// ([`SessionError::Busy`]): past this, waiting its turn in the crowd costs
/// the store more than coming back later.
pub const APPEND_LOST_SWAPS: u32 = 8;
/// The longest wait a crowded-out append is told to take.
pub const MAX_RETRY_AFTER_S: u64 = 30;

impl SessionError {
    /// Crowded out behind about `ahead` appends in flight, each
    /// compare-and-swap round having taken `round` (one append lands per
    /// round at best): told to come back at a random second within what
    /// the crowd ahead needs to drain (2 to [`MAX_RETRY_AFTER_S`] seconds),
    /// so that the crowd's retries spread out rather than meet again.
    fn busy(id: &SessionId, ahead: u64, round: std::time::Duration) -> Self {
        let drain = (ahead as f64 * round.as_secs_f64()).ceil() as u64;
        let window = drain.clamp(2, MAX_RETRY_AFTER_S);
        Self::Busy { session: id.as_str().to_owned(), retry_after_s: 1 + crate::index::unique() % window }
    }
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
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
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
    /// The sequence numbers of the newest `recent_message_ids`, aligned with
    /// their tail (a meta written before they were kept has fewer).
    #[serde(default)]
    pub recent_message_seqs: VecDeque<u64>,
    /// Sequence numbers between the archive mark and `next_seq` that hold
    /// no recorded message (sorted): slots claimed by appends that have not
    /// recorded them yet, or never will. Reads skip them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gaps: Vec<u64>,
    /// Archives made by commits (`history/archive_001` … `archive_{N}`).
    #[serde(default)]
    pub commit_count: u64,
    /// Messages with a sequence number below this are archived.
    #[serde(default)]
    pub archived_seq: u64,
    /// Messages archived so far (live = total − archived).
    #[serde(default)]
    pub archived_message_count: u64,
    /// Estimated tokens of the messages not yet archived.
    #[serde(default)]
    pub pending_tokens: u64,
    /// When the last commit archived (RFC 3339), or `""`.
    #[serde(default)]
    pub last_commit_at: String,
    /// Memories the session's commits made, per category, with `total`
    /// ([`crate::memory`]).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub memories_extracted: std::collections::BTreeMap<String, u64>,
}

impl SessionMeta {
    /// Messages not yet archived.
    #[must_use]
    pub fn live_message_count(&self) -> u64 {
        self.total_message_count.saturating_sub(self.archived_message_count)
    }

    /// One past the highest sequence number claimed.
    #[must_use]
    pub fn end_seq(&self) -> u64 {
        self.next_seq.max(self.total_message_count)
    }

    /// Whether the meta records a message at `seq`.
    #[must_use]
    pub fn records(&self, seq: u64) -> bool {
        seq >= self.archived_seq && seq < self.end_seq() && self.gaps.binary_search(&seq).is_err()
    }

    /// The recorded sequence numbers in `range`, ascending.
    pub fn recorded_in(&self, range: std::ops::Range<u64>) -> impl Iterator<Item = u64> + '_ {
        range.filter(|seq| self.records(*seq))
    }

    /// Whether message `id` was appended: `None` when not (as far as the
    /// remembered ids go); `Some(seq)` with its sequence number when the
    /// meta kept it.
    #[must_use]
    pub fn appended(&self, id: &str) -> Option<Option<u64>> {
        let at = self.recent_message_ids.iter().rposition(|m| m == id)?;
        let offset = self.recent_message_ids.len().saturating_sub(self.recent_message_seqs.len());
        Some(at.checked_sub(offset).and_then(|i| self.recent_message_seqs.get(i).copied()))
    }

    /// Records message `id` at `seq` (a slot claimed by this append): the
    /// counters, the gaps it opens or closes, the remembered ids.
    fn record(&mut self, id: &str, seq: u64, tokens: u64, is_user: bool, now: &str) {
        let end = self.end_seq();
        if seq >= end {
            self.gaps.extend(end..seq);
            self.next_seq = seq + 1;
        } else if let Ok(at) = self.gaps.binary_search(&seq) {
            self.gaps.remove(at);
        }
        self.next_seq = self.next_seq.max(self.end_seq());
        self.total_message_count += 1;
        self.pending_tokens += tokens;
        if is_user {
            self.user_turn_count += 1;
        }
        self.updated_at = now.to_owned();
        // Align the seqs with the ids' tail before both grow.
        while self.recent_message_seqs.len() > self.recent_message_ids.len() {
            self.recent_message_seqs.pop_front();
        }
        self.recent_message_ids.push_back(id.to_owned());
        self.recent_message_seqs.push_back(seq);
        while self.recent_message_ids.len() > REMEMBERED_IDS {
            self.recent_message_ids.pop_front();
        }
        while self.recent_message_seqs.len() > self.recent_message_ids.len() {
            self.recent_message_seqs.pop_front();
        }
    }
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
    /// The token of the append that claimed the slot: a slot read back
    /// after an unknown outcome is this append's own only when it holds
    /// this append's token (a concurrent retry of the same message has
    /// another).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub claim: Option<String>,
}

impl StoredMessage {
    /// Estimated tokens of what the message carries: its text, and its
    /// tool parts' inputs and outputs (what an archive summary reads).
    #[must_use]
    pub fn token_estimate(&self) -> u64 {
        let tools: u64 = self
            .parts
            .iter()
            .flatten()
            .filter(|p| p.get("type").and_then(Value::as_str) == Some("tool"))
            .flat_map(|p| ["tool_input", "tool_output"].map(|k| p.get(k).cloned()))
            .flatten()
            .map(|v| match v {
                Value::String(s) => crate::tokens::estimate_tokens(&s) as u64,
                other => crate::tokens::estimate_tokens(&other.to_string()) as u64,
            })
            .sum();
        crate::tokens::estimate_tokens(&self.text()) as u64 + tools
    }

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
    ///
    /// A body that does not decode is read once more before it counts as
    /// corrupt (a response cut in transit decodes on the second read).
    pub async fn meta(&self, id: &SessionId) -> Result<Option<(SessionMeta, String)>, SessionError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let object = match self.store.get(&self.meta_key(id)).await {
                Ok(object) => object,
                Err(StoreError::NotFound(_)) => return Ok(None),
                Err(e) => return Err(e.into()),
            };
            match serde_json::from_slice(&object.body) {
                Ok(meta) => return Ok(Some((meta, object.meta.etag))),
                Err(e) if attempt >= 2 => {
                    return Err(SessionError::Corrupt(format!("meta of {}: {e}", id.as_str())));
                }
                Err(e) => {
                    tracing::warn!(session = id.as_str(), error = %e, "session meta does not decode; reading it again")
                }
            }
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
            ..SessionMeta::default()
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
    /// compare-and-swap. A write whose outcome is unknown costs one read
    /// that decides (the slot, or the meta).
    ///
    /// Unknown outcomes: a slot create that may have landed is read back (our
    /// claim token there: the slot is ours); a meta update that may have
    /// landed is decided by the next meta read (our id recorded at our
    /// sequence number: it landed). An error leaves at most a claimed slot
    /// the meta does not record, which no read shows; a retry with the same
    /// message id appends it once.
    ///
    /// Crowds: a slot another append took sends this one a little further
    /// on (a random step that doubles with each slot lost in a row, up to
    /// 64), so `n` simultaneous appends claim in a few tries each rather
    /// than walking the `n` slots one by one; the slots skipped are gaps
    /// no read shows, until a later append claims them. At `give_up_at`, or
    /// after [`APPEND_LOST_SWAPS`] lost compare-and-swaps, once a meta read
    /// shows the append did not land, it stops with nothing applied
    /// ([`SessionError::Busy`], with a wait sized to the crowd ahead).
    ///
    /// # Errors
    /// [`SessionError::Busy`] when crowded out; store errors (after
    /// [`UNKNOWN_ATTEMPTS`] unknown outcomes in a row); contention after
    /// many retries.
    pub async fn append(
        &self,
        id: &SessionId,
        mut message: StoredMessage,
        now: &str,
        give_up_at: std::time::Instant,
    ) -> Result<Appended, SessionError> {
        let is_user = message.role == "user";
        let tokens = message.token_estimate();
        message.claim = Some(format!("{:016x}", crate::index::unique()));
        let mut claimed: Option<u64> = None;
        let (mut unknown, mut lost) = (0, 0);
        let started = std::time::Instant::now();
        // The first attempt works on the meta read (or created) here.
        let mut first = Some(self.meta_or_create(id, now).await?);
        for attempt in 1..=CAS_ATTEMPTS {
            let (mut meta, etag) = match first.take() {
                Some((meta, etag, _)) => (meta, etag),
                None => self.meta(id).await?.ok_or_else(|| SessionError::NotFound(id.as_str().to_owned()))?,
            };
            match meta.appended(&message.id) {
                // Our own update, whose outcome was unknown, landed.
                Some(Some(seq)) if Some(seq) == claimed => return Ok(Appended { meta, added: true }),
                Some(_) => {
                    // An earlier request (or a concurrent retry) appended
                    // it. Our slot, if we claimed one, stays unrecorded: no
                    // read shows it, and a later commit deletes it.
                    // (Deleting it now could, through the SDK's retry of
                    // the delete, remove a slot another append has claimed
                    // since.)
                    return Ok(Appended { meta, added: false });
                }
                None => {}
            }
            // Not applied, as this read shows: the one point to stop cleanly.
            if std::time::Instant::now() >= give_up_at || lost >= APPEND_LOST_SWAPS {
                // The appends in flight: those that claimed a slot below ours.
                let ahead = claimed.map_or(0, |seq| seq.saturating_sub(meta.end_seq())).max(u64::from(lost));
                return Err(SessionError::busy(id, ahead, started.elapsed() / attempt));
            }
            if let Some(seq) = claimed.filter(|seq| *seq < meta.archived_seq) {
                // A commit archived past our slot while we waited (and will
                // delete it: no append claims below the archive mark):
                // claim anew.
                tracing::debug!(
                    session = id.as_str(),
                    seq,
                    "slot archived past before it was recorded; claiming another"
                );
                claimed = None;
            }
            let seq = match claimed {
                Some(seq) => seq,
                None => {
                    let seq = self.claim_slot(id, &mut message, meta.end_seq(), give_up_at, started).await?;
                    claimed = Some(seq);
                    seq
                }
            };
            meta.record(&message.id, seq, tokens, is_user, now);
            match self.store.put(&self.meta_key(id), encode(&meta)?, PutMode::IfMatch(etag)).await {
                Ok(_) => return Ok(Appended { meta, added: true }),
                Err(StoreError::Conflict(_)) => {
                    lost += 1;
                    backoff(attempt).await;
                }
                Err(e @ StoreError::Backend { .. }) => {
                    unknown += 1;
                    if unknown >= UNKNOWN_ATTEMPTS {
                        return Err(e.into());
                    }
                    tracing::warn!(session = id.as_str(), error = %e, "session meta write outcome unknown; reading it back");
                    backoff(attempt).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(SessionError::Contention(id.as_str().to_owned()))
    }

    /// Claims a free slot at or after `from` for `message` (its `seq` set
    /// to the slot) by create-if-absent. A create that answers "taken" or
    /// fails without an answer is read back: a slot that holds this
    /// append's claim token is its own; a missing one after an unknown
    /// outcome is tried again; any other sends the claim on by a random step
    /// that doubles with each slot lost in a row (up to 64), so that `n`
    /// simultaneous appends claim in a few tries each rather than walking
    /// the `n` slots one by one.
    ///
    /// # Errors
    /// [`SessionError::Busy`] at `give_up_at` (a slot claimed before stays
    /// an unrecorded gap); store errors (after [`UNKNOWN_ATTEMPTS`] unknown
    /// outcomes in a row).
    async fn claim_slot(
        &self,
        id: &SessionId,
        message: &mut StoredMessage,
        from: u64,
        give_up_at: std::time::Instant,
        started: std::time::Instant,
    ) -> Result<u64, SessionError> {
        let mut seq = from;
        let (mut unknown, mut lost, mut tries) = (0, 0_u32, 1_u32);
        loop {
            if std::time::Instant::now() >= give_up_at {
                return Err(SessionError::busy(id, seq - from, started.elapsed() / tries));
            }
            tries += 1;
            message.seq = seq;
            let key = self.message_key(id, seq);
            let error = match self.store.put(&key, encode(&*message)?, PutMode::CreateNew).await {
                Ok(_) => return Ok(seq),
                Err(e @ (StoreError::Conflict(_) | StoreError::Backend { .. })) => e,
                Err(e) => return Err(e.into()),
            };
            let ambiguous = matches!(error, StoreError::Backend { .. });
            if ambiguous {
                unknown += 1;
                if unknown >= UNKNOWN_ATTEMPTS {
                    return Err(error.into());
                }
            }
            match self.store.get(&key).await {
                Ok(object) => {
                    let holder = serde_json::from_slice::<StoredMessage>(&object.body).map(|m| m.claim);
                    if holder.ok().flatten().is_some_and(|claim| message.claim.as_ref() == Some(&claim)) {
                        return Ok(seq);
                    }
                }
                // Nothing landed: try the same slot again.
                Err(StoreError::NotFound(_)) if ambiguous => continue,
                // Taken, then given back: on.
                Err(StoreError::NotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
            lost += 1;
            seq += 1 + crate::index::unique() % (1 << lost.min(6));
        }
    }

    /// The last `n` messages not yet archived, oldest first: the `n` slots
    /// below the meta's `next_seq` (and not below its archive mark), read
    /// concurrently (a slot a racing retry gave back is skipped, so fewer
    /// may come back).
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
        let mut seqs: Vec<u64> =
            (meta.archived_seq..meta.end_seq()).rev().filter(|s| meta.records(*s)).take(n).collect();
        seqs.reverse();
        self.messages_at(id, seqs).await
    }

    /// The messages not yet archived, oldest first (at most
    /// [`MAX_ARCHIVE_MESSAGES`], the oldest), from sequence number `from`
    /// on when given (a commit whose archive mark has not moved yet names
    /// where its archive ends): what a commit's keep window left live, or
    /// what no commit has archived yet.
    ///
    /// Cost: a meta GET and one GET per message, [`READ_CONCURRENCY`] at a
    /// time.
    ///
    /// # Errors
    /// [`SessionError::NotFound`]; store or decoding errors.
    pub async fn live_messages(&self, id: &SessionId, from: Option<u64>) -> Result<Vec<StoredMessage>, SessionError> {
        let (meta, _) = self.meta(id).await?.ok_or_else(|| SessionError::NotFound(id.as_str().to_owned()))?;
        let start = from.unwrap_or(0).max(meta.archived_seq);
        let seqs: Vec<u64> = meta.recorded_in(start..meta.end_seq()).take(MAX_ARCHIVE_MESSAGES).collect();
        self.messages_at(id, seqs).await
    }

    /// The messages the meta records with sequence numbers in `range`,
    /// oldest first, read concurrently (gaps skipped).
    async fn messages_in(
        &self,
        id: &SessionId,
        meta: &SessionMeta,
        range: std::ops::Range<u64>,
    ) -> Result<Vec<StoredMessage>, SessionError> {
        self.messages_at(id, meta.recorded_in(range).collect()).await
    }

    /// The messages at `seqs`, in that order, [`READ_CONCURRENCY`] reads at
    /// a time; a missing slot is skipped.
    async fn messages_at(&self, id: &SessionId, seqs: Vec<u64>) -> Result<Vec<StoredMessage>, SessionError> {
        let reads = seqs.into_iter().map(|seq| {
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
        let read: Vec<_> = futures_util::StreamExt::collect(futures_util::StreamExt::buffered(
            futures_util::stream::iter(reads),
            READ_CONCURRENCY,
        ))
        .await;
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
        // By archive number: `archive_1000` comes after `archive_999`.
        overviews.sort_by_key(|k| archive_number(k));
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

/// One archive as `GET …/archives/{archive_id}` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct ArchiveView {
    /// Its `.abstract.md` (empty when missing).
    pub abstract_text: String,
    /// Its `.overview.md` (empty when missing).
    pub overview: String,
    /// The messages it archived, oldest first.
    pub messages: Vec<StoredMessage>,
}

/// The number of the archive a key under `history/archive_{N}/` names.
#[must_use]
pub fn archive_number(key: &str) -> Option<u64> {
    key.split('/').find_map(|segment| segment.strip_prefix("archive_")).and_then(|n| n.parse().ok())
}

/// The directory name of archive `n`: `archive_001`, …, `archive_1000`.
#[must_use]
pub fn archive_name(n: u64) -> String {
    format!("archive_{n:03}")
}

/// The most messages one commit archives; more wait for the next commit.
pub const MAX_ARCHIVE_MESSAGES: usize = 2000;
/// Message and archive reads a session operation runs at a time.
pub const READ_CONCURRENCY: usize = 16;
/// The most earlier archives whose abstracts a session context reads.
pub const MAX_CONTEXT_ARCHIVES: u64 = 20;
/// The most messages a session context returns.
pub const MAX_CONTEXT_MESSAGES: u64 = 200;

/// What an archive covers: `history/archive_{index}/.meta.json`, the claim
/// a commit makes with create-if-absent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchiveRange {
    /// The archive's number (1 for `archive_001`).
    pub index: u64,
    /// First sequence number archived.
    pub from_seq: u64,
    /// One past the last sequence number archived.
    pub to_seq: u64,
    /// Messages archived.
    pub message_count: u64,
    /// When the commit made it (RFC 3339).
    pub created_at: String,
    /// How the summaries were written: `llm` or `extractive`.
    pub summary: String,
}

/// A commit, planned: the messages to archive and the archive they go to.
#[derive(Debug, Clone)]
pub struct CommitPlan {
    /// The range and number of the archive.
    pub range: ArchiveRange,
    /// The messages to archive, oldest first.
    pub messages: Vec<StoredMessage>,
    /// The range's unrecorded slots when it was read: the archive is
    /// written only while the meta still says so.
    pub gaps: Vec<u64>,
}

/// The meta's gaps within `range`.
fn gaps_in(meta: &SessionMeta, range: std::ops::Range<u64>) -> Vec<u64> {
    meta.gaps.iter().copied().filter(|seq| range.contains(seq)).collect()
}

/// An archive claimed and its summaries written
/// ([`Sessions::claim_archive`]), its mark not yet moved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    /// The range claimed, with how its summaries were written.
    pub range: ArchiveRange,
    /// Whether the claim found was an earlier plan's with a shorter count
    /// (corrected once the mark lands).
    stale_claim: bool,
}

/// Why a commit archived nothing (the reference's `reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    /// No message since the last archive.
    NoMessages,
    /// Every message since the last archive is within `keep_recent_count`.
    AllWithinKeepWindow,
}

impl SkipReason {
    /// `no_messages` or `all_within_keep_window`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoMessages => "no_messages",
            Self::AllWithinKeepWindow => "all_within_keep_window",
        }
    }
}

/// An archive's two summaries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveSummary {
    /// `.overview.md`: what the segment was about, for resuming it.
    pub overview: String,
    /// `.abstract.md`: one short paragraph.
    pub abstract_text: String,
}

/// What a session context holds ([`Sessions::context`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SessionContext {
    /// The newest archive's overview (`""` when none fits or exists).
    pub latest_archive_overview: String,
    /// Earlier archives' abstracts, newest first, within the budget.
    pub pre_archive_abstracts: Vec<String>,
    /// The newest messages not yet archived, oldest first, within the budget.
    pub messages: Vec<StoredMessage>,
    /// Estimated tokens of everything returned.
    pub estimated_tokens: u64,
    /// Archives the session has.
    pub total_archives: u64,
    /// Archives whose overview or abstract is returned.
    pub included_archives: u64,
    /// Archives left out for the budget (or beyond [`MAX_CONTEXT_ARCHIVES`]).
    pub dropped_archives: u64,
    /// Archives whose summary could not be read.
    pub failed_archives: u64,
    /// Estimated tokens of the returned messages.
    pub active_tokens: u64,
    /// Estimated tokens of the returned archive texts.
    pub archive_tokens: u64,
}

impl Sessions<'_> {
    fn archive_key(&self, id: &SessionId, index: u64, file: &str) -> String {
        self.key(id, &format!("history/{}/{file}", archive_name(index)))
    }

    /// `viking://user/{user}/sessions/{id}/history/archive_{index}`.
    #[must_use]
    pub fn archive_uri(&self, id: &SessionId, index: u64) -> VikingUri {
        self.uri(id).join(&format!("history/{}", archive_name(index))).expect("validated session id")
    }

    /// Plans a commit of session `id`: the messages since the last archive
    /// except the newest `keep_recent` (at most [`MAX_ARCHIVE_MESSAGES`],
    /// oldest first), into archive `commit_count + 1` — or, when an earlier
    /// attempt already claimed that archive from the same start and never
    /// moved the meta, exactly the claimed range (so a commit cut between
    /// its claim and its meta update never blocks the next one).
    ///
    /// Cost: a meta GET, a claim GET, and one GET per message in the range,
    /// [`READ_CONCURRENCY`] at a time.
    ///
    /// # Errors
    /// [`SessionError::NotFound`] when the session does not exist; store
    /// or decoding errors.
    pub async fn plan_commit(
        &self,
        id: &SessionId,
        keep_recent: u64,
        now: &str,
    ) -> Result<Result<CommitPlan, SkipReason>, SessionError> {
        let (meta, _) = self.meta(id).await?.ok_or_else(|| SessionError::NotFound(id.as_str().to_owned()))?;
        let index = meta.commit_count + 1;
        // An earlier attempt that claimed archive `index` and stopped before
        // moving the meta (cut by its deadline, or its outcome lost) decided
        // the range: finish that archive rather than claim another.
        let claim_key = self.archive_key(id, index, ".meta.json");
        let claimed = match self.store.get(&claim_key).await {
            Ok(object) => {
                let claim: ArchiveRange = serde_json::from_slice(&object.body)
                    .map_err(|e| SessionError::Corrupt(format!("archive claim {claim_key}: {e}")))?;
                (claim.from_seq == meta.archived_seq).then_some(claim)
            }
            Err(StoreError::NotFound(_)) => None,
            Err(e) => return Err(e.into()),
        };
        if let Some(claim) = claimed {
            let messages = self.messages_in(id, &meta, claim.from_seq..claim.to_seq).await?;
            let gaps = gaps_in(&meta, claim.from_seq..claim.to_seq);
            let range = ArchiveRange { message_count: messages.len() as u64, ..claim };
            return Ok(Ok(CommitPlan { range, messages, gaps }));
        }
        let end = meta.end_seq();
        let mut messages = self.messages_in(id, &meta, meta.archived_seq..end).await?;
        if messages.is_empty() {
            return Ok(Err(SkipReason::NoMessages));
        }
        let keep = usize::try_from(keep_recent).unwrap_or(usize::MAX).min(messages.len());
        let retained = messages.split_off(messages.len() - keep);
        if messages.is_empty() {
            return Ok(Err(SkipReason::AllWithinKeepWindow));
        }
        let cut = messages.len() > MAX_ARCHIVE_MESSAGES;
        messages.truncate(MAX_ARCHIVE_MESSAGES);
        // The archive ends where the retained tail (or a cut) begins; a
        // message appended after the meta read has a sequence ≥ `end`.
        let to_seq =
            if cut { messages.last().map_or(end, |m| m.seq + 1) } else { retained.first().map_or(end, |m| m.seq) };
        let range = ArchiveRange {
            index,
            from_seq: meta.archived_seq,
            to_seq,
            message_count: messages.len() as u64,
            created_at: now.to_owned(),
            summary: String::new(),
        };
        let gaps = gaps_in(&meta, range.from_seq..range.to_seq);
        Ok(Ok(CommitPlan { range, messages, gaps }))
    }

    /// Writes the archive `plan` describes with `summary` (`how`: `llm` or
    /// `extractive`) and moves the meta's archive mark past it:
    /// [`Sessions::claim_archive`], then [`Sessions::mark_archived`] with
    /// no memories.
    ///
    /// # Errors
    /// As those two.
    pub async fn write_archive(
        &self,
        id: &SessionId,
        plan: &CommitPlan,
        summary: &ArchiveSummary,
        how: &str,
        now: &str,
    ) -> Result<SessionMeta, SessionError> {
        let claimed = self.claim_archive(id, plan, summary, how).await?;
        self.mark_archived(id, plan, &claimed, &[], now).await
    }

    /// Claims the archive `plan` describes and writes its summaries
    /// (`how`: `llm` or `extractive`); the archive mark does not move yet
    /// ([`Sessions::mark_archived`]), so a commit cut here is finished by
    /// the next one, which plans the same range.
    ///
    /// Steps, each safe to repeat: claim `archive_{N}/.meta.json` by
    /// create-if-absent (a claim with the same range is this commit's own,
    /// from an earlier attempt whose outcome was unknown); write
    /// `.overview.md` and `.abstract.md`.
    ///
    /// Cost: three PUTs (a GET more when the claim is there).
    ///
    /// # Errors
    /// [`SessionError::Contention`] when archive `N` was claimed for another
    /// range by a concurrent commit (plan again); store errors.
    pub async fn claim_archive(
        &self,
        id: &SessionId,
        plan: &CommitPlan,
        summary: &ArchiveSummary,
        how: &str,
    ) -> Result<Claimed, SessionError> {
        let range = ArchiveRange { summary: how.to_owned(), ..plan.range.clone() };
        let claim_key = self.archive_key(id, range.index, ".meta.json");
        // A claim of the same range made by an earlier plan that counted
        // fewer messages (a late append filled a gap since): corrected
        // when this commit's own meta update lands.
        let mut stale_claim = false;
        match self.store.put(&claim_key, encode(&range)?, PutMode::CreateNew).await {
            Ok(_) => {}
            // Taken, or unknown: whose claim is there decides.
            Err(e @ (StoreError::Conflict(_) | StoreError::Backend { .. })) => {
                let existing = match self.store.get(&claim_key).await {
                    Ok(existing) => existing,
                    // An unknown outcome that did not land: a retry claims.
                    Err(StoreError::NotFound(_)) => return Err(e.into()),
                    Err(read) => return Err(read.into()),
                };
                let theirs: ArchiveRange = serde_json::from_slice(&existing.body)
                    .map_err(|e| SessionError::Corrupt(format!("archive claim {claim_key}: {e}")))?;
                if (theirs.from_seq, theirs.to_seq) != (range.from_seq, range.to_seq) {
                    return Err(SessionError::Contention(id.as_str().to_owned()));
                }
                stale_claim = theirs.message_count != range.message_count;
            }
            Err(e) => return Err(e.into()),
        }
        let text = |t: &str| Bytes::from(format!("{}\n", t.trim_end()));
        let overview_key = self.archive_key(id, range.index, ".overview.md");
        let abstract_key = self.archive_key(id, range.index, ".abstract.md");
        let (overview, abstract_) = tokio::join!(
            self.store.put(&overview_key, text(&summary.overview), PutMode::Overwrite),
            self.store.put(&abstract_key, text(&summary.abstract_text), PutMode::Overwrite),
        );
        overview?;
        abstract_?;
        Ok(Claimed { range, stale_claim })
    }

    /// Moves the meta's archive mark past the archive [`Sessions::claim_archive`]
    /// claimed, adding `memories` (category, count) to the session's
    /// `memories_extracted`: by compare-and-swap, retried on concurrent
    /// appends; a meta already past the range means an earlier attempt
    /// landed (its memories already counted).
    ///
    /// Cost: a meta GET + compare-and-swap (more under contention).
    ///
    /// # Errors
    /// [`SessionError::Contention`] when a late append changed the range
    /// (plan again) or the meta stayed busy; store errors.
    pub async fn mark_archived(
        &self,
        id: &SessionId,
        plan: &CommitPlan,
        claimed: &Claimed,
        memories: &[(&str, u64)],
        now: &str,
    ) -> Result<SessionMeta, SessionError> {
        let (range, stale_claim) = (&claimed.range, claimed.stale_claim);
        let claim_key = self.archive_key(id, range.index, ".meta.json");
        let archived_tokens: u64 = plan.messages.iter().map(StoredMessage::token_estimate).sum();
        let mut unknown = 0;
        for attempt in 1..=CAS_ATTEMPTS {
            let (mut meta, etag) =
                self.meta(id).await?.ok_or_else(|| SessionError::NotFound(id.as_str().to_owned()))?;
            if meta.archived_seq >= range.to_seq {
                // This commit (or an earlier attempt of it) already landed.
                // (Its claim is not corrected here: the mark may be another
                // commit's of the same range, whose count is the exact one.)
                return Ok(meta);
            }
            if gaps_in(&meta, range.from_seq..range.to_seq) != plan.gaps {
                // A late append recorded a slot in the range after the plan
                // read it: plan again (the claim keeps the range).
                return Err(SessionError::Contention(id.as_str().to_owned()));
            }
            meta.commit_count = meta.commit_count.max(range.index);
            meta.archived_seq = range.to_seq;
            meta.gaps.retain(|seq| *seq >= range.to_seq);
            meta.archived_message_count += range.message_count;
            meta.pending_tokens = meta.pending_tokens.saturating_sub(archived_tokens);
            meta.last_commit_at = now.to_owned();
            meta.updated_at = now.to_owned();
            for (category, count) in memories {
                *meta.memories_extracted.entry((*category).to_owned()).or_default() += count;
                *meta.memories_extracted.entry("total".to_owned()).or_default() += count;
            }
            match self.store.put(&self.meta_key(id), encode(&meta)?, PutMode::IfMatch(etag)).await {
                Ok(_) => {
                    if stale_claim {
                        self.correct_claim(&claim_key, range).await;
                    }
                    self.delete_unrecorded(id, &plan.gaps).await;
                    return Ok(meta);
                }
                Err(StoreError::Conflict(_)) => backoff(attempt).await,
                // Unknown: the next read shows the mark moved, or not.
                Err(e @ StoreError::Backend { .. }) => {
                    unknown += 1;
                    if unknown >= UNKNOWN_ATTEMPTS {
                        return Err(e.into());
                    }
                    backoff(attempt).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(SessionError::Contention(id.as_str().to_owned()))
    }

    /// The messages archive `index` of session `id` holds, oldest first,
    /// once its commit has landed (the meta's archive mark is past it):
    /// `Ok(None)` when the session or the archive does not exist (deleted),
    /// or the archive's commit has not landed.
    ///
    /// A slot of the range whose append failed after claiming it and that
    /// the commit could not delete is read as a message (the mark forgets
    /// the range's gaps once past it).
    ///
    /// Cost: a meta GET, a claim GET, one GET per message,
    /// [`READ_CONCURRENCY`] at a time.
    ///
    /// # Errors
    /// Store or decoding errors.
    pub async fn archived_messages(
        &self,
        id: &SessionId,
        index: u64,
    ) -> Result<Option<Vec<StoredMessage>>, SessionError> {
        let claim_key = self.archive_key(id, index, ".meta.json");
        let (meta, claim) = tokio::join!(self.meta(id), self.store.get(&claim_key));
        let Some((meta, _)) = meta? else { return Ok(None) };
        let claim: ArchiveRange = match claim {
            Ok(object) => serde_json::from_slice(&object.body)
                .map_err(|e| SessionError::Corrupt(format!("archive claim {claim_key}: {e}")))?,
            Err(StoreError::NotFound(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        if meta.archived_seq < claim.to_seq {
            return Ok(None);
        }
        self.messages_at(id, (claim.from_seq..claim.to_seq).collect()).await.map(Some)
    }

    /// The user's sessions, in id order: at most `limit` (and whether
    /// more exist).
    ///
    /// Cost: one LIST per 1,000 entries of the sessions directory.
    ///
    /// # Errors
    /// Store errors.
    pub async fn list(&self, limit: usize) -> Result<(Vec<SessionId>, bool), SessionError> {
        let dir =
            tree_key(&self.identity.account, &self.identity.user_root().join("sessions").expect("a constant name"));
        let listing = self.store.list_dir(&dir, limit).await?;
        let ids = listing.dirs.iter().filter_map(|name| SessionId::new(name).ok()).collect();
        Ok((ids, listing.truncated))
    }

    /// Archive `index`'s abstract, overview and messages, or `None` when
    /// the session or the archive is not there (or not finished).
    ///
    /// Cost: [`Sessions::archived_messages`] and two GETs beside it.
    ///
    /// # Errors
    /// Store or decoding errors.
    pub async fn archive(&self, id: &SessionId, index: u64) -> Result<Option<ArchiveView>, SessionError> {
        let text = |name: &'static str| async move {
            match self.store.get(&self.archive_key(id, index, name)).await {
                Ok(object) => Ok(String::from_utf8_lossy(&object.body).into_owned()),
                Err(StoreError::NotFound(_)) => Ok(String::new()),
                Err(e) => Err(SessionError::from(e)),
            }
        };
        let (messages, abstract_text, overview) =
            tokio::join!(self.archived_messages(id, index), text(".abstract.md"), text(".overview.md"));
        let Some(messages) = messages? else { return Ok(None) };
        Ok(Some(ArchiveView { abstract_text: abstract_text?, overview: overview?, messages }))
    }

    /// Deletes session `id`: the event memories its archives made (the
    /// episodes each archive lists), then every object of the session, its
    /// meta last, so an interrupted delete is finished by a retry (the
    /// session is still found until it is all gone). Returns the episodes
    /// removed, for the index; `None` when there is no such session.
    /// Memories a model extracted stay: they merge what several sessions
    /// said, and are forgotten by their URI.
    ///
    /// Cost: a meta GET, the listing of the session (one LIST per 1,000
    /// objects), a GET per archive's episode list, one DELETE per episode
    /// and per object.
    ///
    /// # Errors
    /// Store errors; what was deleted stays deleted.
    pub async fn delete(&self, id: &SessionId) -> Result<Option<Vec<VikingUri>>, SessionError> {
        if self.meta(id).await?.is_none() {
            return Ok(None);
        }
        let prefix = format!("{}/", tree_key(&self.identity.account, &self.uri(id)));
        let keys: Vec<String> = self.store.list(&prefix).await?.into_iter().map(|m| m.key).collect();
        let events = self.identity.user_root().join("memories/events").expect("a constant path");
        let mut episodes = Vec::new();
        for key in keys.iter().filter(|k| k.ends_with("/.episodes.json")) {
            let listed: Vec<String> = match self.store.get(key).await {
                Ok(object) => serde_json::from_slice(&object.body).unwrap_or_default(),
                Err(StoreError::NotFound(_)) => Vec::new(),
                Err(e) => return Err(e.into()),
            };
            // Only event memories of this user, whatever a list says.
            episodes.extend(
                listed.iter().filter_map(|u| VikingUri::parse(u).ok()).filter(|u| u.is_under(&events) && *u != events),
            );
        }
        for uri in &episodes {
            self.store.delete(&tree_key(&self.identity.account, uri)).await?;
        }
        let meta = self.meta_key(id);
        for key in keys.iter().filter(|k| **k != meta) {
            self.store.delete(key).await?;
        }
        self.store.delete(&meta).await?;
        Ok(Some(episodes))
    }

    /// Whether archive `index` of session `id` is still there (its claim).
    /// Cost: one GET.
    ///
    /// # Errors
    /// Store errors.
    pub async fn archive_exists(&self, id: &SessionId, index: u64) -> Result<bool, SessionError> {
        match self.store.get(&self.archive_key(id, index, ".meta.json")).await {
            Ok(_) => Ok(true),
            Err(StoreError::NotFound(_)) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Adds `memories` (category, count) to the session's
    /// `memories_extracted` (and its `total`), by compare-and-swap: what
    /// an extraction made after the commit. A session that is gone is left
    /// alone.
    ///
    /// Cost: a meta GET and a conditional PUT (more under contention).
    ///
    /// Unknown outcomes: not retried (a count added twice would be wrong);
    /// the error is returned and the counts may or may not be there.
    ///
    /// # Errors
    /// [`SessionError::Contention`] when the meta stayed busy; store
    /// errors.
    pub async fn add_memories(&self, id: &SessionId, memories: &[(&str, u64)]) -> Result<(), SessionError> {
        if memories.iter().all(|(_, n)| *n == 0) {
            return Ok(());
        }
        for attempt in 1..=CAS_ATTEMPTS {
            let Some((mut meta, etag)) = self.meta(id).await? else { return Ok(()) };
            for (category, count) in memories.iter().filter(|(_, n)| *n > 0) {
                *meta.memories_extracted.entry((*category).to_owned()).or_default() += count;
                *meta.memories_extracted.entry("total".to_owned()).or_default() += count;
            }
            match self.store.put(&self.meta_key(id), encode(&meta)?, PutMode::IfMatch(etag)).await {
                Ok(_) => return Ok(()),
                Err(StoreError::Conflict(_)) => backoff(attempt).await,
                Err(e) => return Err(e.into()),
            }
        }
        Err(SessionError::Contention(id.as_str().to_owned()))
    }

    /// Rewrites the archive claim under `key` with `range`'s message count
    /// once the meta's archive mark has passed the range (the range is
    /// settled; only the count an earlier plan saw was short). Best
    /// effort: a failure leaves the short count, logged (the meta's
    /// archived count stays exact).
    async fn correct_claim(&self, key: &str, range: &ArchiveRange) {
        let written = match encode(range) {
            Ok(body) => self.store.put(key, body, PutMode::Overwrite).await.map(|_| ()).map_err(SessionError::from),
            Err(e) => Err(e),
        };
        if let Err(e) = written {
            tracing::warn!(key, error = %e, "an archive claim's message count was not corrected");
        }
    }

    /// Deletes the slots `seqs`, which a landed archive mark has passed
    /// without any meta recording them (claims of appends that failed or
    /// lost a race). No append claims below the mark, so no later write can
    /// reuse these keys: the delete is safe even when the SDK retries it.
    /// Best effort: a slot left behind stays unseen.
    async fn delete_unrecorded(&self, id: &SessionId, seqs: &[u64]) {
        // Owned keys: see `IndexSnapshot::load_manifest`.
        let keys: Vec<String> = seqs.iter().map(|seq| self.message_key(id, *seq)).collect();
        let store = self.store;
        futures_util::StreamExt::for_each_concurrent(
            futures_util::stream::iter(keys),
            READ_CONCURRENCY,
            |key| async move {
                if let Err(e) = store.delete(&key).await {
                    tracing::debug!(key, error = %e, "an unrecorded message slot was not deleted");
                }
            },
        )
        .await;
    }

    /// The session's context for resuming it within `token_budget`
    /// estimated tokens: the newest archive's overview, then the newest
    /// messages not yet archived (at most [`MAX_CONTEXT_MESSAGES`]), then
    /// earlier archives' abstracts newest first (at most
    /// [`MAX_CONTEXT_ARCHIVES`]) — each only while it fits.
    ///
    /// Cost: one meta GET, then concurrently the archive summaries and the
    /// messages ([`READ_CONCURRENCY`] at a time).
    ///
    /// # Errors
    /// [`SessionError::NotFound`] when the session does not exist; store
    /// errors.
    pub async fn context(&self, id: &SessionId, token_budget: u64) -> Result<SessionContext, SessionError> {
        let (meta, _) = self.meta(id).await?.ok_or_else(|| SessionError::NotFound(id.as_str().to_owned()))?;
        let newest = meta.commit_count;
        let oldest = newest.saturating_sub(MAX_CONTEXT_ARCHIVES).max(1);
        let read_text = |key: String| async move {
            match self.store.get(&key).await {
                Ok(object) => Ok(Some(String::from_utf8_lossy(&object.body).trim().to_owned())),
                Err(StoreError::NotFound(_)) => Ok(None),
                Err(e) => Err(SessionError::from(e)),
            }
        };
        let overview = async {
            if newest == 0 { Ok(None) } else { read_text(self.archive_key(id, newest, ".overview.md")).await }
        };
        let abstracts = futures_util::StreamExt::collect::<Vec<_>>(futures_util::StreamExt::buffered(
            futures_util::stream::iter(
                (oldest..newest).rev().map(|n| read_text(self.archive_key(id, n, ".abstract.md"))),
            ),
            READ_CONCURRENCY,
        ));
        let start = meta.end_seq().saturating_sub(MAX_CONTEXT_MESSAGES).max(meta.archived_seq);
        let (overview, abstracts, messages) =
            tokio::join!(overview, abstracts, self.messages_in(id, &meta, start..meta.end_seq()));
        let mut context = SessionContext { total_archives: newest, ..SessionContext::default() };
        let mut left = token_budget;
        let mut take = |tokens: u64| {
            let fits = tokens <= left;
            if fits {
                left -= tokens;
            }
            fits
        };
        match overview? {
            Some(text) => {
                let tokens = crate::tokens::estimate_tokens(&text) as u64;
                if take(tokens) {
                    context.latest_archive_overview = text;
                    context.archive_tokens += tokens;
                    context.included_archives += 1;
                } else {
                    context.dropped_archives += 1;
                }
            }
            None if newest > 0 => context.failed_archives += 1,
            None => {}
        }
        let mut kept = Vec::new();
        for message in messages?.into_iter().rev() {
            let tokens = message.token_estimate();
            if !take(tokens) {
                break;
            }
            context.active_tokens += tokens;
            kept.push(message);
        }
        kept.reverse();
        context.messages = kept;
        for text in abstracts {
            match text? {
                Some(text) => {
                    let tokens = crate::tokens::estimate_tokens(&text) as u64;
                    if take(tokens) {
                        context.archive_tokens += tokens;
                        context.included_archives += 1;
                        context.pre_archive_abstracts.push(text);
                    } else {
                        context.dropped_archives += 1;
                    }
                }
                None => context.failed_archives += 1,
            }
        }
        context.dropped_archives += oldest.saturating_sub(1);
        context.estimated_tokens = context.archive_tokens + context.active_tokens;
        Ok(context)
    }
}

/// The deterministic summaries of an archive, without a model: the
/// overview counts the turns and lists what the user asked (each request's
/// first line, up to 200 characters, at most 40) and how the last answer
/// began; the abstract names the first request and the size.
#[must_use]
pub fn extractive_summary(messages: &[StoredMessage]) -> ArchiveSummary {
    let first_line = |m: &StoredMessage, max: usize| {
        let text = m.text();
        let line = text.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("").to_owned();
        let cut: String = line.chars().take(max).collect();
        if cut.len() < line.len() { format!("{cut}…") } else { cut }
    };
    let asked: Vec<String> =
        messages.iter().filter(|m| m.role == "user").map(|m| first_line(m, 200)).filter(|l| !l.is_empty()).collect();
    let plural = |n: usize, word: &str| if n == 1 { format!("1 {word}") } else { format!("{n} {word}s") };
    let size = format!("{}, {}", plural(asked.len(), "turn"), plural(messages.len(), "message"));
    let mut overview = format!("# Session Summary\n\n**Overview**: {size}\n");
    if !asked.is_empty() {
        overview.push_str("\n## Requests\n");
        for line in asked.iter().take(40) {
            overview.push_str(&format!("- {line}\n"));
        }
        if asked.len() > 40 {
            overview.push_str(&format!("- … and {} more\n", asked.len() - 40));
        }
    }
    if let Some(last) = messages.iter().rev().find(|m| m.role == "assistant") {
        let line = first_line(last, 400);
        if !line.is_empty() {
            overview.push_str(&format!("\n## Last answer\n{line}\n"));
        }
    }
    let abstract_text = match asked.first() {
        Some(first) => format!("{size}, starting with: {first}"),
        None => size,
    };
    ArchiveSummary { overview, abstract_text }
}

/// The pause before compare-and-swap attempt `attempt + 1` on a meta:
/// random within a window that doubles with each lost attempt (16 ms,
/// 32 ms, … up to 1 s), so that a crowd of writers spreads out instead of
/// meeting again at once.
async fn backoff(attempt: u32) {
    let window = 8_u64 << attempt.clamp(1, 7);
    let ms = crate::index::unique() % window.min(1000);
    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
}

fn encode<T: Serialize>(value: &T) -> Result<Bytes, SessionError> {
    serde_json::to_vec(value).map(Bytes::from).map_err(|e| SessionError::Corrupt(e.to_string()))
}

/// A message as a client sends it, for the tests of the modules that read
/// messages: `text` said by `role` at `at` (RFC 3339, or `""`).
#[cfg(test)]
impl StoredMessage {
    pub(crate) fn said(id: &str, role: &str, text: &str, at: &str) -> Self {
        Self {
            id: id.into(),
            role: role.into(),
            content: Some(text.into()),
            parts: None,
            created_at: at.into(),
            turn_id: None,
            message_kind: None,
            peer_id: None,
            source_message_ids: None,
            seq: 0,
            claim: None,
        }
    }
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
            content: None,
            parts: Some(vec![
                serde_json::json!({"type": "text", "text": "a"}),
                serde_json::json!({"type": "context", "uri": "viking://x"}),
                serde_json::json!({"type": "text", "text": "b"}),
            ]),
            ..StoredMessage::said("m", "user", "", "")
        };
        assert_eq!(m.text(), "a\nb");
        m.content = Some("c".into());
        assert_eq!(m.text(), "c");
    }
}
