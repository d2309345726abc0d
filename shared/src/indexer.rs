//! The `indexer` function's work: keeps an account's vector index in step
//! with its content tree after objects change in the store (S3 event
//! notifications in production).
//!
//! It is state-based, not event-based: for every node a change names, it
//! reads what the store holds now and indexes that — a missing object
//! removes the node's records. So a notification delivered twice, late, or
//! out of order still leaves the index matching the store, and a node whose
//! source hash is unchanged (an `ingest` that already committed it) costs
//! a read and no embedding.
//!
//! Accounts fail alone: an account whose index cannot be updated (a corrupt
//! manifest, an index built by another embedder, a store failure) is named
//! with its error, and the other accounts' changes are committed all the
//! same ([`ApplyError`]), so a caller can retry only the failed changes.
//!
//! Record building is [`crate::ingest`]'s ([`file_record`],
//! [`directory_records`]): a node indexed from S3 is the record `ingest`
//! makes from the same bytes, except for its times.

use std::collections::BTreeMap;

use futures_util::{StreamExt as _, TryStreamExt as _, stream};

use crate::app::App;
use crate::identity::AccountId;
use crate::index::record::{LEVEL_ABSTRACT, LEVEL_FILE, LEVEL_OVERVIEW, Level, classify, supersedes};
use crate::index::{AccountIndex, IndexSnapshot, Record, Tombstone};
use crate::ingest::{
    ABSTRACT_SIDECAR, Batch, IngestError, IngestOptions, OVERVIEW_SIDECAR, Pending, Times, commit_batch,
    directory_records, file_records, stale_passages,
};
use crate::store::{SharedStore, StoreError, get_checked};
use crate::uri::{VikingUri, tree_key};

/// One changed object, as a notification names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The object's key relative to the store's root (without the
    /// deployment's key prefix), e.g. `accounts/acme/tree/resources/a.md`.
    pub key: String,
    /// When it changed, Unix seconds: the record's `updated_at` (and its
    /// `created_at` when the node is new).
    pub at: i64,
    /// The notification's `sequencer` (S3 orders an object's changes by
    /// it), recorded as the records' [`crate::index::Record::source_version`]
    /// so that a commit never replaces a newer read with an older one.
    /// `None`: unordered (such records count as older than any versioned
    /// one).
    pub version: Option<String>,
}

/// What the changes of one batch say about a node: its latest change time
/// and its newest version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    /// The latest change time, Unix seconds.
    pub at: i64,
    /// The newest notification version ([`Change::version`]).
    pub version: Option<String>,
}

impl Seen {
    fn add(&mut self, change: &Change) {
        self.at = self.at.max(change.at);
        if supersedes(change.version.as_deref(), self.version.as_deref()) {
            self.version.clone_from(&change.version);
        }
    }
}

/// A node of the tree a change touches.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Node {
    /// A file: its level-2 record.
    File(VikingUri),
    /// A directory whose `.abstract.md` or `.overview.md` changed: its
    /// level-0 and level-1 records.
    Dir(VikingUri),
}

/// Why a key is not indexed (logged, never an error: the bucket holds
/// index segments, sessions and ledgers too).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ignored {
    /// Not under `accounts/{account}/tree/`.
    NotInTree,
    /// Under a tree, but sessions, hidden files and hidden directories are
    /// never indexed.
    NeverIndexed,
    /// The account id or the path is not valid.
    Invalid(String),
}

/// Which account and node a store key belongs to.
///
/// # Errors
/// [`Ignored`] saying why the key is not an indexable node.
pub fn node_of(key: &str) -> Result<(AccountId, Node), Ignored> {
    let mut parts = key.splitn(4, '/');
    let (Some("accounts"), Some(account), Some("tree"), Some(path)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Ignored::NotInTree);
    };
    let account = AccountId::new(account).map_err(|e| Ignored::Invalid(e.to_string()))?;
    let uri = VikingUri::from_path(path).map_err(|e| Ignored::Invalid(e.to_string()))?;
    let (parent, name) = path.rsplit_once('/').unwrap_or(("", path));
    if parent.split('/').any(|segment| segment.starts_with('.')) {
        return Err(Ignored::NeverIndexed);
    }
    if name == ABSTRACT_SIDECAR || name == OVERVIEW_SIDECAR {
        let dir = VikingUri::from_path(parent).map_err(|e| Ignored::Invalid(e.to_string()))?;
        return if classify(&dir).is_some() && !dir.path().is_empty() {
            Ok((account, Node::Dir(dir)))
        } else {
            Err(Ignored::NeverIndexed)
        };
    }
    if name.starts_with('.') || classify(&uri).is_none() {
        return Err(Ignored::NeverIndexed);
    }
    Ok((account, Node::File(uri)))
}

