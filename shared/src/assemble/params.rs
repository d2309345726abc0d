//! Context-mode parameters as domain types, with their defaults and the
//! built-in purpose presets. The request parser fills these; everything
//! downstream takes them as given.

use std::collections::BTreeMap;

use serde::{Serialize, Serializer};

use crate::config::PurposeProfileConfig;
use crate::index::Category;
use crate::index::filter::{FilterExpr, TimeRange};

/// Default `max_tokens`.
pub const DEFAULT_MAX_TOKENS: usize = 1600;
/// Smallest `max_tokens`.
pub const MIN_MAX_TOKENS: usize = 64;
/// Largest `max_tokens`.
pub const MAX_MAX_TOKENS: usize = 32_000;
/// Default `score_threshold` in context mode.
pub const DEFAULT_SCORE_THRESHOLD: f64 = 0.1;
/// Most `exclude_uris` a request may send.
pub const MAX_EXCLUDE_URIS: usize = 200;
/// Default `rewrite_max_bullets`.
pub const DEFAULT_REWRITE_MAX_BULLETS: usize = 6;
/// Other peers' hits fetched per wanted entry (they are penalised after).
pub const OTHER_PEER_OVERFETCH: usize = 4;

/// How much of an entry is shown. `Uri` is not requestable: it is the
/// state of an entry that fits at no other tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tier {
    /// The URI alone (a self-closing element).
    Uri,
    /// The index record's abstract (no read).
    Abstract,
    /// A directory's `.overview.md`; a file's summary or outline (one read).
    Overview,
    /// A file's body (one read).
    Full,
}

impl Tier {
    /// The wire name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Uri => "uri",
            Self::Abstract => "abstract",
            Self::Overview => "overview",
            Self::Full => "full",
        }
    }

    /// Parses a requestable tier (`abstract`, `overview`, `full`).
    #[must_use]
    pub fn parse_pinnable(text: &str) -> Option<Self> {
        match text {
            "abstract" => Some(Self::Abstract),
            "overview" => Some(Self::Overview),
            "full" => Some(Self::Full),
            _ => None,
        }
    }
}

/// The `detail` request: breadth-first auto fill, one pin for every entry,
/// or pins per category (unnamed categories fill automatically).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Detail {
    /// Breadth first: all at abstract, then directories to overview, then
    /// files to full (the default; `"auto"`).
    #[default]
    Auto,
    /// Every entry at this tier (within its ceiling), or dropped.
    Pin(Tier),
    /// A pin per named category.
    PerCategory(BTreeMap<Category, Tier>),
}

impl Detail {
    /// The pin for `category`, if any.
    #[must_use]
    pub fn pin(&self, category: Category) -> Option<Tier> {
        match self {
            Self::Auto => None,
            Self::Pin(t) => Some(*t),
            Self::PerCategory(map) => map.get(&category).copied(),
        }
    }
}

/// As `stats.detail`: `null` for `auto`, a tier name, or an object of tier
/// names by category.
impl Serialize for Detail {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Auto => serializer.serialize_none(),
            Self::Pin(t) => serializer.serialize_str(t.as_str()),
            Self::PerCategory(map) => serializer.collect_map(map.iter().map(|(c, t)| (c.as_str(), t.as_str()))),
        }
    }
}

/// Whose memories take part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PeerScope {
    /// The user's own and every peer's (other peers penalised). Default.
    #[default]
    All,
    /// The user's own and the acting peer's only.
    Actor,
}

impl PeerScope {
    /// The wire name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::All => "all",
            Self::Actor => "actor",
        }
    }
}

