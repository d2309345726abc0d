//! Reading and listing the content tree for agents: the URIs a context
//! block hands out, expanded (`content/read`, `abstract`, `overview`) and
//! browsed (`fs/ls`, `fs/stat`), with the tenancy of `find` — the caller's
//! own user tree (`viking://~/…` names it), the shared roots, and never
//! another user's tree or, with an acting peer, another peer's.
//!
//! Everything here is bounded: a read is cut at [`MAX_READ_BYTES`] and says
//! so; a listing stops at its node limit, its depth and [`MAX_LIST_BYTES`],
//! and reports that it was cut. Abstracts come from the index records, so a
//! listing costs no read per entry.

use std::collections::HashMap;

use crate::identity::Identity;
use crate::index::extract;
use crate::index::record::{ContextType, LEVEL_ABSTRACT, LEVEL_FILE, Level, classify};
use crate::index::{AccountIndex, IndexError, Record};
use crate::store::{SharedStore, StoreError};
use crate::uri::{VikingUri, tree_key};

/// The most text one read returns, in bytes (256 KiB, about 64k tokens);
/// a longer read is cut at a line boundary and marked.
pub const MAX_READ_BYTES: usize = 256 * 1024;
/// The most a listing's entries may add up to, in bytes of URI, path and
/// abstract (4 MiB: Lambda answers at most 6 MB).
pub const MAX_LIST_BYTES: usize = 4 * 1024 * 1024;
/// The most entries one listing returns (`node_limit` above it is a 400).
pub const MAX_NODE_LIMIT: usize = 10_000;
/// How deep a recursive listing goes below the listed directory, as the
/// reference's fixed `level_limit`.
pub const RECURSIVE_DEPTH: usize = 3;
/// Directory listings a recursive listing runs at a time.
pub const LIST_CONCURRENCY: usize = 8;

/// What reading or listing failed to do. Messages name the URI.
#[derive(Debug, thiserror::Error)]
pub enum ContentError {
    /// Nothing at the URI (`kind` is `File` or `Directory`, as the
    /// reference words it).
    #[error("{kind} not found: {uri}")]
    NotFound {
        /// `File` or `Directory`.
        kind: &'static str,
        /// The URI asked for.
        uri: VikingUri,
    },
    /// A read of a directory.
    #[error("Directory URI is not readable as a file: {0}. List it first, then read a file URI.")]
    IsDirectory(VikingUri),
    /// A listing of a file.
    #[error("not a directory: {0}. Read it instead of listing it.")]
    NotDirectory(VikingUri),
    /// Outside what the caller may see.
    #[error("Access denied for {0}")]
    Forbidden(VikingUri),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The index (for abstracts) could not be loaded.
    #[error(transparent)]
    Index(#[from] IndexError),
}

/// Which lines of a file a read returns: Python slice semantics over the
/// file's lines, as the reference (`offset` 0-based, negative counts from
/// the end; `limit` `None` reads to the end).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lines {
    /// First line (0-based; negative: from the end). Default 0.
    pub offset: i64,
    /// How many lines; `None` (the reference's `-1`): to the end.
    pub limit: Option<u64>,
}

/// A read's text and whether it was cut.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadText {
    /// The text, with a closing `[truncated: …]` line when cut.
    pub text: String,
    /// When cut: the line a next read should start at.
    pub next_offset: Option<u64>,
}

/// One entry of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The entry's URI.
    pub uri: VikingUri,
    /// Its last segment.
    pub name: String,
    /// Its path relative to the listed directory.
    pub rel_path: String,
    /// Bytes (0 for directories).
    pub size: u64,
    /// Whether it is a directory.
    pub is_dir: bool,
    /// Its abstract: a file's own (from the index), a directory's
    /// `.abstract.md` (from the index, else a "not ready" placeholder).
    pub abstract_text: String,
    /// Last update (Unix seconds) when the index knows it.
    pub updated_at: Option<i64>,
}

/// How to list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListOptions {
    /// Descend [`RECURSIVE_DEPTH`] levels. Default false.
    pub recursive: bool,
    /// Also list names starting with `.` (sidecars). Default false.
    pub show_hidden: bool,
    /// The most entries (default 1000, at most [`MAX_NODE_LIMIT`]).
    pub node_limit: usize,
    /// Characters an abstract keeps (longer ones end in `...`). Default 256.
    pub abs_limit: usize,
    /// How many levels a recursive listing descends (at most
    /// [`MAX_TREE_DEPTH`]). Default [`RECURSIVE_DEPTH`].
    pub max_depth: usize,
}

