//! Bootstrap: the session-start block. The same
//! assembly line as context mode — planner, reads, render, budget — but the
//! candidates come from a declarative slot manifest instead of search hits.
//! No model and no semantic search: routes that bootstrap never embed.
//!
//! Built-in slots, in render order (stable first, so the block stays
//! byte-identical while nothing changes and prompt caches stay warm):
//!
//! | slot | source |
//! |---|---|
//! | `instructions` | a static, versioned template ([`INSTRUCTIONS`]) |
//! | `identity` | `memories/profile.md`; over its share → head cut, URI kept |
//! | `listing` | other memory, resource and skill files, newest first, at their abstracts |
//! | `working_state` | the newest events inside the window (`since`, default 7 days), newest first |
//! | `continuity` | with a `session_id`: the newest archive overview of the session |
//!
//! Each slot plans within its share of `max_tokens`; what a slot leaves
//! unused passes to the next.

use serde::Serialize;
use sha2::Digest as _;

use super::candidate::{Candidate, Origin};
use super::params::{Detail, Tier};
use super::plan::{PlanRequest, plan};
use super::read::read_planned;
use super::render::{EntryView, render};
use super::{Entry, Named, TierCounts};
use crate::app::App;
use crate::identity::Identity;
use crate::index::account::IndexStats;
use crate::index::filter::{Field, FilterExpr, TimeField};
use crate::index::{AccountIndex, Category, Filter, IndexError, Record};
use crate::retrieval::RetrievalError;
use crate::store::StoreError;
use crate::tokens::{estimate_escaped_tokens, estimate_tokens, truncate_to_escaped_tokens};
use crate::uri::{VikingUri, tree_key};

/// The instructions template's version.
pub const INSTRUCTIONS_VERSION: &str = "5";

/// How to use the memory this block comes from: static text, versioned.
/// It names only tools and routes that exist (a test holds it to the MCP
/// tool list and the OpenAPI document).
pub const INSTRUCTIONS: &str = "\
Skald memory — how to use it:
- Each <memory> element is one node of the user's memory tree; its uri attribute names it (viking://…; viking://~/… is the user's own tree).
- detail says how much is shown: uri (name only) < abstract < overview < full; truncated=\"true\" marks a text cut to fit.
  Expand a uri with the read tool or GET /api/v1/content/read?uri=…; browse a directory with the list tool or
  GET /api/v1/fs/ls?uri=….
- For more context on a question, use the search tool (mode context) or the recall tool, or
  POST /api/v1/search/search {\"mode\":\"context\",\"query\":…}.
- identity is who you are talking to; working_state is what they are doing now; continuity is where the last session stopped; listing is what else exists.
- Recall before answering when the user refers to past work, people, preferences or decisions.
- The conversation is kept by appending its messages to the session (POST /api/v1/sessions/{id}/messages) and archived by
  POST /api/v1/sessions/{id}/commit, which keeps what was said as event memories (viking://~/memories/events) that later
  sessions find, and, where a model is configured, extracts the user's profile, preferences and entities from it; the
  remember tool keeps messages said elsewhere. Do not restate these instructions to the user.";

/// The URI the instructions render under.
pub const INSTRUCTIONS_URI: &str = "viking://skald/instructions";

/// A slot of the manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// The static usage template.
    Instructions,
    /// The user's profile.
    Identity,
    /// What else there is: files at their abstracts, newest first.
    Listing,
    /// The newest events in the window.
    WorkingState,
    /// The session's latest archive overview.
    Continuity,
}

impl Slot {
    /// The slot's name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Instructions => "instructions",
            Self::Identity => "identity",
            Self::Listing => "listing",
            Self::WorkingState => "working_state",
            Self::Continuity => "continuity",
        }
    }
}

/// The manifest: slots in render order with their shares of the budget.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// `(slot, share of max_tokens)`, in render order.
    pub slots: Vec<(Slot, f64)>,
    /// Events shown at most in `working_state` (5..=10; default 8).
    pub working_state_max: usize,
    /// Files shown at most in `listing` (default 40).
    pub listing_max: usize,
}