/// As its wire name.
impl Serialize for PeerScope {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// The bucket keys of `quotas` (memory categories, resources, skills).
pub const QUOTA_KEYS: [Category; 6] = [
    Category::Events,
    Category::Entities,
    Category::Preferences,
    Category::Experiences,
    Category::Resources,
    Category::Skills,
];

/// The keys `detail` and `other_peer_penalty` objects accept.
pub const DETAIL_KEYS: [Category; 7] = [
    Category::Events,
    Category::Entities,
    Category::Preferences,
    Category::Experiences,
    Category::Resources,
    Category::Skills,
    Category::Memories,
];

/// Quotas per bucket.
pub type Quotas = BTreeMap<Category, usize>;

/// A purpose preset: quotas and the share of the budget events may use.
#[derive(Debug, Clone, PartialEq)]
pub struct PurposeProfile {
    /// Quotas per bucket (each at least 1).
    pub quotas: Quotas,
    /// The share of `max_tokens` event entries may take (`None`: no cap).
    pub events_budget_share: Option<f64>,
}

/// The built-in presets: `chat` and `coding`.
#[must_use]
pub fn builtin_purpose(name: &str) -> Option<PurposeProfile> {
    let (numbers, share): ([usize; 6], f64) = match name {
        "chat" => ([10, 8, 4, 1, 1, 2], 0.75),
        "coding" => ([4, 6, 2, 4, 8, 6], 0.40),
        _ => return None,
    };
    Some(PurposeProfile { quotas: QUOTA_KEYS.iter().copied().zip(numbers).collect(), events_budget_share: Some(share) })
}

/// The preset a request's `purpose` names: the configured one
/// (`retrieval.purpose_profiles`) when there is one, else the built-in one.
/// A configured preset without `events_budget_share` takes the built-in
/// preset's of the same name, or none.
#[must_use]
pub fn purpose_profile(name: &str, configured: &BTreeMap<String, PurposeProfileConfig>) -> Option<PurposeProfile> {
    let Some(profile) = configured.get(name) else { return builtin_purpose(name) };
    Some(PurposeProfile {
        // Bucket names were checked when the configuration was read.
        quotas: profile.quotas.iter().filter_map(|(bucket, &n)| Some((Category::parse(bucket)?, n))).collect(),
        events_budget_share: profile
            .events_budget_share
            .or_else(|| builtin_purpose(name).and_then(|b| b.events_budget_share)),
    })
}

/// Every purpose name a request may send, sorted: `chat`, `coding` and the
/// configured ones.
#[must_use]
pub fn purpose_names(configured: &BTreeMap<String, PurposeProfileConfig>) -> Vec<&str> {
    let mut names: Vec<&str> = ["chat", "coding"].into_iter().chain(configured.keys().map(String::as_str)).collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// Default penalties subtracted from other peers' scores, per category.
#[must_use]
pub fn default_penalties() -> BTreeMap<Category, f64> {
    use Category as C;
    [
        (C::Events, 0.1),
        (C::Entities, 0.1),
        (C::Preferences, 0.02),
        (C::Experiences, 0.02),
        (C::Resources, 0.02),
        (C::Skills, 0.02),
        (C::Memories, 0.1),
    ]
    .into_iter()
    .collect()
}

/// The candidates context mode plans from when a request names no
/// `limit`: enough to fill `max_tokens` with short entries (one per 40
/// tokens), at least 10, at most 100 — 40 at the default 1600 tokens. The
/// relevance cut and the budget, not a count, then end the block.
#[must_use]
pub fn context_depth(max_tokens: usize) -> usize {
    (max_tokens / 40).clamp(10, 100)
}

/// Everything context mode needs, validated, with defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct AssembleParams {
    /// The query (and, once expanded, the planned queries after it).
    pub queries: Vec<String>,
    /// Flat mode: the most candidates (default 10; context mode without a
    /// `limit` in the request: [`context_depth`]).
    pub limit: usize,
    /// Hits must score strictly above this (default 0.1).
    pub score_threshold: f64,
    /// The request's filter expression (passed to every bucket).
    pub expr: Option<FilterExpr>,
    /// Tags that must all be present (every bucket).
    pub tags: Vec<String>,
    /// A time window (every bucket).
    pub time: Option<TimeRange>,
    /// The budget of the rendered block (default 1600).
    pub max_tokens: usize,
    /// Bucketed mode: quotas per bucket (`None`: flat).
    pub quotas: Option<Quotas>,
    /// The purpose preset name, when one was used.
    pub purpose: Option<String>,
    /// The share of the budget events may take (purpose presets), if any.
    pub events_budget_share: Option<f64>,
    /// Tier selection.
    pub detail: Detail,
    /// URIs (and their subtrees) to leave out.
    pub exclude: Vec<crate::uri::VikingUri>,
    /// Whose memories take part.
    pub peer_scope: PeerScope,
    /// Penalties for other peers' hits, per category.
    pub penalties: BTreeMap<Category, f64>,
    /// Render the block (false: entries only, `rendered` empty).
    pub render: bool,
    /// How records are matched (`search_type`). Default: hybrid — on the
    /// committed query set it serves more relevant memories with text than
    /// semantic search at every budget, across languages too.
    pub search_kind: crate::index::SearchKind,
    /// The time the reranker may take, when one is configured (`rerank`):
    /// context mode sets it from the request's deadline. `None` skips the
    /// stage (`stats.rerank.status` `skipped` when a reranker is
    /// configured). Default `None`.
    pub rerank_within: Option<std::time::Duration>,
}

impl Default for AssembleParams {
    fn default() -> Self {
        Self {
            queries: Vec::new(),
            limit: 10,
            score_threshold: DEFAULT_SCORE_THRESHOLD,
            expr: None,
            tags: Vec::new(),
            time: None,
            max_tokens: DEFAULT_MAX_TOKENS,
            quotas: None,
            purpose: None,
            events_budget_share: None,
            detail: Detail::Auto,
            exclude: Vec::new(),
            peer_scope: PeerScope::All,
            penalties: default_penalties(),
            render: true,
            search_kind: crate::index::SearchKind::Hybrid,
            rerank_within: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_the_documented_table_with_every_bucket_at_least_one() {
        let coding = builtin_purpose("coding").expect("coding");
        assert_eq!(coding.quotas.get(&Category::Resources), Some(&8));
        assert_eq!(coding.events_budget_share, Some(0.40));
        let chat = builtin_purpose("chat").expect("chat");
        assert_eq!(chat.quotas.get(&Category::Events), Some(&10));
        for preset in [coding, chat] {
            assert_eq!(preset.quotas.len(), 6);
            assert!(preset.quotas.values().all(|q| *q >= 1));
        }
        assert!(builtin_purpose("other").is_none());
    }

    #[test]
    fn configured_presets_replace_or_extend_the_built_in_ones() {
        let config = |quotas: &[(&str, usize)], share: Option<f64>| PurposeProfileConfig {
            quotas: quotas.iter().map(|(k, n)| ((*k).to_owned(), *n)).collect(),
            events_budget_share: share,
        };
        let configured: BTreeMap<String, PurposeProfileConfig> = [
            ("chat".to_owned(), config(&[("events", 3)], None)),
            ("support".to_owned(), config(&[("entities", 5), ("skills", 1)], Some(0.5))),
        ]
        .into();
        let chat = purpose_profile("chat", &configured).expect("chat");
        assert_eq!(chat.quotas, [(Category::Events, 3)].into(), "replaced, not merged");
        assert_eq!(chat.events_budget_share, Some(0.75), "the built-in share when none is configured");
        let support = purpose_profile("support", &configured).expect("support");
        assert_eq!(support.quotas, [(Category::Entities, 5), (Category::Skills, 1)].into());
        assert_eq!(support.events_budget_share, Some(0.5));
        assert_eq!(purpose_profile("coding", &configured), builtin_purpose("coding"));
        assert!(purpose_profile("other", &configured).is_none());
        assert_eq!(purpose_names(&configured), ["chat", "coding", "support"]);
        assert_eq!(purpose_names(&BTreeMap::new()), ["chat", "coding"]);
    }

    #[test]
    fn tiers_order_by_cost() {
        assert!(Tier::Uri < Tier::Abstract && Tier::Abstract < Tier::Overview && Tier::Overview < Tier::Full);
        assert_eq!(Tier::parse_pinnable("uri"), None);
        let json = |d: &Detail| serde_json::to_value(d).expect("serialisable");
        assert_eq!(json(&Detail::Pin(Tier::Full)), serde_json::json!("full"));
        assert_eq!(json(&Detail::Auto), serde_json::Value::Null);
    }
}