/// The deepest a listing goes (`fs/tree`'s `level_limit`).
pub const MAX_TREE_DEPTH: usize = 20;

impl Default for ListOptions {
    fn default() -> Self {
        Self { recursive: false, show_hidden: false, node_limit: 1000, abs_limit: 256, max_depth: RECURSIVE_DEPTH }
    }
}

/// A listing and whether it was cut (by the node limit, the byte bound, or
/// the depth of a recursive listing).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    /// The entries: directories first, then files, each in name order; a
    /// recursive listing goes level by level.
    pub entries: Vec<Entry>,
    /// Whether entries were left out.
    pub truncated: bool,
}

/// What [`Content::stat`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    /// The URI.
    pub uri: VikingUri,
    /// Its last segment (`""` for the root).
    pub name: String,
    /// Bytes (0 for directories).
    pub size: u64,
    /// Whether it is a directory.
    pub is_dir: bool,
}

/// The content tree as one identity sees it.
#[derive(Debug, Clone)]
pub struct Content<'a> {
    store: &'a SharedStore,
    identity: &'a Identity,
}

impl<'a> Content<'a> {
    /// The tree of `identity`'s account in `store`.
    #[must_use]
    pub fn new(store: &'a SharedStore, identity: &'a Identity) -> Self {
        Self { store, identity }
    }

    /// `uri` with `viking://~` resolved, if the caller may see it.
    ///
    /// # Errors
    /// [`ContentError::Forbidden`] for another user's tree, another peer's
    /// (with an acting peer), or anything outside the visible roots.
    pub fn authorize(&self, uri: &VikingUri) -> Result<VikingUri, ContentError> {
        let uri = self.identity.resolve_home(uri);
        if self.visible(&uri) { Ok(uri) } else { Err(ContentError::Forbidden(uri)) }
    }

    fn visible(&self, uri: &VikingUri) -> bool {
        self.identity.may_read(uri) && !self.identity.is_other_peer(uri)
    }

    fn key(&self, uri: &VikingUri) -> String {
        tree_key(&self.identity.account, uri)
    }

    /// The files at and below `uri` (already authorised) that the caller
    /// may see, with their sizes, in key order: `uri` itself when it is a
    /// file, else every object below it; below an ancestor of the visible
    /// roots (`viking://`), only the visible roots. At most `max` (and
    /// whether more were there).
    ///
    /// Cost: one HEAD per root, and the listing of everything below it
    /// (one LIST per 1,000 names).
    ///
    /// # Errors
    /// [`ContentError::NotFound`] when nothing is at `uri`; store errors.
    pub async fn files_below(
        &self,
        uri: &VikingUri,
        max: usize,
    ) -> Result<(Vec<(VikingUri, u64)>, bool), ContentError> {
        let visible = self.identity.visible_roots();
        let roots: Vec<VikingUri> = if visible.iter().any(|root| uri.is_under(root)) {
            vec![uri.clone()]
        } else {
            visible.into_iter().filter(|root| root.is_under(uri)).collect()
        };
        let (mut out, mut truncated) = (Vec::new(), false);
        for root in &roots {
            match self.store.head(&self.key(root)).await {
                Ok(meta) if !root.path().is_empty() => {
                    out.push((root.clone(), meta.size));
                    continue;
                }
                Ok(_) | Err(StoreError::NotFound(_) | StoreError::InvalidKey(_)) => {}
                Err(e) => return Err(e.into()),
            }
            for meta in self.store.list(&format!("{}/", self.key(root))).await? {
                let Some(file) = crate::uri::uri_for_tree_key(&self.identity.account, &meta.key) else { continue };
                if self.identity.is_other_peer(&file) {
                    continue;
                }
                if out.len() >= max {
                    truncated = true;
                    break;
                }
                out.push((file, meta.size));
            }
        }
        if out.is_empty() && roots.len() == 1 && roots[0] == *uri && !uri.path().is_empty() && !self.is_dir(uri).await?
        {
            return Err(ContentError::NotFound { kind: "File", uri: uri.clone() });
        }
        Ok((out, truncated))
    }