/// Totals of one run of [`apply`], over the accounts whose changes were
/// applied; all zero by default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IndexerReport {
    /// Records written (new or changed).
    pub indexed: usize,
    /// Records removed (their object is gone, or no longer UTF-8 text).
    pub removed: usize,
    /// Nodes the index already matched (same source, or gone from both).
    pub unchanged: usize,
    /// Keys that are not indexable nodes.
    pub ignored: usize,
}

/// What [`apply`] could not do: the changes of some accounts, each account
/// with its error. The changes of every other account were committed. The
/// message names every failed account with its error (store keys
/// included).
#[derive(Debug, thiserror::Error)]
#[error("{}", describe(.failed))]
pub struct ApplyError {
    /// Totals of the accounts whose changes were applied (and of every
    /// ignored key), counted as [`IndexerReport`] counts them: a failed
    /// account's nodes count nowhere.
    pub report: IndexerReport,
    /// Every account whose changes were not applied, in account order (as
    /// [`apply`] returns it, never empty).
    pub failed: Vec<AccountFailure>,
}

/// One account whose changes were not applied: none of them is committed,
/// unless the failure was a commit's own unknown outcome (then they may
/// be); applying the same changes again is safe either way.
#[derive(Debug)]
pub struct AccountFailure {
    /// The account.
    pub account: AccountId,
    /// Why: a store failure (reading a node, the manifest or a segment,
    /// or writing the segment or the manifest), an index failure (a corrupt
    /// manifest or segment, an index built by another embedder, a manifest
    /// that kept changing under the commit), or an embedder failure.
    pub error: IngestError,
}

impl ApplyError {
    /// Whether `change` was not applied: it names a node of a failed
    /// account. A key that is not an indexable node ([`node_of`]) was
    /// ignored, not failed.
    ///
    /// Cost: parsing the key, and a scan of the failed accounts.
    #[must_use]
    pub fn failed_change(&self, change: &Change) -> bool {
        node_of(&change.key).is_ok_and(|(account, _)| self.failed.iter().any(|f| f.account == account))
    }
}

/// [`ApplyError`]'s message: every failed account with its error.
fn describe(failed: &[AccountFailure]) -> String {
    let accounts = if failed.len() == 1 { "1 account".to_owned() } else { format!("{} accounts", failed.len()) };
    let each: Vec<String> = failed.iter().map(|f| format!("account {}: {}", f.account, f.error)).collect();
    format!("the changes of {accounts} were not applied: {}", each.join("; "))
}

/// Brings the index of every account the changes touch in step with the
/// store: reads each named node as the store holds it now, and commits one
/// segment per account with the changed records and the removals. An
/// account that fails does not stop the others: each account's changes are
/// committed (or fail) on their own.
///
/// Cost per account: one index revalidation (through the app's cache,
/// whatever `index.revalidate_after_ms` says) with the nodes' reads beside
/// it — one GET per file and two per directory, `READ_CONCURRENCY` (10) nodes
/// at a time; one embedding call for the changed nodes; a manifest GET,
/// one segment PUT and a manifest compare-and-swap (none when nothing
/// changed). Accounts are handled one after the other, in account order; a
/// failing account costs what it did up to its failure.
///
/// # Errors
/// [`ApplyError`] when the changes of at least one account were not
/// applied (a store, index — an embedder mismatch among them — or embedder
/// failure), after every other account's changes were: it names each
/// failed account with its error, and carries the totals of the rest. A
/// retry of the failed accounts' changes, or of the whole run, is safe.
pub async fn apply(app: &App, changes: &[Change]) -> Result<IndexerReport, ApplyError> {
    let mut report = IndexerReport::default();
    let mut by_account: BTreeMap<AccountId, BTreeMap<Node, Seen>> = BTreeMap::new();
    for change in changes {
        match node_of(&change.key) {
            Ok((account, node)) => {
                let seen = by_account
                    .entry(account)
                    .or_default()
                    .entry(node)
                    .or_insert_with(|| Seen { at: change.at, version: change.version.clone() });
                seen.add(change);
            }
            Err(why) => {
                tracing::debug!(key = %change.key, ?why, "not an indexable node");
                report.ignored += 1;
            }
        }
    }
    let options = IngestOptions {
        abstract_max_bytes: app.config.index.abstract_max_bytes,
        embed_max_bytes: app.config.index.embed_max_bytes,
        ..IngestOptions::default()
    };
    let mut failed = Vec::new();
    for (account, nodes) in by_account {
        match apply_account(app, &account, nodes, &options).await {
            Ok(done) => {
                report.indexed += done.indexed;
                report.removed += done.removed;
                report.unchanged += done.unchanged;
            }
            Err(error) => failed.push(AccountFailure { account, error }),
        }
    }
    if failed.is_empty() { Ok(report) } else { Err(ApplyError { report, failed }) }
}

