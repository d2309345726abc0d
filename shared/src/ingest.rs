//! Ingest: turns a local directory laid out as the `viking://` tree into
//! store objects and index records, incrementally (a node whose source hash
//! is unchanged is skipped). Sessions are never indexed or uploaded.
//!
//! Record building ([`file_record`], [`directory_records`]) is pure and is
//! shared with the S3-event indexer.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use sha2::Digest as _;

use crate::embed::{EmbedError, Embedder};
use crate::identity::AccountId;
use crate::index::extract::{
    cut_to_bytes, directory_overview, file_abstract, file_overview, first_paragraph, frontmatter_tags, full_text,
    sidecar_text, split_frontmatter,
};
use crate::index::lexical::encode_counts;
use crate::index::passage::{self, PassageOptions};
use crate::index::record::{LEVEL_ABSTRACT, LEVEL_FILE, LEVEL_OVERVIEW, Level, Span, classify, passage_level};
use crate::index::{
    self, AccountIndex, ContextType, EmbedderInfo, IndexError, IndexSnapshot, Record, Segment, Target, Tombstone,
};
use crate::store::{PutMode, StoreError};
use crate::tokens::estimate_escaped_tokens;
use crate::uri::{VikingUri, tree_key};

/// A directory's abstract sidecar (level 0).
pub const ABSTRACT_SIDECAR: &str = ".abstract.md";
/// A directory's overview sidecar (level 1).
pub const OVERVIEW_SIDECAR: &str = ".overview.md";

/// What ingest failed to do.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// Reading the source directory failed.
    #[error("cannot read {path}: {message}")]
    Source {
        /// The path.
        path: String,
        /// The I/O error.
        message: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The index failed (including an embedder mismatch).
    #[error(transparent)]
    Index(#[from] IndexError),
    /// The embedder failed.
    #[error(transparent)]
    Embed(#[from] EmbedError),
}

/// Ingest settings.
#[derive(Debug, Clone)]
pub struct IngestOptions {
    /// Abstract size in bytes (default 400).
    pub abstract_max_bytes: usize,
    /// Bytes of text embedded per node (default 2000).
    pub embed_max_bytes: usize,
    /// Records per committed segment (default 256): progress survives a crash.
    pub batch: usize,
    /// Remove indexed nodes (and their objects) that the source no longer has.
    pub prune: bool,
    /// How long files are cut into passages ([`PassageOptions::default`]).
    pub passages: PassageOptions,
}

impl Default for IngestOptions {
    fn default() -> Self {
        Self {
            abstract_max_bytes: 400,
            embed_max_bytes: 2000,
            batch: 256,
            prune: false,
            passages: PassageOptions::default(),
        }
    }
}

/// What happened to one node, reported as ingest goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IngestEvent {
    /// The walk found this many nodes to consider.
    Planned(usize),
    /// A node was uploaded and re-indexed.
    Indexed(String),
    /// A node's source is unchanged: skipped.
    Unchanged(String),
    /// A file was skipped (not UTF-8, or not indexable).
    Skipped(String, String),
    /// A node the source no longer has was removed.
    Removed(String),
}

/// Totals of one ingest run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IngestReport {
    /// Nodes (re-)indexed.
    pub indexed: usize,
    /// Nodes skipped because unchanged.
    pub unchanged: usize,
    /// Files skipped (binary, sessions, hidden).
    pub skipped: usize,
    /// Nodes removed (with `prune`).
    pub removed: usize,
}

/// File times, Unix seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Times {
    /// Creation.
    pub created_at: i64,
    /// Last update.
    pub updated_at: i64,
}

/// A record plus the text its vector is made from.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    /// The record.
    pub record: Record,
    /// The text to embed.
    pub embed_text: String,
}

/// The version of the record format; part of every source hash, so a new
/// version re-indexes every node on the next ingest.
pub const RECORD_VERSION: u32 = 5;

/// A node's source hash: the hex SHA-256 of [`RECORD_VERSION`] and `bytes`.
#[must_use]
pub fn source_hash(bytes: &[u8]) -> String {
    let mut hasher = sha2::Sha256::new();
    hasher.update(RECORD_VERSION.to_le_bytes());
    hasher.update(bytes);
    hex::encode(hasher.finalize())
}

