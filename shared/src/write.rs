//! The write path for files agents and operators name: `content/write`
//! (replace, append, create) and `batch-write`, `content/edit`,
//! `fs/mkdir`, `fs/mv` and `DELETE /fs`. Every write is one store object:
//! a create is create-if-absent, an append, an edit and any memory's write
//! a compare-and-swap over what was read (a memory keeps its fields
//! block), a plain replace the last writer's. What changes reaches the
//! index through the indexer's own [`crate::indexer::apply`] — the store's
//! notifications deployed, inline where the store sends none
//! ([`crate::memory::index_now`], called by the routes) — so a write, a
//! move or a delete leaves no stale record in `find`.
//!
//! Who may write where ([`may_write`]): every identity its own user tree
//! (not its sessions, which the session routes write; with an acting peer,
//! not another peer's subtree); the shared roots (`viking://resources`,
//! `viking://agent/skills`) an admin or root key, or anyone in dev mode;
//! nothing else. Names starting with `.` are the directories' sidecars and
//! are not written here.

use bytes::Bytes;

use crate::identity::{Identity, SHARED_ROOTS};
use crate::index::extract::MEMORY_FIELDS_MARKER;
use crate::store::{PutMode, SharedStore, StoreError};
use crate::uri::{VikingUri, tree_key, uri_for_tree_key};

/// The largest file a write may leave behind, in bytes (4 MiB): an append
/// past it is refused whole.
pub const MAX_FILE_BYTES: usize = 4 * 1024 * 1024;
/// The most files one recursive delete or move touches (a larger tree is
/// refused before anything changes).
pub const MAX_TREE_FILES: usize = 10_000;
/// Compare-and-swap attempts of an append or an edit before it gives up
/// with a conflict.
pub const CAS_ATTEMPTS: usize = 8;
/// The marker `fs/mkdir` leaves in a directory without a description, so
/// the directory exists (a store has no empty directories).
pub const KEEP_MARKER: &str = ".keep";

/// What a write failed to do. Messages name the URI or the field.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// Outside what the caller may write.
    #[error("permission denied: {0}")]
    Forbidden(String),
    /// A request that cannot be done as asked (names the field).
    #[error("{0}")]
    Invalid(String),
    /// Nothing at the URI.
    #[error("not found: {0}")]
    NotFound(VikingUri),
    /// `create` over an existing file, a move onto one, a file where a
    /// directory should be, or a write that kept losing its races.
    #[error("{0}")]
    Conflict(String),
    /// The file would be larger than [`MAX_FILE_BYTES`].
    #[error("{uri} would be {size} bytes; the most a file may hold is {limit}")]
    TooLarge {
        /// The file.
        uri: VikingUri,
        /// Its size after the write.
        size: usize,
        /// [`MAX_FILE_BYTES`].
        limit: usize,
    },
    /// The store failed; nothing is known to be half-written (see each
    /// operation).
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The most operations one `content/batch-write` carries.
pub const MAX_BATCH_WRITES: usize = 100;

/// How `content/write` treats an existing file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// Replace it (create it when missing). The default.
    Replace,
    /// Add to its end (create it when missing).
    Append,
    /// Create it; an existing file is a conflict.
    Create,
}

impl WriteMode {
    /// Parses the wire name (`replace`, `append`, `create`).
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        [Self::Replace, Self::Append, Self::Create].into_iter().find(|m| m.as_str() == text)
    }

    /// The wire name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Replace => "replace",
            Self::Append => "append",
            Self::Create => "create",
        }
    }
}

/// What one write did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Written {
    /// The file written.
    pub uri: VikingUri,
    /// Whether the file is new.
    pub created: bool,
    /// Its size now, in bytes.
    pub size: usize,
}