/// [`apply`] for one account's nodes (each with its latest change time and
/// version): the account's totals (`ignored` is 0), committed as one
/// segment against the snapshot the steps were computed from, so that no
/// node goes back to an older version
/// ([`crate::index::commit_ordered`]).
async fn apply_account(
    app: &App,
    account: &AccountId,
    nodes: BTreeMap<Node, Seen>,
    options: &IngestOptions,
) -> Result<IndexerReport, IngestError> {
    let info = app.embedder_info();
    // The node reads need no index: they go out with its revalidation.
    let (snapshot, sources) = tokio::join!(app.index.fresh_snapshot(account), read_nodes(&app.store, account, &nodes));
    let (snapshot, sources) = (snapshot?, sources?);
    snapshot.ensure_embedder(account, &info)?;
    // What the index holds of these nodes: the loaded segments, or the
    // nodes' records read back from S3 Vectors.
    let keys: Vec<(VikingUri, Level)> = nodes
        .keys()
        .flat_map(|node| match node {
            Node::File(uri) => vec![(uri.clone(), LEVEL_FILE)],
            Node::Dir(uri) => vec![(uri.clone(), LEVEL_ABSTRACT), (uri.clone(), LEVEL_OVERVIEW)],
        })
        .collect();
    let index = AccountIndex::open(account, snapshot, app.vector_bucket())?;
    let snapshot = index.basis(&keys).await?;
    // On S3 Vectors the basis holds only what was asked for: add the
    // passages its files hold (on segments it is the whole index).
    let passages: Vec<(VikingUri, Level)> = keys
        .iter()
        .filter(|(_, level)| *level == LEVEL_FILE)
        .filter_map(|(uri, _)| snapshot.get(uri, LEVEL_FILE))
        .flat_map(|r| stale_passages(&r.uri, 0, r.passages, None))
        .map(|t| (t.uri, t.level))
        .collect();
    let snapshot = if passages.is_empty() || matches!(index, AccountIndex::Segments(_)) {
        snapshot
    } else {
        index.basis(&[keys, passages].concat()).await?
    };
    let mut report = IndexerReport::default();
    let mut pending: Vec<Pending> = Vec::new();
    let mut tombstones: Vec<Tombstone> = Vec::new();
    let mut bumps: Vec<(Record, Vec<f32>)> = Vec::new();
    for ((node, seen), source) in nodes.into_iter().zip(sources) {
        let step = step(&snapshot, &node, source, &seen, options);
        if step.pending.is_empty() && step.tombstones.is_empty() {
            report.unchanged += 1;
        }
        report.indexed += step.pending.len();
        report.removed += step.tombstones.len();
        pending.extend(step.pending);
        tombstones.extend(step.tombstones.into_iter().chain(step.absent));
        bumps.extend(step.bumps);
    }
    let batch = Batch { pending, tombstones, bumps };
    commit_batch(&app.index_target(), account, app.embedder.as_ref(), &info, batch, Some(&snapshot)).await?;
    Ok(report)
}

/// Node reads in flight at once.
const READ_CONCURRENCY: usize = 10;

/// What the store holds for a node now: a file's text, or a directory's
/// two sidecars; `None` for an object that is missing or not UTF-8 text
/// (either way not indexed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A file's text.
    File(Option<String>),
    /// A directory's `.abstract.md` and `.overview.md`.
    Dir(Option<String>, Option<String>),
}