fn tokens_u32(text: &str) -> u32 {
    u32::try_from(estimate_escaped_tokens(text)).unwrap_or(u32::MAX)
}

/// A node's name as searchable words: its last segment without the
/// extension, `_` and `-` read as spaces (`niangao_vet_visit.md` →
/// `niangao vet visit`).
fn name_words(uri: &VikingUri) -> String {
    let name = uri.segments().last().unwrap_or("");
    let stem = name.rsplit_once('.').map_or(name, |(stem, _)| stem);
    stem.replace(['_', '-'], " ")
}

fn owner_of(uri: &VikingUri) -> Option<String> {
    let mut segs = uri.segments();
    (segs.next() == Some("user")).then(|| segs.next().map(str::to_owned)).flatten()
}

/// An event's date from its path (`…/events/YYYY/MM/DD/…`), as Unix seconds.
#[must_use]
pub fn event_date(uri: &VikingUri) -> Option<i64> {
    let segs: Vec<&str> = uri.segments().collect();
    let at = segs.iter().position(|s| *s == "events")?;
    let (y, m, d) = (segs.get(at + 1)?, segs.get(at + 2)?, segs.get(at + 3)?);
    let month = time::Month::try_from(m.parse::<u8>().ok()?).ok()?;
    let date = time::Date::from_calendar_date(y.parse().ok()?, month, d.parse().ok()?).ok()?;
    Some(date.midnight().assume_utc().unix_timestamp())
}

/// A file's abstract as the index and the content routes give it: an
/// episode's digest ([`crate::memory::episodes::digest`]: what the user
/// said whole, replies cut short; cut to the larger of `max_bytes` and
/// [`crate::memory::episodes::DIGEST_MAX_BYTES`]), any other file's
/// summary section or first paragraph ([`file_abstract`], cut to
/// `max_bytes`).
#[must_use]
pub fn abstract_for(uri: &VikingUri, text: &str, max_bytes: usize) -> String {
    use crate::memory::episodes;
    episodes::is_episode(uri.as_str())
        .then(|| episodes::digest(full_text(text), episodes::DIGEST_CONTEXT_TOKENS))
        .flatten()
        .map_or_else(
            || file_abstract(text, max_bytes),
            |d| cut_to_bytes(&d, max_bytes.max(episodes::DIGEST_MAX_BYTES)).to_owned(),
        )
}

/// The level-2 record of a file, or `None` when the URI is never indexed
/// (sessions). Events take `created_at` from their path date when it has one.
#[must_use]
pub fn file_record(uri: &VikingUri, text: &str, times: Times, options: &IngestOptions) -> Option<Pending> {
    let (context_type, category) = classify(uri)?;
    let doc = split_frontmatter(text);
    let abstract_text = abstract_for(uri, text, options.abstract_max_bytes);
    let tags = doc.frontmatter.map(frontmatter_tags).unwrap_or_default();
    let embed_text = cut_to_bytes(&format!("{abstract_text}\n{}", doc.body.trim()), options.embed_max_bytes).to_owned();
    let created_at = event_date(uri).unwrap_or(times.created_at);
    let terms = encode_counts(&[&name_words(uri), &abstract_text, doc.body]);
    // An overview no richer than the abstract is no tier of its own.
    let overview_tokens = file_overview(context_type == ContextType::Memory, text)
        .filter(|o| o.trim() != abstract_text)
        .map(|o| tokens_u32(&o));
    Some(Pending {
        record: Record {
            uri: uri.clone(),
            level: LEVEL_FILE,
            context_type,
            category,
            abstract_tokens: tokens_u32(&abstract_text),
            abstract_text,
            overview_tokens,
            full_tokens: Some(full_text(text)).filter(|t| !t.is_empty()).map(tokens_u32),
            size: text.len() as u64,
            created_at,
            updated_at: times.updated_at.max(created_at),
            tags,
            owner_user_id: owner_of(uri),
            source_hash: source_hash(text.as_bytes()),
            source_version: None,
            terms,
            passages: 0,
            span: None,
        },
        embed_text,
    })
}