    async fn is_dir(&self, uri: &VikingUri) -> Result<bool, ContentError> {
        let listing = self.store.list_dir(&self.key(uri), 1).await?;
        Ok(!listing.files.is_empty() || !listing.dirs.is_empty())
    }

    /// The text of the file at `uri` (authorised first), `lines` of it.
    /// Unless `raw`, a memory's trailing `<!-- MEMORY_FIELDS … -->` block is
    /// left out. Invalid UTF-8 is replaced. Over [`MAX_READ_BYTES`] the text
    /// is cut at the last whole line that fits and a last line says which
    /// lines were shown and where to read on.
    ///
    /// Cost: one GET (plus one LIST when nothing is there, to tell a
    /// directory from a missing file).
    ///
    /// # Errors
    /// Forbidden; [`ContentError::IsDirectory`] for a directory;
    /// [`ContentError::NotFound`] when nothing is there; store errors.
    pub async fn read(&self, uri: &VikingUri, lines: Lines, raw: bool) -> Result<ReadText, ContentError> {
        Ok(slice_lines(&self.read_text(uri, raw).await?, lines, MAX_READ_BYTES))
    }

    /// The whole text of the file at `uri` as [`Content::read`] sees it
    /// before slicing (authorised first; unless `raw`, a memory's trailer
    /// left out; invalid UTF-8 replaced), for a caller that slices it with
    /// its own bound ([`slice_lines`]).
    ///
    /// Cost and errors: as [`Content::read`].
    ///
    /// # Errors
    /// Forbidden; [`ContentError::IsDirectory`] for a directory;
    /// [`ContentError::NotFound`] when nothing is there; store errors.
    pub async fn read_text(&self, uri: &VikingUri, raw: bool) -> Result<String, ContentError> {
        let uri = self.authorize(uri)?;
        let body = match self.store.get(&self.key(&uri)).await {
            Ok(object) => object.body,
            Err(StoreError::NotFound(_)) | Err(StoreError::InvalidKey(_)) => {
                return Err(if self.is_dir(&uri).await? {
                    ContentError::IsDirectory(uri)
                } else {
                    ContentError::NotFound { kind: "File", uri }
                });
            }
            Err(e) => return Err(e.into()),
        };
        let text = String::from_utf8_lossy(&body);
        let is_memory = classify(&uri).is_some_and(|(t, _)| t == ContextType::Memory);
        Ok(if !raw && is_memory { visible_memory_text(&text).to_owned() } else { text.into_owned() })
    }

    /// The abstract of `uri`: a directory's `.abstract.md` cut to
    /// `max_bytes` (a placeholder when it has none), a file's own abstract (its summary section or
    /// first paragraph, cut to `max_bytes`; an episode's digest, cut to at
    /// least [`crate::memory::episodes::DIGEST_MAX_BYTES`]; as
    /// [`crate::ingest::abstract_for`] gives them).
    ///
    /// Cost: one or two GETs (and a LIST for a directory without sidecar).
    ///
    /// # Errors
    /// Forbidden; [`ContentError::NotFound`] when nothing is there.
    pub async fn abstract_of(&self, uri: &VikingUri, max_bytes: usize) -> Result<String, ContentError> {
        let home = self.identity.resolve_home(uri);
        self.summary(
            uri,
            ".abstract.md",
            |text| crate::ingest::abstract_for(&home, text, max_bytes),
            |text| extract::sidecar_text(text, max_bytes),
        )
        .await
    }

    /// The overview of `uri`: a directory's `.overview.md` (a placeholder
    /// when it has none), a file's own overview (a memory's summary
    /// section; another document's heading outline and first paragraph;
    /// else its abstract).
    ///
    /// Cost and errors: as [`Content::abstract_of`].
    ///
    /// # Errors
    /// Forbidden; [`ContentError::NotFound`] when nothing is there.
    pub async fn overview_of(&self, uri: &VikingUri) -> Result<String, ContentError> {
        let is_memory = |uri: &VikingUri| classify(uri).is_some_and(|(t, _)| t == ContextType::Memory);
        let memory = is_memory(&self.identity.resolve_home(uri));
        self.summary(
            uri,
            ".overview.md",
            |text| extract::file_overview(memory, text).unwrap_or_else(|| extract::file_abstract(text, usize::MAX)),
            |text| extract::directory_overview(text).to_owned(),
        )
        .await
    }

