//! The candidate: what every provider (search hits, quota buckets, the
//! bootstrap manifest) hands the planner, with everything the plan needs
//! known before any read.

use crate::index::record::{LEVEL_FILE, Level, Span};
use crate::index::{Category, Record};
use crate::uri::VikingUri;

/// Where a memory came from, relative to the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Origin {
    /// The acting peer's own tree.
    ActorPeer,
    /// The user's shared tree (or a shared root).
    Own,
    /// Another peer of the user.
    OtherPeer,
}

impl Origin {
    /// The wire name (`actor_peer`, `self`, `other_peer`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ActorPeer => "actor_peer",
            Self::Own => "self",
            Self::OtherPeer => "other_peer",
        }
    }
}

/// One entry the planner may place.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// The node: a file, or a directory (without a sidecar suffix).
    pub uri: VikingUri,
    /// Its category (the bucket that found it, or its own).
    pub category: Category,
    /// Whether the node is a directory (tiers stop at overview).
    pub is_directory: bool,
    /// Whether it is a memory (memories may reach `full`).
    pub is_memory: bool,
    /// The score shown (`(1 + cos) / 2`).
    pub score: f64,
    /// The score it is ranked by (other peers' hits are penalised).
    pub rank_score: f64,
    /// Whose it is.
    pub origin: Origin,
    /// The abstract tier's text.
    pub abstract_text: String,
    /// Rendered tokens of the abstract.
    pub abstract_tokens: u32,
    /// Rendered tokens of the overview tier, if the node has one.
    pub overview_tokens: Option<u32>,
    /// Rendered tokens of the full tier, if the node has one.
    pub full_tokens: Option<u32>,
    /// Equal keys mean equal content (counted as `deduped`).
    pub dedup_key: String,
    /// For a passage of a long file: where it sits in the file (its text
    /// is the `full` tier, read from the file).
    pub span: Option<Span>,
    /// The record's level: [`LEVEL_FILE`] for a file, `LEVEL_PASSAGE + n`
    /// for passage `n`, lower for a directory.
    pub level: Level,
}

impl Candidate {
    /// A candidate from an index record.
    #[must_use]
    pub fn from_record(record: &Record, score: f64, rank_score: f64, origin: Origin, category: Category) -> Self {
        Self {
            uri: record.uri.clone(),
            category,
            is_directory: record.level < LEVEL_FILE,
            is_memory: record.context_type == crate::index::ContextType::Memory,
            score,
            rank_score,
            origin,
            abstract_text: record.abstract_text.trim().to_owned(),
            abstract_tokens: record.abstract_tokens,
            overview_tokens: record.overview_tokens,
            full_tokens: record.full_tokens,
            dedup_key: match record.span {
                Some(span) => format!("{}@{}", record.source_hash, span.start),
                None => record.source_hash.clone(),
            },
            span: record.span,
            level: record.level,
        }
    }

    /// What tells candidates apart: the node, and the passage's first
    /// byte for a passage.
    #[must_use]
    pub fn key(&self) -> (VikingUri, Option<u32>) {
        (self.uri.clone(), self.span.map(|s| s.start))
    }

    /// A passage's lines, 1-based and inclusive (`None` for anything else).
    #[must_use]
    pub fn lines(&self) -> Option<(u32, u32)> {
        self.span.map(|s| (s.first_line, s.last_line))
    }
}

/// An event memory named `name` (its abstract too) with these scores, for
/// the pure stages' tests.
#[cfg(test)]
pub(crate) fn event(name: &str, score: f64, rank_score: f64) -> Candidate {
    Candidate {
        uri: VikingUri::from_path(&format!("user/u/memories/events/{name}.md")).expect("valid"),
        category: Category::Events,
        is_directory: false,
        is_memory: true,
        score,
        rank_score,
        origin: Origin::Own,
        abstract_text: name.to_owned(),
        abstract_tokens: 2,
        overview_tokens: None,
        full_tokens: Some(2),
        dedup_key: name.to_owned(),
        span: None,
        level: LEVEL_FILE,
    }
}