/// Reads every node of `nodes` (in their order), [`READ_CONCURRENCY`] at
/// a time; a directory's two sidecars together.
async fn read_nodes(
    store: &SharedStore,
    account: &AccountId,
    nodes: &BTreeMap<Node, Seen>,
) -> Result<Vec<Source>, StoreError> {
    // Owned items: see `IndexSnapshot::load_manifest`.
    stream::iter(nodes.keys().cloned())
        .map(|node| async move {
            match &node {
                Node::File(uri) => Ok(Source::File(read_text(store, &tree_key(account, uri)).await?)),
                Node::Dir(dir) => {
                    let key = |name: &str| dir.join(name).map(|u| tree_key(account, &u)).ok();
                    let read = |key: Option<String>| async move {
                        match key {
                            Some(key) => read_text(store, &key).await,
                            None => Ok(None),
                        }
                    };
                    let (abstract_md, overview_md) =
                        tokio::join!(read(key(ABSTRACT_SIDECAR)), read(key(OVERVIEW_SIDECAR)));
                    Ok(Source::Dir(abstract_md?, overview_md?))
                }
            }
        })
        .buffered(READ_CONCURRENCY)
        .try_collect()
        .await
}

/// The object under `key` as UTF-8 text, its body checked against its
/// etag ([`get_checked`]: a body cut in transit is read again, never
/// indexed); `None` when it is missing or not text.
async fn read_text(store: &SharedStore, key: &str) -> Result<Option<String>, StoreError> {
    match get_checked(store.as_ref(), key).await {
        Ok(object) => Ok(String::from_utf8(object.body.to_vec()).ok()),
        Err(StoreError::NotFound(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// What one node changes in the index.
#[derive(Debug, Default, PartialEq)]
pub struct Step {
    /// New or changed records (to embed and commit), each with the
    /// change's version.
    pub pending: Vec<Pending>,
    /// Records to remove, each with the change's version.
    pub tombstones: Vec<Tombstone>,
    /// Records whose source is unchanged but seen at a newer version: the
    /// indexed record with that version, and its vector (no embedding).
    /// Committing them keeps a stale, older read from replacing the node
    /// (`A`–`B`–`A`: a file changed and changed back).
    pub bumps: Vec<(Record, Vec<f32>)>,
    /// Removals of nodes the index holds no record of, seen at a newer
    /// version than any it holds: committed as tombstones all the same,
    /// so that an older read of the node, committed later, cannot bring
    /// it back (a file created and removed while the read of its creation
    /// is in flight).
    pub absent: Vec<Tombstone>,
}

impl Step {
    /// Adds `level`'s new record, or its removal, or its version bump, or
    /// nothing when the index already holds the same state at the same or
    /// a newer version.
    fn level(
        &mut self,
        snapshot: &IndexSnapshot,
        uri: &VikingUri,
        level: Level,
        new: Option<Pending>,
        version: Option<&str>,
    ) {
        let current = snapshot.get_with_vector(uri, level);
        let tombstone =
            || Tombstone { uri: uri.clone(), level, source_version: version.map(str::to_owned), kept_since: None };
        match (new, current) {
            (Some(p), Some((r, vector))) if r.source_hash == p.record.source_hash => {
                if supersedes(version, r.source_version.as_deref()) {
                    let bumped = Record { source_version: version.map(str::to_owned), ..r.clone() };
                    self.bumps.push((bumped, vector.to_vec()));
                }
            }
            (Some(mut p), _) => {
                p.record.source_version = version.map(str::to_owned);
                self.pending.push(p);
            }
            (None, Some(_)) => self.tombstones.push(tombstone()),
            (None, None) => {
                if version.is_some() && snapshot.version_of(uri, level).is_none_or(|held| supersedes(version, held)) {
                    self.absent.push(tombstone());
                }
            }
        }
    }
}

/// What `node` changes in `snapshot` given what the store holds for it
/// (`source`), as `seen` in the changes (its time, Unix seconds, and its
/// version): a record's `created_at` is kept from the record it replaces.
/// Pure: no I/O.
#[must_use]
pub fn step(snapshot: &IndexSnapshot, node: &Node, source: Source, seen: &Seen, options: &IngestOptions) -> Step {
    let (at, version) = (seen.at, seen.version.as_deref());
    let times = |uri: &VikingUri, level: Level| {
        let created_at = snapshot.get(uri, level).map_or(at, |r| r.created_at);
        Times { created_at, updated_at: at }
    };
    let mut step = Step::default();
    match (node, source) {
        (Node::File(uri), Source::File(text)) => {
            let mut new = text.map(|t| file_records(uri, &t, times(uri, LEVEL_FILE), options)).unwrap_or_default();
            let file = (!new.is_empty()).then(|| new.remove(0));
            // The passages the file has now, and those the index holds
            // beyond them (the file got shorter, or is gone).
            let held = snapshot.get(uri, LEVEL_FILE).map_or(0, |r| r.passages);
            let count = file.as_ref().map_or(0, |f| f.record.passages);
            step.level(snapshot, uri, LEVEL_FILE, file, version);
            for passage in new {
                step.level(snapshot, uri, passage.record.level, Some(passage), version);
            }
            for stale in stale_passages(uri, count, held, version) {
                step.level(snapshot, uri, stale.level, None, version);
            }
        }
        (Node::Dir(dir), Source::Dir(abstract_md, overview_md)) => {
            let built = directory_records(
                dir,
                abstract_md.as_deref(),
                overview_md.as_deref(),
                times(dir, LEVEL_ABSTRACT),
                options,
            );
            let mut by_level: BTreeMap<Level, Pending> = built.into_iter().map(|p| (p.record.level, p)).collect();
            for level in [LEVEL_ABSTRACT, LEVEL_OVERVIEW] {
                step.level(snapshot, dir, level, by_level.remove(&level), version);
            }
        }
        // A source read for another kind of node: nothing to do.
        (Node::File(_), Source::Dir(..)) | (Node::Dir(_), Source::File(_)) => {}
    }
    step
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(uri: &str) -> Node {
        Node::File(VikingUri::parse(uri).expect("uri"))
    }

    #[test]
    fn keys_map_to_their_account_and_node() {
        let account = |key: &str| node_of(key).map(|(a, _)| a.to_string());
        let node = |key: &str| node_of(key).map(|(_, n)| n);
        assert_eq!(account("accounts/acme/tree/resources/a.md"), Ok("acme".into()));
        assert_eq!(node("accounts/acme/tree/resources/a.md"), Ok(file("viking://resources/a.md")));
        assert_eq!(
            node("accounts/acme/tree/user/u1/memories/events/2024/x.md"),
            Ok(file("viking://user/u1/memories/events/2024/x.md"))
        );
        let dir = Node::Dir(VikingUri::parse("viking://resources/guides").expect("uri"));
        assert_eq!(node("accounts/acme/tree/resources/guides/.overview.md"), Ok(dir.clone()));
        assert_eq!(node("accounts/acme/tree/resources/guides/.abstract.md"), Ok(dir));
    }

    #[test]
    fn what_ingest_never_indexes_is_ignored() {
        for key in [
            "accounts/acme/index/manifest.json",
            "accounts/acme/keys.json",
            // The API key table (`skald keys`), outside every account.
            "keys/0123456789abcdef.json",
            "elsewhere/acme/tree/resources/a.md",
            "accounts/acme",
            "",
        ] {
            assert_eq!(node_of(key), Err(Ignored::NotInTree), "{key}");
        }
        for key in [
            "accounts/acme/tree/user/u1/sessions/s1/meta.json",
            "accounts/acme/tree/user/u1/sessions/s1/.overview.md",
            "accounts/acme/tree/resources/.hidden.md",
            "accounts/acme/tree/resources/.git/config",
            "accounts/acme/tree/.abstract.md",
        ] {
            assert_eq!(node_of(key), Err(Ignored::NeverIndexed), "{key}");
        }
        for key in ["accounts/Bad Account/tree/resources/a.md", "accounts/acme/tree/resources/../user/x.md"] {
            assert!(matches!(node_of(key), Err(Ignored::Invalid(_))), "{key}: {:?}", node_of(key));
        }
    }

    #[test]
    fn a_failure_names_the_changes_of_its_accounts_only() {
        let failure = |account: &str, what: &str| AccountFailure {
            account: AccountId::new(account).expect("account"),
            error: IngestError::Index(crate::index::IndexError::Corrupt(what.to_owned())),
        };
        let error = ApplyError {
            report: IndexerReport { indexed: 1, ..IndexerReport::default() },
            failed: vec![failure("acme", "manifest: expected value"), failure("beta", "segment 3")],
        };
        let change = |key: &str| Change { key: key.to_owned(), at: 0, version: None };
        assert!(error.failed_change(&change("accounts/acme/tree/resources/a.md")));
        assert!(error.failed_change(&change("accounts/beta/tree/resources/guides/.overview.md")));
        assert!(!error.failed_change(&change("accounts/gamma/tree/resources/a.md")));
        assert!(!error.failed_change(&change("accounts/acme/index/manifest.json")), "ignored, not failed");
        assert_eq!(
            error.to_string(),
            "the changes of 2 accounts were not applied: account acme: index data is corrupt: manifest: expected \
             value; account beta: index data is corrupt: segment 3"
        );
    }
}