/// A memory's text split into what it says (trimmed at the end) and its
/// trailing fields block as a JSON object (empty when it has none, or one
/// that does not decode); the fields other writers keep (an extraction's
/// category and sources) survive as they are.
fn split_fields(text: &str) -> (&str, serde_json::Map<String, serde_json::Value>) {
    match text.find(MEMORY_FIELDS_MARKER) {
        Some(at) => {
            let block = text[at + MEMORY_FIELDS_MARKER.len()..].trim();
            let json = block.strip_suffix("-->").unwrap_or(block).trim();
            (text[..at].trim_end(), serde_json::from_str(json).unwrap_or_default())
        }
        None => (text.trim_end(), serde_json::Map::new()),
    }
}

/// Whether `uri` is a memory file: a user's `memories/…` Markdown file,
/// whose text carries a fields block.
fn is_memory(uri: &VikingUri) -> bool {
    uri.as_str().ends_with(".md")
        && crate::index::record::classify(uri).is_some_and(|(t, _)| t == crate::index::record::ContextType::Memory)
}

/// Whether `identity` (an admin or root key, or dev mode, when
/// `shared_writer`) may write at `uri` (home alias resolved): see the
/// module's rules. The roots themselves (the user tree, a shared root) are
/// never written or removed whole.
///
/// # Errors
/// [`WriteError::Forbidden`] naming the URI and the rule.
pub fn may_write(identity: &Identity, shared_writer: bool, uri: &VikingUri) -> Result<VikingUri, WriteError> {
    let uri = identity.resolve_home(uri);
    let home = identity.user_root();
    let deny = |why: &str| Err(WriteError::Forbidden(format!("{uri}: {why}")));
    if uri.file_name().is_some_and(|n| n.starts_with('.')) {
        return Err(WriteError::Invalid(format!(
            "uri: names starting with '.' are reserved for directory summaries: {uri}"
        )));
    }
    if uri.is_under(&home) {
        if uri == home {
            return deny("the user tree's root is not written or removed whole");
        }
        if identity.is_other_peer(&uri) {
            return deny("another peer's tree");
        }
        if home.join("sessions").is_ok_and(|s| uri.is_under(&s)) {
            return deny("sessions are written through the session routes");
        }
        return Ok(uri);
    }
    for root in SHARED_ROOTS {
        let Ok(root) = VikingUri::parse(root) else { continue };
        if uri.is_under(&root) {
            if uri == root {
                return deny("a shared root is not written or removed whole");
            }
            if !shared_writer {
                return deny("the shared roots are written with an admin or root key");
            }
            return Ok(uri);
        }
    }
    deny("outside the caller's tree and the shared roots")
}

/// Writes and removes files in one identity's view of the tree.
#[derive(Debug, Clone)]
pub struct Writes<'a> {
    store: &'a SharedStore,
    identity: &'a Identity,
    shared_writer: bool,
    /// When the writes happen (RFC 3339), for the memories' fields.
    stamp: String,
}

impl<'a> Writes<'a> {
    /// Writes as `identity` at `now` (Unix seconds); `shared_writer` lets
    /// it write the shared roots (an admin or root key, or dev mode).
    #[must_use]
    pub fn new(store: &'a SharedStore, identity: &'a Identity, shared_writer: bool, now: i64) -> Self {
        let stamp = time::OffsetDateTime::from_unix_timestamp(now)
            .ok()
            .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
            .unwrap_or_default();
        Self { store, identity, shared_writer, stamp }
    }

    /// Who writes, as a memory's fields record it: `user:{user}`, with
    /// `/peer:{peer}` for an acting peer.
    #[must_use]
    pub fn writer(&self) -> String {
        match &self.identity.actor_peer {
            Some(peer) => format!("user:{}/peer:{peer}", self.identity.user),
            None => format!("user:{}", self.identity.user),
        }
    }

    /// `text` as it is stored at `uri`: a memory's (a user's
    /// `memories/…/*.md`) text with its trailing fields block saying who
    /// wrote it and when (kept fields of `old`, the text there before;
    /// reads leave the block out); any other file's text as it is.
    fn stamped(&self, uri: &VikingUri, text: &str, old: Option<&str>) -> String {
        if !is_memory(uri) {
            return text.to_owned();
        }
        let mut fields = old.map(|old| split_fields(old).1).unwrap_or_default();
        let (body, _) = split_fields(text);
        fields.insert("updated_at".into(), self.stamp.clone().into());
        fields.insert("written_by".into(), self.writer().into());
        let json = serde_json::to_string(&fields).unwrap_or_else(|_| "{}".to_owned());
        format!("{body}\n\n{MEMORY_FIELDS_MARKER}\n{json}\n-->\n")
    }