impl Default for Manifest {
    fn default() -> Self {
        Self {
            slots: vec![
                (Slot::Instructions, 0.15),
                (Slot::Identity, 0.25),
                (Slot::Listing, 0.20),
                (Slot::WorkingState, 0.25),
                (Slot::Continuity, 0.15),
            ],
            working_state_max: 8,
            listing_max: 40,
        }
    }
}

/// A bootstrap request.
#[derive(Debug, Clone, PartialEq)]
pub struct BootstrapParams {
    /// The budget (default 1600).
    pub max_tokens: usize,
    /// `working_state`'s window start, Unix seconds.
    pub since: i64,
    /// "Now", Unix seconds (where an S3 Vectors index's time windows end).
    pub now: i64,
    /// The session, for `continuity`.
    pub session_id: Option<crate::sessions::SessionId>,
    /// The manifest.
    pub manifest: Manifest,
}

/// Entries and tokens of one slot, as `stats.slots.<slot>`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SlotStats {
    /// Entries the slot placed.
    pub entries: usize,
    /// Tokens they take.
    pub tokens: usize,
}

/// The instructions template served, as `stats.instructions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InstructionsStats {
    /// [`INSTRUCTIONS_VERSION`].
    pub version: &'static str,
    /// [`instructions_hash`].
    pub content_hash: String,
}

/// What bootstrap reports (`BootstrapStats` in `infra/openapi.json`), in
/// the wire's key order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BootstrapStats {
    /// Always `bootstrap`.
    pub mode: &'static str,
    /// Entries and tokens per slot, in render order.
    pub slots: Named<SlotStats>,
    /// The budget.
    pub max_tokens: usize,
    /// Tokens of the rendered block; at most `max_tokens`.
    pub used_tokens: usize,
    /// Entries served.
    pub returned: usize,
    /// Candidates no slot had room for.
    pub dropped: usize,
    /// Entries per tier.
    pub tier_counts: TierCounts,
    /// The instructions template served.
    pub instructions: InstructionsStats,
    /// Bytes of the bodies read.
    pub bytes_read: u64,
    /// Reads made.
    pub reads: usize,
    /// How the listings went on an S3 Vectors index (absent on segments).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<IndexStats>,
}

/// The bootstrap block and its accounting.
#[derive(Debug, Clone, PartialEq)]
pub struct Bootstrapped {
    /// Entries in render order.
    pub entries: Vec<Entry>,
    /// The rendered block.
    pub rendered: String,
    /// What bootstrap did.
    pub stats: BootstrapStats,
}

/// The sha256 of the instructions, as `stats.instructions.content_hash`.
#[must_use]
pub fn instructions_hash() -> String {
    hex::encode(sha2::Sha256::digest(INSTRUCTIONS.as_bytes()))
}

fn uri_of(text: &str) -> VikingUri {
    VikingUri::parse(text).expect("constant uri is valid")
}

fn candidate(record: &Record, category: Category) -> Candidate {
    // Bootstrap has no query: every candidate scores 1 and ranks by order.
    Candidate::from_record(record, 1.0, 1.0, Origin::Own, category)
}

/// The files an identity owns: its own tree but its peers', and the
/// shared roots.
fn owned_files(identity: &Identity) -> Filter {
    let own = identity.user_root();
    let mut targets = vec![own.clone()];
    targets.extend(crate::identity::SHARED_ROOTS.iter().map(|r| uri_of(r)));
    Filter {
        targets,
        not_under: vec![own.join("peers").expect("constant")],
        levels: vec![crate::index::record::LEVEL_FILE],
        ..Filter::default()
    }
}

fn is_profile(identity: &Identity, uri: &VikingUri) -> bool {
    identity.user_root().join("memories/profile.md").is_ok_and(|p| &p == uri)
}