/// A file's records: its level-2 record ([`file_record`]) and, for a file
/// long enough to have them, its passages ([`crate::index::passage`]) at
/// levels `LEVEL_PASSAGE…`, each embedded with the headings it sits under
/// and sharing the file's source hash and times. Empty when the URI is
/// never indexed.
///
/// Cost: the file's record, one pass over the text to cut it, and a
/// token estimate and term count of each passage.
#[must_use]
pub fn file_records(uri: &VikingUri, text: &str, times: Times, options: &IngestOptions) -> Vec<Pending> {
    let Some(mut file) = file_record(uri, text, times, options) else { return Vec::new() };
    let pieces = passage::split(text, &options.passages);
    let name = name_words(uri);
    // What a passage shares with its file (not the file's own texts).
    let shared = Record { abstract_text: String::new(), terms: String::new(), ..file.record.clone() };
    let mut out = Vec::with_capacity(pieces.len() + 1);
    for (n, piece) in pieces.into_iter().enumerate() {
        let (Some(level), Ok(start), Ok(end)) =
            (passage_level(n), u32::try_from(piece.start), u32::try_from(piece.end))
        else {
            break;
        };
        let body = &text[piece.start..piece.end];
        let context = if piece.headings.is_empty() { name.as_str() } else { piece.headings.as_str() };
        let abstract_text = cut_to_bytes(body, options.abstract_max_bytes).trim().to_owned();
        out.push(Pending {
            record: Record {
                level,
                abstract_tokens: tokens_u32(&abstract_text),
                abstract_text,
                overview_tokens: None,
                full_tokens: Some(tokens_u32(body)),
                terms: encode_counts(&[&name, &piece.headings, body]),
                passages: 0,
                span: Some(Span { start, end, first_line: piece.first_line, last_line: piece.last_line }),
                ..shared.clone()
            },
            embed_text: cut_to_bytes(&format!("{context}\n{body}"), options.embed_max_bytes).to_owned(),
        });
    }
    file.record.passages = u32::try_from(out.len()).unwrap_or(u32::MAX);
    out.insert(0, file);
    out
}

/// Removals of a file's passages `now..held` (the file has `now` passages,
/// the index held `held`), at `version`.
#[must_use]
pub fn stale_passages(uri: &VikingUri, now: u32, held: u32, version: Option<&str>) -> Vec<Tombstone> {
    (now..held)
        .filter_map(|n| usize::try_from(n).ok().and_then(passage_level))
        .map(|level| Tombstone {
            uri: uri.clone(),
            level,
            source_version: version.map(str::to_owned),
            kept_since: None,
        })
        .collect()
}

/// A directory's records from its sidecars: level 0 from `.abstract.md`,
/// level 1 from `.overview.md` (each only when present). Both carry the
/// abstract sidecar's text (or the overview's first paragraph) as abstract.
#[must_use]
pub fn directory_records(
    dir: &VikingUri,
    abstract_md: Option<&str>,
    overview_md: Option<&str>,
    times: Times,
    options: &IngestOptions,
) -> Vec<Pending> {
    let Some((context_type, category)) = classify(dir) else { return Vec::new() };
    if dir.path().is_empty() {
        return Vec::new();
    }
    let overview_body = overview_md.map(|o| split_frontmatter(o).body.trim());
    let abstract_text = match (abstract_md, overview_body) {
        (Some(a), _) => sidecar_text(a, options.abstract_max_bytes),
        (None, Some(o)) => cut_to_bytes(first_paragraph(o).unwrap_or(""), options.abstract_max_bytes).to_owned(),
        (None, None) => return Vec::new(),
    };
    let hash = source_hash(format!("{}\u{0}{}", abstract_md.unwrap_or(""), overview_md.unwrap_or("")).as_bytes());
    let name = name_words(dir);
    let make = |level, size: usize, embed_text: String| Pending {
        record: Record {
            uri: dir.clone(),
            level,
            context_type,
            category,
            abstract_text: abstract_text.clone(),
            abstract_tokens: tokens_u32(&abstract_text),
            overview_tokens: overview_md.map(|o| tokens_u32(directory_overview(o))),
            full_tokens: None,
            size: size as u64,
            created_at: times.created_at,
            updated_at: times.updated_at,
            tags: Vec::new(),
            owner_user_id: owner_of(dir),
            source_hash: hash.clone(),
            source_version: None,
            terms: encode_counts(&[&name, &embed_text]),
            passages: 0,
            span: None,
        },
        embed_text,
    };
    let mut out = Vec::new();
    if let Some(a) = abstract_md {
        out.push(make(LEVEL_ABSTRACT, a.len(), abstract_text.clone()));
    }
    if let (Some(o), Some(body)) = (overview_md, overview_body) {
        out.push(make(LEVEL_OVERVIEW, o.len(), cut_to_bytes(body, options.embed_max_bytes).to_owned()));
    }
    out
}