    async fn summary(
        &self,
        uri: &VikingUri,
        sidecar: &str,
        of_file: impl FnOnce(&str) -> String,
        of_sidecar: impl FnOnce(&str) -> String,
    ) -> Result<String, ContentError> {
        let uri = self.authorize(uri)?;
        match self.store.get(&self.key(&uri)).await {
            Ok(object) => return Ok(of_file(&String::from_utf8_lossy(&object.body))),
            Err(StoreError::NotFound(_) | StoreError::InvalidKey(_)) => {}
            Err(e) => return Err(e.into()),
        }
        let sidecar_key = format!("{}/{sidecar}", self.key(&uri));
        match self.store.get(&sidecar_key).await {
            Ok(object) => Ok(of_sidecar(&String::from_utf8_lossy(&object.body))),
            Err(StoreError::NotFound(_)) => {
                // A directory without its own: one made from its children.
                let children = self.children(&uri, SUMMARY_CHILDREN, false).await?;
                if children.empty {
                    return Err(ContentError::NotFound { kind: "Directory", uri });
                }
                Ok(if sidecar == ".abstract.md" {
                    derived_abstract(&children)
                } else {
                    derived_overview(&uri, &children)
                })
            }
            Err(e) => Err(e.into()),
        }
    }

    /// What is at `uri`: a file (its size) or a directory.
    ///
    /// Cost: one HEAD (plus one LIST when no file is there).
    ///
    /// # Errors
    /// Forbidden; [`ContentError::NotFound`] when nothing is there.
    pub async fn stat(&self, uri: &VikingUri) -> Result<Stat, ContentError> {
        let uri = self.authorize(uri)?;
        let name = uri.file_name().unwrap_or_default().to_owned();
        match self.store.head(&self.key(&uri)).await {
            Ok(meta) => return Ok(Stat { uri, name, size: meta.size, is_dir: false }),
            Err(StoreError::NotFound(_) | StoreError::InvalidKey(_)) => {}
            Err(e) => return Err(e.into()),
        }
        if uri.path().is_empty() || self.is_dir(&uri).await? {
            Ok(Stat { uri, name, size: 0, is_dir: true })
        } else {
            Err(ContentError::NotFound { kind: "File", uri })
        }
    }