    /// The URI `uri` names, if the caller may write there.
    ///
    /// # Errors
    /// As [`may_write`].
    pub fn authorize(&self, uri: &VikingUri) -> Result<VikingUri, WriteError> {
        may_write(self.identity, self.shared_writer, uri)
    }

    fn key(&self, uri: &VikingUri) -> String {
        tree_key(&self.identity.account, uri)
    }

    /// The nearest ancestor of `uri` (below the account's root) that is a
    /// file, if any: a file cannot also be a directory.
    ///
    /// Cost: one HEAD per ancestor, all at once.
    async fn file_above(&self, uri: &VikingUri) -> Result<Option<VikingUri>, StoreError> {
        let mut ancestors = Vec::new();
        let mut at = uri.parent();
        while let Some(dir) = at {
            if dir.path().is_empty() {
                break;
            }
            at = dir.parent();
            ancestors.push(dir);
        }
        let keys: Vec<String> = ancestors.iter().map(|dir| self.key(dir)).collect();
        let heads = futures_util::future::join_all(keys.iter().map(|key| self.store.head(key))).await;
        for (dir, head) in ancestors.into_iter().zip(heads) {
            match head {
                Ok(_) => return Ok(Some(dir)),
                Err(StoreError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }

    /// [`WriteError::Conflict`] when a file stands where `uri` needs a
    /// directory.
    async fn no_file_above(&self, field: &str, uri: &VikingUri) -> Result<(), WriteError> {
        match self.file_above(uri).await? {
            Some(file) => Err(WriteError::Conflict(format!("{field}: {file} is a file, so {uri} cannot be below it"))),
            None => Ok(()),
        }
    }

    /// Whether anything lies below `uri` (it is a directory).
    async fn has_children(&self, uri: &VikingUri) -> Result<bool, StoreError> {
        let listing = self.store.list_dir(&self.key(uri), 1).await?;
        Ok(!listing.files.is_empty() || !listing.dirs.is_empty())
    }

    /// Writes `content` to the file at `uri` (authorised first) as `mode`
    /// says. Missing parent directories need nothing: they are the key's
    /// prefix.
    ///
    /// Cost: a HEAD per ancestor (all at once) and a LIST; then replace
    /// and create, one HEAD and one PUT; append, one GET and one
    /// conditional PUT per attempt. Unknown outcomes: a replace is
    /// repeated by the caller's retry with the same result; a create or an
    /// append reads the file back and counts the write done when it holds
    /// the new text.
    ///
    /// # Errors
    /// Forbidden; [`WriteError::Invalid`] for a directory's URI;
    /// [`WriteError::Conflict`] for a file where a parent directory would
    /// be, `create` over an existing file, or an
    /// append that lost [`CAS_ATTEMPTS`] races; [`WriteError::TooLarge`];
    /// store errors.
    pub async fn write(&self, uri: &VikingUri, content: &str, mode: WriteMode) -> Result<Written, WriteError> {
        self.write_bytes(uri, Bytes::copy_from_slice(content.as_bytes()), mode).await
    }

    /// [`Writes::write`] of any bytes (a batch's `content_base64`); an
    /// append needs both the file and `body` to be UTF-8 text.
    ///
    /// # Errors
    /// As [`Writes::write`]; [`WriteError::Invalid`] for an append of bytes
    /// that are not UTF-8.
    pub async fn write_bytes(&self, uri: &VikingUri, body: Bytes, mode: WriteMode) -> Result<Written, WriteError> {
        let uri = self.authorize(uri)?;
        let key = self.key(&uri);
        self.no_file_above("uri", &uri).await?;
        if self.has_children(&uri).await? {
            return Err(WriteError::Invalid(format!("uri: {uri} is a directory; write a file below it")));
        }
        if body.len() > MAX_FILE_BYTES {
            return Err(WriteError::TooLarge { uri, size: body.len(), limit: MAX_FILE_BYTES });
        }
        if is_memory(&uri) && mode != WriteMode::Append {
            // A memory's text is stamped with who wrote it: a
            // read-modify-write that keeps its earlier fields.
            let text = String::from_utf8(body.to_vec())
                .map_err(|_| WriteError::Invalid(format!("content: a memory ({uri}) must be UTF-8 text")))?;
            let create = mode == WriteMode::Create;
            return self
                .update(&uri, |old| match old {
                    Some(_) if create => {
                        Err(WriteError::Conflict(format!("{uri} already exists; use mode replace or append")))
                    }
                    _ => Ok(text.clone()),
                })
                .await;
        }
        let size = body.len();
        match mode {
            WriteMode::Replace => {
                let existed = match self.store.head(&key).await {
                    Ok(_) => true,
                    Err(StoreError::NotFound(_)) => false,
                    Err(e) => return Err(e.into()),
                };
                self.store.put(&key, body, PutMode::Overwrite).await?;
                Ok(Written { uri, created: !existed, size })
            }
            WriteMode::Create => match self.store.put(&key, body, PutMode::CreateNew).await {
                Ok(_) => Ok(Written { uri, created: true, size }),
                Err(StoreError::Conflict(_)) => {
                    Err(WriteError::Conflict(format!("{uri} already exists; use mode replace or append")))
                }
                Err(e) => Err(e.into()),
            },
            WriteMode::Append => {
                let content = String::from_utf8(body.to_vec()).map_err(|_| {
                    WriteError::Invalid(format!("content: what is appended to {uri} must be UTF-8 text"))
                })?;
                let memory = is_memory(&uri);
                self.update(&uri, |old| {
                    let before = match old {
                        Some(old) if memory => split_fields(old).0.to_owned(),
                        Some(old) => old.to_owned(),
                        None => String::new(),
                    };
                    Ok(format!("{before}{content}"))
                })
                .await
            }
        }
    }

    /// Whether a file is at `uri` (authorised first): what a batch checks
    /// for its `create` operations before it writes anything.
    ///
    /// Cost: one HEAD.
    ///
    /// # Errors
    /// Forbidden; store errors.
    pub async fn exists(&self, uri: &VikingUri) -> Result<bool, WriteError> {
        let uri = self.authorize(uri)?;
        match self.store.head(&self.key(&uri)).await {
            Ok(_) => Ok(true),
            Err(StoreError::NotFound(_)) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Replaces `old` by `new` in the file at `uri`: `old` must occur once,
    /// or any number of times with `replace_all`.
    ///
    /// Cost: one GET and one conditional PUT per attempt.
    ///
    /// # Errors
    /// Forbidden; [`WriteError::NotFound`]; [`WriteError::Invalid`] when
    /// `old` is empty, missing, or not unique without `replace_all`;
    /// conflicts and store errors as [`Writes::write`].
    pub async fn edit(&self, uri: &VikingUri, old: &str, new: &str, replace_all: bool) -> Result<Written, WriteError> {
        let uri = self.authorize(uri)?;
        if old.is_empty() {
            return Err(WriteError::Invalid("old_string: must not be empty".into()));
        }
        let target = uri.clone();
        let memory = is_memory(&uri);
        self.update(&uri, move |text| {
            let Some(text) = text else { return Err(WriteError::NotFound(target.clone())) };
            let text = if memory { split_fields(text).0 } else { text };
            match text.matches(old).count() {
                0 => Err(WriteError::Invalid(format!("old_string: not found in {target}"))),
                1 => Ok(text.replacen(old, new, 1)),
                _ if replace_all => Ok(text.replace(old, new)),
                n => Err(WriteError::Invalid(format!(
                    "old_string: occurs {n} times in {target}; make it unique or set replace_all"
                ))),
            }
        })
        .await
    }

    /// Read, change, write back under `IfMatch` (or `CreateNew` for a
    /// missing file), retried on a lost race up to [`CAS_ATTEMPTS`] times.
    async fn update(
        &self,
        uri: &VikingUri,
        change: impl Fn(Option<&str>) -> Result<String, WriteError>,
    ) -> Result<Written, WriteError> {
        let key = self.key(uri);
        for _ in 0..CAS_ATTEMPTS {
            let (old, mode) = match self.store.get(&key).await {
                Ok(object) => {
                    let text = String::from_utf8(object.body.to_vec()).map_err(|_| {
                        WriteError::Invalid(format!("uri: {uri} is not UTF-8 text and cannot be appended to or edited"))
                    })?;
                    (Some(text), PutMode::IfMatch(object.meta.etag))
                }
                Err(StoreError::NotFound(_)) => (None, PutMode::CreateNew),
                Err(e) => return Err(e.into()),
            };
            let created = old.is_none();
            let text = change(old.as_deref())?;
            let text = self.stamped(uri, &text, old.as_deref());
            if text.len() > MAX_FILE_BYTES {
                return Err(WriteError::TooLarge { uri: uri.clone(), size: text.len(), limit: MAX_FILE_BYTES });
            }
            match self.store.put(&key, Bytes::from(text.clone()), mode).await {
                Ok(_) => return Ok(Written { uri: uri.clone(), created, size: text.len() }),
                Err(StoreError::Conflict(_)) => {}
                // Unknown outcome: done when the file now holds our text.
                Err(e) => match self.store.get(&key).await {
                    Ok(now) if now.body.as_ref() == text.as_bytes() => {
                        return Ok(Written { uri: uri.clone(), created, size: text.len() });
                    }
                    _ => return Err(e.into()),
                },
            }
        }
        Err(WriteError::Conflict(format!("{uri} kept changing under {CAS_ATTEMPTS} attempts; retry")))
    }

    /// Makes the directory at `uri`: its `.abstract.md` holds `description`
    /// when given (the directory's abstract), else an empty [`KEEP_MARKER`]
    /// marks it. A directory that exists is left as it is (its abstract
    /// replaced when a description is given).
    ///
    /// Cost: a HEAD per ancestor (all at once), one LIST, one HEAD and one
    /// PUT.
    ///
    /// # Errors
    /// Forbidden; [`WriteError::Conflict`] when a file is at `uri` or above
    /// it; store errors.
    pub async fn mkdir(&self, uri: &VikingUri, description: Option<&str>) -> Result<(VikingUri, bool), WriteError> {
        let uri = self.authorize(uri)?;
        self.no_file_above("uri", &uri).await?;
        match self.store.head(&self.key(&uri)).await {
            Ok(_) => return Err(WriteError::Conflict(format!("{uri} is a file"))),
            Err(StoreError::NotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
        let existed = self.has_children(&uri).await?;
        let (name, body) = match description.map(str::trim).filter(|d| !d.is_empty()) {
            Some(d) => (crate::ingest::ABSTRACT_SIDECAR, d.to_owned()),
            None if existed => return Ok((uri, false)),
            None => (KEEP_MARKER, String::new()),
        };
        let key = format!("{}/{name}", self.key(&uri));
        self.store.put(&key, Bytes::from(body), PutMode::Overwrite).await?;
        Ok((uri, !existed))
    }

    /// The files at and below `uri` (one file, or every object of a
    /// directory), as store keys.
    async fn files_at(&self, uri: &VikingUri) -> Result<Vec<String>, WriteError> {
        let key = self.key(uri);
        match self.store.head(&key).await {
            Ok(_) => return Ok(vec![key]),
            Err(StoreError::NotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
        let keys: Vec<String> = self.store.list(&format!("{key}/")).await?.into_iter().map(|m| m.key).collect();
        if keys.len() > MAX_TREE_FILES {
            return Err(WriteError::Invalid(format!(
                "uri: {uri} holds {} files; at most {MAX_TREE_FILES} are removed or moved at once",
                keys.len()
            )));
        }
        Ok(keys)
    }

    /// Removes the file at `uri`, or the directory with everything below it
    /// when `recursive` (a directory holding only its own summaries and
    /// marker goes without). Pushes each removed file's URI to `done` as
    /// it goes, so a caller knows what changed even when it fails.
    ///
    /// Cost: one HEAD and one LIST; one DELETE per file. Unknown outcomes:
    /// a repeated delete is harmless; a failure part way leaves the rest
    /// in place, and a retry removes them.
    ///
    /// # Errors
    /// Forbidden; [`WriteError::NotFound`]; [`WriteError::Invalid`] for a
    /// directory with files without `recursive`, or one over
    /// [`MAX_TREE_FILES`]; store errors.
    pub async fn remove(&self, uri: &VikingUri, recursive: bool, done: &mut Vec<VikingUri>) -> Result<(), WriteError> {
        let uri = self.authorize(uri)?;
        let keys = self.files_at(&uri).await?;
        if keys.is_empty() {
            return Err(WriteError::NotFound(uri));
        }
        let own = self.key(&uri);
        let is_dir = keys.first().is_some_and(|k| *k != own);
        let only_summaries =
            keys.iter().all(|k| k.rsplit_once('/').is_some_and(|(dir, name)| dir == own && name.starts_with('.')));
        if is_dir && !recursive && !only_summaries {
            return Err(WriteError::Invalid(format!(
                "recursive: {uri} is a directory with files; pass recursive=true to remove it all"
            )));
        }
        for key in &keys {
            self.store.delete(key).await?;
            done.extend(uri_for_tree_key(&self.identity.account, key));
        }
        Ok(())
    }

    /// Moves the file or directory at `from` to `to` (both authorised):
    /// every file is copied to its new key (create-if-absent) first, then
    /// every original removed (compare-and-swap: one changed meanwhile
    /// stays). A failure while copying removes the copies made, so nothing
    /// moved; a failure while removing leaves the move complete at `to`
    /// with some originals still at `from`, and says so. Pushes every URI
    /// written or removed to `done` as it goes.
    ///
    /// Cost: a HEAD per ancestor of `to` (all at once), one HEAD, one LIST;
    /// per file one GET, one PUT and one DELETE.
    ///
    /// # Errors
    /// Forbidden; [`WriteError::NotFound`]; [`WriteError::Invalid`] when
    /// `to` lies inside `from`; [`WriteError::Conflict`] when something
    /// is at `to` already, or a file above it; store errors.
    pub async fn mv(&self, from: &VikingUri, to: &VikingUri, done: &mut Vec<VikingUri>) -> Result<usize, WriteError> {
        let from = self.authorize(from)?;
        let to = self.authorize(to)?;
        if to.is_under(&from) {
            return Err(WriteError::Invalid(format!("to_uri: {to} lies inside from_uri {from}")));
        }
        let keys = self.files_at(&from).await?;
        if keys.is_empty() {
            return Err(WriteError::NotFound(from));
        }
        self.no_file_above("to_uri", &to).await?;
        let (from_key, to_key) = (self.key(&from), self.key(&to));
        let target_taken = match self.store.head(&to_key).await {
            Ok(_) => true,
            Err(StoreError::NotFound(_)) => self.has_children(&to).await?,
            Err(e) => return Err(e.into()),
        };
        if target_taken {
            return Err(WriteError::Conflict(format!("to_uri: {to} already exists")));
        }
        // (original key, its etag, the copy's key)
        let mut copied: Vec<(String, String, String)> = Vec::with_capacity(keys.len());
        for key in &keys {
            let new_key = format!("{to_key}{}", &key[from_key.len()..]);
            let copy = async {
                let object = self.store.get(key).await?;
                match self.store.put(&new_key, object.body.clone(), PutMode::CreateNew).await {
                    Ok(_) => Ok(object.meta.etag),
                    // An unknown outcome of our own put: the same bytes are there.
                    Err(StoreError::Conflict(_))
                        if self.store.get(&new_key).await.is_ok_and(|o| o.body == object.body) =>
                    {
                        Ok(object.meta.etag)
                    }
                    Err(StoreError::Conflict(_)) => {
                        Err(WriteError::Conflict(format!("to_uri: {to} was written by another request")))
                    }
                    Err(e) => Err(e.into()),
                }
            };
            match copy.await {
                Ok(etag) => {
                    done.extend(uri_for_tree_key(&self.identity.account, &new_key));
                    copied.push((key.clone(), etag, new_key));
                }
                Err(e) => {
                    // Nothing moved: the copies go (a copy that stays is a
                    // duplicate, never a loss).
                    for (_, _, copy) in &copied {
                        let _ = self.store.delete(copy).await;
                    }
                    return Err(e);
                }
            }
        }
        for (key, etag, _) in &copied {
            if let Err(e) = self.store.delete_if(key, etag).await {
                return Err(WriteError::Conflict(format!(
                    "from_uri: every file is at {to}, but {} could not be removed from {from} ({e}); remove what is left there",
                    uri_for_tree_key(&self.identity.account, key).map_or_else(|| key.clone(), |u| u.to_string())
                )));
            }
            done.extend(uri_for_tree_key(&self.identity.account, key));
        }
        Ok(copied.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::{AccountId, PeerId, UserId};

    fn alice(peer: Option<&str>) -> Identity {
        Identity {
            account: AccountId::new("acme").expect("valid"),
            user: UserId::new("alice").expect("valid"),
            actor_peer: peer.map(|p| PeerId::new(p).expect("valid")),
        }
    }

    #[test]
    fn who_may_write_where() {
        // (uri, shared writer, acting peer, allowed)
        let cases: &[(&str, bool, Option<&str>, bool)] = &[
            ("viking://user/alice/memories/x.md", false, None, true),
            ("viking://~/notes/a.md", false, None, true),
            ("viking://user/bob/memories/x.md", true, None, false),
            ("viking://user/alice", true, None, false),
            ("viking://user/alice/sessions/s1/messages.jsonl", true, None, false),
            ("viking://user/alice/peers/codex/a.md", false, Some("claude"), false),
            ("viking://user/alice/peers/claude/a.md", false, Some("claude"), true),
            ("viking://resources/guide.md", false, None, false),
            ("viking://resources/guide.md", true, None, true),
            ("viking://agent/skills/deploy/SKILL.md", true, None, true),
            ("viking://resources", true, None, false),
            ("viking://agent/other/a.md", true, None, false),
            ("viking://", true, None, false),
        ];
        for (uri, shared, peer, allowed) in cases {
            let got = may_write(&alice(*peer), *shared, &VikingUri::parse(uri).expect("valid"));
            assert_eq!(got.is_ok(), *allowed, "{uri} shared={shared} peer={peer:?}: {got:?}");
        }
    }

    #[test]
    fn hidden_names_are_a_bad_request() {
        let got = may_write(&alice(None), true, &VikingUri::parse("viking://~/docs/.abstract.md").expect("valid"));
        assert!(matches!(&got, Err(WriteError::Invalid(m)) if m.starts_with("uri:")), "{got:?}");
    }
}

#[cfg(test)]
mod fields_tests {
    use super::*;

    #[test]
    fn a_fields_block_splits_off_and_keeps_what_it_holds() {
        let text =
            "Biscuit eats salmon.\n\n<!-- MEMORY_FIELDS\n{\"category\":\"entities\",\"written_by\":\"x\"}\n-->\n";
        let (body, fields) = split_fields(text);
        assert_eq!(body, "Biscuit eats salmon.");
        assert_eq!(fields.get("category").and_then(|v| v.as_str()), Some("entities"));
        assert_eq!(split_fields("plain\n").0, "plain");
        assert!(split_fields("x <!-- MEMORY_FIELDS not json -->").1.is_empty());
    }
}