/// One node found by the walk.
enum Node {
    File { uri: VikingUri, path: PathBuf },
    Dir { uri: VikingUri, abstract_path: Option<PathBuf>, overview_path: Option<PathBuf> },
}

fn io_err(path: &Path, e: &std::io::Error) -> IngestError {
    IngestError::Source { path: path.display().to_string(), message: e.to_string() }
}

fn walk(root: &Path, skipped: &mut Vec<(String, String)>) -> Result<Vec<Node>, IngestError> {
    let mut files = Vec::new();
    let mut dirs: BTreeMap<VikingUri, (Option<PathBuf>, Option<PathBuf>)> = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|e| io_err(&dir, &e))?;
        for entry in entries {
            let entry = entry.map_err(|e| io_err(&dir, &e))?;
            let path = entry.path();
            let rel = path.strip_prefix(root).unwrap_or(&path);
            let rel_text: Vec<String> =
                rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
            let name = rel_text.last().cloned().unwrap_or_default();
            if entry.file_type().map_err(|e| io_err(&path, &e))?.is_dir() {
                if !name.starts_with('.') {
                    stack.push(path);
                }
                continue;
            }
            let parent_path = rel_text[..rel_text.len().saturating_sub(1)].join("/");
            let Ok(parent) = VikingUri::from_path(&parent_path) else {
                skipped.push((path.display().to_string(), "not a valid viking:// path".into()));
                continue;
            };
            if (name == ABSTRACT_SIDECAR || name == OVERVIEW_SIDECAR) && classify(&parent).is_none() {
                skipped.push((format!("{parent}/{name}"), "never indexed (sessions)".into()));
                continue;
            }
            if name == ABSTRACT_SIDECAR || name == OVERVIEW_SIDECAR {
                let slot = dirs.entry(parent).or_default();
                if name == ABSTRACT_SIDECAR {
                    slot.0 = Some(path)
                } else {
                    slot.1 = Some(path)
                }
                continue;
            }
            match VikingUri::from_path(&rel_text.join("/")) {
                Ok(uri) if !name.starts_with('.') && classify(&uri).is_some() => files.push(Node::File { uri, path }),
                Ok(uri) => skipped.push((uri.to_string(), "hidden or never indexed (sessions)".into())),
                Err(e) => skipped.push((path.display().to_string(), e.to_string())),
            }
        }
    }
    files.extend(dirs.into_iter().map(|(uri, (a, o))| Node::Dir { uri, abstract_path: a, overview_path: o }));
    Ok(files)
}

fn read_text(path: &Path) -> Result<Option<String>, IngestError> {
    let bytes = std::fs::read(path).map_err(|e| io_err(path, &e))?;
    Ok(String::from_utf8(bytes).ok())
}

fn file_times(path: &Path) -> Times {
    let modified = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(0));
    Times { created_at: modified, updated_at: modified }
}