    /// The entries below the directory `uri` that the caller may see
    /// (at the account root: `agent`, `resources`, `user`; in `viking://user`
    /// only the caller's own directory), with abstracts from `index`
    /// (`None`: no abstracts).
    ///
    /// Cost: one LIST (with a delimiter) per directory listed — one for a
    /// flat listing, at most one per directory entry up to
    /// [`RECURSIVE_DEPTH`] levels for a recursive one, [`LIST_CONCURRENCY`]
    /// at a time — and no read per entry; one index lookup per level (a
    /// scan of the loaded segments, or a `GetVectors` per 100 entries).
    ///
    /// # Errors
    /// Forbidden; [`ContentError::NotDirectory`] for a file;
    /// [`ContentError::NotFound`] when nothing is there.
    pub async fn list(
        &self,
        uri: &VikingUri,
        options: &ListOptions,
        index: Option<&AccountIndex>,
    ) -> Result<Listing, ContentError> {
        use futures_util::{StreamExt as _, stream};

        let uri = self.authorize(uri)?;
        let limit = options.node_limit.min(MAX_NODE_LIMIT);
        let mut listing = Listing::default();
        let mut bytes = 0usize;
        let mut level: Vec<(VikingUri, String)> = vec![(uri.clone(), String::new())];
        for depth in 0.. {
            let listed: Vec<_> = stream::iter(level.iter().cloned())
                .map(|(dir, rel)| async move {
                    let found = self.children(&dir, limit, options.show_hidden).await;
                    (dir, rel, found)
                })
                .buffered(LIST_CONCURRENCY)
                .collect()
                .await;
            let mut next = Vec::new();
            let listed: Vec<(VikingUri, String, Children)> =
                listed.into_iter().map(|(dir, rel, found)| found.map(|f| (dir, rel, f))).collect::<Result<_, _>>()?;
            let records: HashMap<(VikingUri, Level), Record> = match index {
                Some(index) => {
                    let nodes: Vec<(VikingUri, Level)> = listed
                        .iter()
                        .flat_map(|(_, _, found)| &found.children)
                        .map(|c| (c.uri.clone(), if c.is_dir { LEVEL_ABSTRACT } else { LEVEL_FILE }))
                        .collect();
                    index.lookup(&nodes).await?.into_iter().map(|r| ((r.uri.clone(), r.level), r)).collect()
                }
                None => HashMap::new(),
            };
            // Directories without a summary of their own get one made from
            // their children (bounded: past it, the placeholder).
            let bare: Vec<VikingUri> = listed
                .iter()
                .flat_map(|(_, _, found)| &found.children)
                .filter(|c| c.is_dir && !records.contains_key(&(c.uri.clone(), LEVEL_ABSTRACT)))
                .map(|c| c.uri.clone())
                .take(MAX_DERIVED_SUMMARIES)
                .collect();
            let derived: HashMap<VikingUri, String> = stream::iter(bare)
                .map(|dir| async move {
                    let found = self.children(&dir, SUMMARY_CHILDREN, false).await;
                    (dir, found)
                })
                .buffered(LIST_CONCURRENCY)
                .filter_map(|(dir, found)| async move { found.ok().map(|f| (dir, derived_abstract(&f))) })
                .collect()
                .await;
            for (dir, rel, found) in listed {
                listing.truncated |= found.truncated;
                if depth == 0 && found.empty && !dir.path().is_empty() {
                    return Err(match self.store.head(&self.key(&dir)).await {
                        Ok(_) => ContentError::NotDirectory(dir),
                        Err(StoreError::NotFound(_) | StoreError::InvalidKey(_)) => {
                            ContentError::NotFound { kind: "Directory", uri: dir }
                        }
                        Err(e) => e.into(),
                    });
                }
                for Child { uri: child, name, size, is_dir } in found.children {
                    if listing.entries.len() >= limit {
                        listing.truncated = true;
                        break;
                    }
                    let rel_path = if rel.is_empty() { name.clone() } else { format!("{rel}/{name}") };
                    let (abstract_text, updated_at) =
                        entry_abstract(&records, &derived, &child, is_dir, options.abs_limit);
                    bytes += child.as_str().len() + rel_path.len() + abstract_text.len() + 64;
                    if bytes > MAX_LIST_BYTES {
                        listing.truncated = true;
                        break;
                    }
                    if is_dir && options.recursive {
                        next.push((child.clone(), rel_path.clone()));
                    }
                    listing.entries.push(Entry { uri: child, name, rel_path, size, is_dir, abstract_text, updated_at });
                }
            }
            if !options.recursive || next.is_empty() || listing.entries.len() >= limit || bytes > MAX_LIST_BYTES {
                break;
            }
            if depth + 1 >= options.max_depth.clamp(1, MAX_TREE_DEPTH) {
                listing.truncated = true;
                break;
            }
            level = next;
        }
        Ok(listing)
    }
}

/// One entry below a listed directory, before it is shaped.
struct Child {
    uri: VikingUri,
    name: String,
    size: u64,
    is_dir: bool,
}

/// The entries below one directory that the caller may see.
struct Children {
    /// Directories first, then files, each in name order; at most the
    /// number asked for.
    children: Vec<Child>,
    /// Whether more visible entries exist (or the scan stopped at
    /// [`MAX_SCAN`]).
    truncated: bool,
    /// Whether the store holds nothing at all below the directory.
    empty: bool,
}

/// The children a summary made for a directory names.
const SUMMARY_CHILDREN: usize = 12;
/// The most directories of one listing level that get a summary made from
/// their children (a LIST each, [`LIST_CONCURRENCY`] at once); past it,
/// the placeholder.
const MAX_DERIVED_SUMMARIES: usize = 32;