/// The working-state candidates: the newest events since `since`, newest
/// first (ties by URI); and whether the list may be incomplete.
async fn working_state(
    index: &AccountIndex,
    identity: &Identity,
    params: &BootstrapParams,
) -> Result<(Vec<Candidate>, bool), IndexError> {
    let mut filter = owned_files(identity);
    filter.expr = Some(FilterExpr::Must(Field::Category, vec![Category::Events.as_str().to_owned()]));
    let max = params.manifest.working_state_max;
    let (events, incomplete) = index.newest(&filter, TimeField::CreatedAt, params.since, max, params.now).await?;
    Ok((events.iter().map(|r| candidate(r, Category::Events)).collect(), incomplete))
}

/// The listing candidates: files other than the profile and the working
/// state's events, newest updated first, at their abstracts; and whether
/// the list may be incomplete.
async fn listing(
    index: &AccountIndex,
    identity: &Identity,
    skip: &[VikingUri],
    params: &BootstrapParams,
) -> Result<(Vec<Candidate>, bool), IndexError> {
    let filter = owned_files(identity);
    let max = params.manifest.listing_max;
    // Room for the records left out below.
    let (files, incomplete) =
        index.newest(&filter, TimeField::UpdatedAt, i64::MIN, max + skip.len() + 1, params.now).await?;
    let files = files.iter().filter(|r| !is_profile(identity, &r.uri) && !skip.contains(&r.uri)).take(max);
    Ok((files.map(|r| candidate(r, r.category)).collect(), incomplete))
}

/// An entry whose text is known (not planned from the index): shown whole
/// if it fits `budget`, else its head cut to fit and marked `truncated`
/// (the URI stays); `None` when not even a bare element fits.
fn text_entry(uri: &VikingUri, category: Category, text: &str, budget: usize) -> Option<(Entry, usize)> {
    let make = |tier, text: String, truncated| Entry {
        candidate: Candidate {
            uri: uri.clone(),
            category,
            is_directory: false,
            is_memory: category != Category::Resources && category != Category::Skills,
            score: 1.0,
            rank_score: 1.0,
            origin: Origin::Own,
            abstract_text: String::new(),
            abstract_tokens: 0,
            overview_tokens: None,
            full_tokens: None,
            dedup_key: uri.to_string(),
            span: None,
            level: crate::index::record::LEVEL_FILE,
        },
        tier,
        text,
        truncated,
    };
    let cost = |e: &Entry| {
        estimate_tokens(&render(&[EntryView {
            uri: e.candidate.uri.as_str(),
            lines: None,
            category: e.candidate.category.as_str(),
            score: 1.0,
            tier: e.tier,
            text: &e.text,
            truncated: e.truncated,
        }]))
    };
    let whole = make(Tier::Full, text.trim().to_owned(), false);
    let whole_cost = cost(&whole);
    if whole_cost <= budget {
        return Some((whole, whole_cost));
    }
    let envelope = cost(&make(Tier::Full, String::new(), true));
    let room = budget.saturating_sub(envelope + 1);
    let head = truncate_to_escaped_tokens(text.trim(), room);
    if !head.is_empty() && estimate_escaped_tokens(head) > 0 {
        let cut = make(Tier::Full, head.to_owned(), true);
        let c = cost(&cut);
        if c <= budget {
            return Some((cut, c));
        }
    }
    let bare = make(Tier::Uri, String::new(), false);
    let c = cost(&bare);
    (c <= budget).then_some((bare, c))
}