/// Ingests the tree under `source` into `account`: uploads changed files
/// (and sidecars) to `target`'s store and commits their records in batches
/// of `options.batch` to wherever the account's index lives
/// ([`index::account::commit`]; a new account starts on
/// `target.new_accounts`). `on_event` hears about every node.
///
/// Cost: a read and hash of every source file; what the index holds, read
/// once (the segments, or one `ListVectors` per 500 records); uploads and
/// embedding only for changed nodes.
///
/// # Errors
/// Source, store, index (including an embedder mismatch) or embedder errors;
/// batches committed before the error stay committed.
pub async fn ingest_dir(
    source: &Path,
    target: &Target<'_>,
    account: &AccountId,
    embedder: &dyn Embedder,
    options: &IngestOptions,
    on_event: &mut (dyn FnMut(IngestEvent) + Send),
) -> Result<IngestReport, IngestError> {
    let info = EmbedderInfo { id: embedder.id().to_owned(), dimension: embedder.dimension() };
    let store = target.store;
    let snapshot = Arc::new(IndexSnapshot::load(store, account, None).await?);
    snapshot.ensure_embedder(account, &info)?;
    // What the index holds now, wherever it lives.
    let index = AccountIndex::open(account, snapshot, target.vectors)?;
    let known: HashMap<(VikingUri, Level), Record> =
        index.all_records().await?.into_iter().map(|r| ((r.uri.clone(), r.level), r)).collect();
    drop(index);
    let mut skipped = Vec::new();
    let nodes = walk(source, &mut skipped)?;
    let mut report = IngestReport { skipped: skipped.len(), ..IngestReport::default() };
    for (what, why) in skipped {
        on_event(IngestEvent::Skipped(what, why));
    }
    on_event(IngestEvent::Planned(nodes.len()));

    let mut seen: HashSet<(VikingUri, Level)> = HashSet::new();
    let mut batch: Vec<Pending> = Vec::new();
    let mut stale: Vec<Tombstone> = Vec::new();
    for node in nodes {
        let (uri, pendings, uploads) = match node {
            Node::File { uri, path } => {
                let Some(text) = read_text(&path)? else {
                    report.skipped += 1;
                    on_event(IngestEvent::Skipped(uri.to_string(), "not UTF-8 text".into()));
                    continue;
                };
                let pendings = file_records(&uri, &text, file_times(&path), options);
                (uri.clone(), pendings, vec![(uri, text)])
            }
            Node::Dir { uri, abstract_path, overview_path } => {
                let abstract_md = abstract_path.as_deref().map(read_text).transpose()?.flatten();
                let overview_md = overview_path.as_deref().map(read_text).transpose()?.flatten();
                let times = file_times(abstract_path.as_deref().or(overview_path.as_deref()).unwrap_or(source));
                let pendings = directory_records(&uri, abstract_md.as_deref(), overview_md.as_deref(), times, options);
                let mut uploads = Vec::new();
                for (name, text) in [(ABSTRACT_SIDECAR, abstract_md), (OVERVIEW_SIDECAR, overview_md)] {
                    if let (Some(text), Ok(sidecar)) = (text, uri.join(name)) {
                        uploads.push((sidecar, text));
                    }
                }
                (uri, pendings, uploads)
            }
        };
        seen.extend(pendings.iter().map(|p| (p.record.uri.clone(), p.record.level)));
        let changed = pendings.iter().any(|p| {
            known.get(&(p.record.uri.clone(), p.record.level)).is_none_or(|r| r.source_hash != p.record.source_hash)
        });
        if !changed {
            report.unchanged += 1;
            on_event(IngestEvent::Unchanged(uri.to_string()));
            continue;
        }
        for (target, text) in uploads {
            store.put(&tree_key(account, &target), Bytes::from(text), PutMode::Overwrite).await?;
        }
        report.indexed += 1;
        on_event(IngestEvent::Indexed(uri.to_string()));
        // Passages past the new count (the file got shorter) go with it.
        let held = known.get(&(uri.clone(), LEVEL_FILE)).map_or(0, |r| r.passages);
        let now = pendings.first().filter(|p| p.record.level == LEVEL_FILE).map_or(0, |p| p.record.passages);
        stale.extend(stale_passages(&uri, now, held, None));
        batch.extend(pendings);
        if batch.len() >= options.batch.max(1) {
            let pending = std::mem::take(&mut batch);
            let tombstones = std::mem::take(&mut stale);
            commit_batch(target, account, embedder, &info, Batch { pending, tombstones, ..Batch::default() }, None)
                .await?;
        }
    }
    let mut tombstones = stale;
    if options.prune {
        let mut gone: Vec<Record> = known.into_values().filter(|r| !seen.contains(&(r.uri.clone(), r.level))).collect();
        gone.sort_by(|a, b| (a.uri.as_str(), a.level).cmp(&(b.uri.as_str(), b.level)));
        for record in gone {
            if record.is_passage() {
                // Part of a file: goes with it, reported once.
                tombstones.push(Tombstone {
                    uri: record.uri,
                    level: record.level,
                    source_version: None,
                    kept_since: None,
                });
                continue;
            }
            let key = if record.level == LEVEL_FILE {
                Some(tree_key(account, &record.uri))
            } else {
                let name = if record.level == LEVEL_ABSTRACT { ABSTRACT_SIDECAR } else { OVERVIEW_SIDECAR };
                record.uri.join(name).ok().map(|u| tree_key(account, &u))
            };
            if let Some(key) = key {
                store.delete(&key).await?;
            }
            report.removed += 1;
            on_event(IngestEvent::Removed(record.display_uri()));
            tombstones.push(Tombstone { uri: record.uri, level: record.level, source_version: None, kept_since: None });
        }
    }
    commit_batch(target, account, embedder, &info, Batch { pending: batch, tombstones, ..Batch::default() }, None)
        .await?;
    Ok(report)
}