/// A directory's abstract made from its children, when it has no
/// `.abstract.md`: what it holds, by name (deterministic; no model).
fn derived_abstract(found: &Children) -> String {
    let names = |dirs: bool| -> Vec<&str> {
        found.children.iter().filter(|c| c.is_dir == dirs).map(|c| c.name.as_str()).collect()
    };
    let (dirs, files) = (names(true), names(false));
    let part = |list: &[&str], one: &str, many: &str| match list.len() {
        0 => None,
        1 => Some(format!("{one} {}", list[0])),
        _ => Some(format!("{many} {}", list.join(", "))),
    };
    let parts: Vec<String> = [part(&dirs, "the directory", "the directories"), part(&files, "the file", "the files")]
        .into_iter()
        .flatten()
        .collect();
    if parts.is_empty() {
        return "An empty directory.".to_owned();
    }
    let more = if found.truncated { ", and more" } else { "" };
    format!("Holds {}{more}.", parts.join(" and "))
}

/// A directory's overview made from its children, when it has no
/// `.overview.md`: its name and one line per child.
fn derived_overview(uri: &VikingUri, found: &Children) -> String {
    let mut text = format!("# {}\n\n{}\n", uri.file_name().unwrap_or("viking://"), derived_abstract(found));
    for child in &found.children {
        let kind = if child.is_dir { "dir" } else { "file" };
        text.push_str(&format!("\n- [{kind}] {}", child.uri));
    }
    if found.truncated {
        text.push_str("\n- …");
    }
    text.push('\n');
    text
}

/// The most entries one directory's listing scans for visible ones
/// (hidden files and other peers' trees are scanned past).
pub const MAX_SCAN: usize = 100_000;

impl Content<'_> {
    /// At most `want` entries below `dir` that the caller may see. Above
    /// the visible roots (`viking://`, `viking://user`, `viking://agent`)
    /// they are the next segments of those roots that exist — another
    /// user's directory is never even listed; elsewhere the store's listing
    /// without hidden names (unless `show_hidden`) and without other peers'
    /// trees, fetched again four times larger while what was filtered out
    /// left fewer than `want` (up to [`MAX_SCAN`]).
    async fn children(&self, dir: &VikingUri, want: usize, show_hidden: bool) -> Result<Children, ContentError> {
        let roots = self.identity.visible_roots();
        if !roots.iter().any(|r| dir.is_under(r)) {
            let mut names: Vec<&str> = roots
                .iter()
                .filter(|r| r.is_under(dir))
                .filter_map(|r| r.segments().nth(dir.segments().count()))
                .collect();
            names.sort_unstable();
            names.dedup();
            let mut children = Vec::new();
            for name in names {
                let Ok(child) = dir.join(name) else { continue };
                let found = self.store.list_dir(&self.key(&child), 1).await?;
                if !found.files.is_empty() || !found.dirs.is_empty() {
                    children.push(Child { uri: child, name: name.to_owned(), size: 0, is_dir: true });
                }
            }
            let truncated = children.len() > want;
            children.truncate(want);
            return Ok(Children { empty: children.is_empty(), children, truncated });
        }
        let mut ask = want.saturating_add(1);
        loop {
            let found = self.store.list_dir(&self.key(dir), ask).await?;
            let empty = found.files.is_empty() && found.dirs.is_empty();
            let scanned_all = !found.truncated || ask >= MAX_SCAN;
            let dirs = found.dirs.into_iter().map(|name| (name, 0, true));
            let files = found.files.into_iter().filter_map(|meta| {
                let name = meta.key.rsplit('/').next()?.to_owned();
                Some((name, meta.size, false))
            });
            let mut children: Vec<Child> = dirs
                .chain(files)
                .filter(|(name, _, _)| show_hidden || !name.starts_with('.'))
                .filter_map(|(name, size, is_dir)| {
                    let uri = dir.join(&name).ok().filter(|u| self.visible(u))?;
                    Some(Child { uri, name, size, is_dir })
                })
                .collect();
            if children.len() > want || scanned_all {
                let truncated = children.len() > want || (found.truncated && ask >= MAX_SCAN);
                children.truncate(want);
                return Ok(Children { children, truncated, empty });
            }
            ask = ask.saturating_mul(4).min(MAX_SCAN);
        }
    }
}