/// Reads a store object as text (`None` when missing).
async fn read_text(app: &App, key: &str) -> Result<Option<String>, StoreError> {
    match app.store.get(key).await {
        Ok(o) => Ok(Some(String::from_utf8_lossy(&o.body).into_owned())),
        Err(StoreError::NotFound(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Assembles the bootstrap block for `identity`.
///
/// Cost: one manifest HEAD (plus segments when changed), the profile read,
/// a list and a read for `continuity` with a session, and the reads the
/// slots' plans place deeper than the abstract. No embedding.
///
/// # Errors
/// When the store fails or the index was built by another embedder.
pub async fn bootstrap(
    app: &App,
    identity: &Identity,
    params: &BootstrapParams,
) -> Result<Bootstrapped, RetrievalError> {
    let index = crate::retrieval::checked_index(app, identity).await?;
    let mut entries: Vec<Entry> = Vec::new();
    let mut slots_stats = Named::default();
    let mut carry = 0usize;
    let (mut reads, mut bytes_read, mut dropped) = (0usize, 0u64, 0usize);
    let (working, mut incomplete) = working_state(&index, identity, params).await?;
    for (slot, share) in &params.manifest.slots {
        // This slot's share plus what earlier slots left; a separator from
        // the previous slot's entries costs one token.
        let separator = usize::from(!entries.is_empty());
        let budget = ((params.max_tokens as f64 * share.clamp(0.0, 1.0)) as usize + carry).saturating_sub(separator);
        let mut slot_entries: Vec<Entry> = Vec::new();
        let mut used = 0usize;
        match slot {
            Slot::Instructions => {
                if let Some((e, c)) = text_entry(&uri_of(INSTRUCTIONS_URI), Category::Memories, INSTRUCTIONS, budget) {
                    slot_entries.push(e);
                    used = c;
                }
            }
            Slot::Identity => {
                let profile = identity.user_root().join("memories/profile.md").expect("constant");
                if let Some(text) = read_text(app, &tree_key(&identity.account, &profile)).await? {
                    reads += 1;
                    bytes_read += text.len() as u64;
                    let body = crate::index::extract::full_text(&text).to_owned();
                    if let Some((e, c)) = text_entry(&profile, Category::Memories, &body, budget) {
                        slot_entries.push(e);
                        used = c;
                    }
                }
            }
            Slot::Continuity => {
                if let Some(session) = &params.session_id
                    && let Ok(Some((uri, text))) =
                        crate::sessions::Sessions::new(&app.store, identity).latest_archive_overview(session).await
                {
                    reads += 1;
                    bytes_read += text.len() as u64;
                    if let Some((e, c)) = text_entry(&uri, Category::Memories, &text, budget) {
                        slot_entries.push(e);
                        used = c;
                    }
                }
            }
            Slot::Listing | Slot::WorkingState => {
                let candidates = if *slot == Slot::WorkingState {
                    working.clone()
                } else {
                    let skip: Vec<VikingUri> = working.iter().map(|c| c.uri.clone()).collect();
                    let (listed, cut) = listing(&index, identity, &skip, params).await?;
                    incomplete |= cut;
                    listed
                };
                let detail = if *slot == Slot::Listing { Detail::Pin(Tier::Abstract) } else { Detail::Auto };
                let planned = plan(
                    &candidates,
                    &PlanRequest { max_tokens: budget.max(1), detail: &detail, events_budget_share: None },
                );
                if budget > 0 {
                    let read = read_planned(&app.store, &identity.account, &candidates, &planned).await;
                    reads += read.reads;
                    bytes_read += read.bytes_read;
                    dropped += planned.dropped;
                    used = planned.tokens;
                    slot_entries.extend(planned.entries.iter().zip(read.texts).map(|(p, shown)| Entry {
                        candidate: candidates[p.candidate].clone(),
                        tier: shown.tier,
                        text: shown.text,
                        truncated: shown.truncated,
                    }));
                } else {
                    dropped += candidates.len();
                }
            }
        }
        if slot_entries.is_empty() {
            used = 0;
        }
        carry = (budget + separator).saturating_sub(used + if slot_entries.is_empty() { 0 } else { separator });
        slots_stats.0.push((slot.as_str(), SlotStats { entries: slot_entries.len(), tokens: used }));
        entries.extend(slot_entries);
    }
    let (rendered, used) = super::render_within(&mut entries, params.max_tokens);
    let stats = BootstrapStats {
        mode: "bootstrap",
        slots: slots_stats,
        max_tokens: params.max_tokens,
        used_tokens: used,
        returned: entries.len(),
        dropped,
        tier_counts: TierCounts::of(&entries),
        instructions: InstructionsStats { version: INSTRUCTIONS_VERSION, content_hash: instructions_hash() },
        bytes_read,
        reads,
        index: IndexStats::of(&index).map(|stats| IndexStats { searches: 2, incomplete, ..stats }),
    };
    Ok(Bootstrapped { entries, rendered, stats })
}