/// What one commit writes: records to embed, removals, and records that
/// keep their vector (an unchanged source seen at a newer version).
#[derive(Debug, Default)]
pub(crate) struct Batch {
    /// Records to embed.
    pub(crate) pending: Vec<Pending>,
    /// Removals.
    pub(crate) tombstones: Vec<Tombstone>,
    /// Records with their vectors, committed as they are.
    pub(crate) bumps: Vec<(Record, Vec<f32>)>,
}

/// Embeds `batch`'s pending records and commits everything in it as one
/// segment (nothing when it is empty) to wherever the account's index
/// lives ([`index::account::commit`]) — against `basis`, the snapshot it
/// was computed from, when given, so that no versioned node goes back to
/// an older version.
///
/// # Errors
/// Embedder, store or index failures.
pub(crate) async fn commit_batch(
    target: &Target<'_>,
    account: &AccountId,
    embedder: &dyn Embedder,
    info: &EmbedderInfo,
    batch: Batch,
    basis: Option<&index::IndexSnapshot>,
) -> Result<(), IngestError> {
    let Batch { pending, tombstones, bumps } = batch;
    if pending.is_empty() && tombstones.is_empty() && bumps.is_empty() {
        return Ok(());
    }
    let texts: Vec<&str> = pending.iter().map(|p| p.embed_text.as_str()).collect();
    let vectors = if texts.is_empty() { Vec::new() } else { embedder.embed(&texts).await? };
    let mut segment = Segment { dim: info.dimension, tombstones, ..Segment::default() };
    for (record, vector) in pending.into_iter().map(|p| p.record).zip(vectors).chain(bumps) {
        segment.records.push(record);
        segment.vectors.extend(vector);
    }
    let committed = index::account::commit(target, account, info, segment, basis).await?;
    if committed.dropped > 0 {
        tracing::info!(account = %account, dropped = committed.dropped, "changes older than the index were not committed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An episode's abstract keeps a long user message whole; any other
    /// file's is cut to `max_bytes`.
    #[test]
    fn an_episode_abstract_keeps_the_users_words_whole() {
        let said =
            format!("I moved to Alvalade on June 1st. {}", "The flat has a balcony over the market. ".repeat(14));
        let body = format!("2025-06-01 (Sunday) 09:00\nuser: {said}\nassistant: Congratulations on the move!\n");
        assert!(said.len() > 400, "{}", said.len());
        let episode = VikingUri::parse("viking://user/u/memories/events/2025/06/01/s-001-01.md").expect("uri");
        let digest = abstract_for(&episode, &body, 400);
        assert!(digest.contains(said.trim_end()), "{digest}");
        assert!(!digest.contains("Congratulations"), "{digest}");
        let note = VikingUri::parse("viking://resources/notes/move.md").expect("uri");
        assert!(abstract_for(&note, &body, 400).len() <= 400);
    }
}