/// An entry's abstract and update time from the index: a file's own
/// record, a directory's level-0 record, else its summary made from its
/// children (`derived`), else the reference's placeholder. Cut to
/// `abs_limit` characters as the reference (`…[:abs_limit-3]+"..."`).
fn entry_abstract(
    records: &HashMap<(VikingUri, Level), Record>,
    derived: &HashMap<VikingUri, String>,
    uri: &VikingUri,
    is_dir: bool,
    abs_limit: usize,
) -> (String, Option<i64>) {
    let record = records.get(&(uri.clone(), if is_dir { LEVEL_ABSTRACT } else { LEVEL_FILE }));
    let text = match (record, derived.get(uri)) {
        (Some(r), _) => r.abstract_text.clone(),
        (None, Some(summary)) if is_dir => summary.clone(),
        (None, _) if is_dir => format!("# {uri} [Directory abstract is not ready]"),
        (None, _) => String::new(),
    };
    (cut_chars(&text, abs_limit), record.map(|r| r.updated_at))
}

fn cut_chars(text: &str, limit: usize) -> String {
    if text.chars().count() <= limit {
        return text.to_owned();
    }
    let keep: String = text.chars().take(limit.saturating_sub(3)).collect();
    format!("{keep}...")
}

/// A memory's text without its machine-written trailer.
fn visible_memory_text(text: &str) -> &str {
    text.find(extract::MEMORY_FIELDS_MARKER).map_or(text, |at| text[..at].trim_end_matches([' ', '\t', '\r', '\n']))
}

/// `lines` of `text` (line endings kept), cut at `max_bytes` on a line
/// boundary (a single over-long line at a character boundary) with a
/// closing marker that names the lines shown and the next offset.
#[must_use]
pub fn slice_lines(text: &str, lines: Lines, max_bytes: usize) -> ReadText {
    let all: Vec<&str> = text.split_inclusive('\n').collect();
    let total = all.len() as i64;
    let start = if lines.offset < 0 { (total + lines.offset).max(0) } else { lines.offset.min(total) };
    let end = lines.limit.map_or(total, |n| start.saturating_add(i64::try_from(n).unwrap_or(i64::MAX)).min(total));
    let picked = &all[start as usize..end.max(start) as usize];
    let mut out = String::new();
    let mut shown = 0u64;
    for line in picked {
        if out.len() + line.len() > max_bytes {
            if shown == 0 {
                out.push_str(extract::cut_to_bytes(line, max_bytes));
                out.push('\n');
            }
            break;
        }
        out.push_str(line);
        shown += 1;
    }
    if (shown as usize) < picked.len() {
        let first = start as u64;
        let next = first + shown.max(1);
        if !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&format!(
            "[truncated: lines {}-{} of {total} shown, at most {max_bytes} bytes per read; read on with offset={next}]",
            first + 1,
            first + shown.max(1),
        ));
        return ReadText { text: out, next_offset: Some(next) };
    }
    ReadText { text: out, next_offset: None }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_slice_as_python_and_cut_with_a_marker() {
        let text = "a\nb\nc\nd\n";
        let read = |offset, limit| slice_lines(text, Lines { offset, limit }, 1000).text;
        assert_eq!(read(0, None), text);
        assert_eq!(read(1, Some(2)), "b\nc\n");
        assert_eq!(read(-1, None), "d\n");
        assert_eq!(read(-10, Some(1)), "a\n");
        assert_eq!(read(10, None), "");
        let cut = slice_lines(text, Lines::default(), 5);
        assert_eq!(cut.next_offset, Some(2));
        assert!(cut.text.starts_with("a\nb\n[truncated: lines 1-2 of 4 shown"), "{}", cut.text);
        assert!(cut.text.ends_with("offset=2]"), "{}", cut.text);
        // One line over the cap is cut at a character boundary and still marked.
        let long = slice_lines("年糕年糕年糕\n", Lines::default(), 7);
        assert!(long.text.starts_with("年糕\n[truncated: lines 1-1 of 1"), "{}", long.text);
        assert_eq!(long.next_offset, Some(1));
    }

    #[test]
    fn memory_trailers_are_hidden_and_abstracts_cut_as_the_reference() {
        assert_eq!(visible_memory_text("# Summary\nx\n\n<!-- MEMORY_FIELDS {\"a\":1} -->\n"), "# Summary\nx");
        assert_eq!(visible_memory_text("plain\n"), "plain\n");
        assert_eq!(cut_chars("abcdef", 5), "ab...");
        assert_eq!(cut_chars("abcde", 5), "abcde");
        assert_eq!(cut_chars("年糕年糕年糕", 4), "年...");
    }
}
