//! Executing a plan's reads: only the entries planned at `overview` or
//! `full`, at most [`READ_CONCURRENCY`] at a time, results in plan order.
//! An abstract the plan cut is cut here (no read); a text longer than
//! planned (the file changed since it was indexed) is cut to its planned
//! size; both are marked `truncated`. A failed read falls back to the
//! abstract (or a bare URI), so the budget always holds.

use futures_util::{StreamExt as _, stream};

use super::candidate::Candidate;
use super::params::Tier;
use super::plan::{Plan, Planned};
use super::render::TRUNCATED_MARK_TOKENS;
use crate::identity::AccountId;
use crate::index::extract::{directory_overview, file_overview, full_text};
use crate::ingest::OVERVIEW_SIDECAR;
use crate::store::{SharedStore, StoreError};
use crate::tokens::{estimate_escaped_tokens, truncate_to_escaped_tokens};
use crate::uri::tree_key;

/// An entry's final tier and text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    /// The tier shown.
    pub tier: Tier,
    /// Its text (empty for [`Tier::Uri`]).
    pub text: String,
    /// Whether `text` is a prefix cut short of the tier's whole text.
    pub truncated: bool,
}

impl Shown {
    /// `text` (a tier's whole text) within the planned body, marked when
    /// cut. A cut the plan priced (`planned.cut`) takes the whole planned
    /// body; one it did not (the text grew since it was indexed) leaves
    /// [`TRUNCATED_MARK_TOKENS`] for the mark, so the plan's cost holds.
    fn fitted(tier: Tier, text: &str, planned: &Planned) -> Self {
        let room = if planned.cut || estimate_escaped_tokens(text) <= planned.body_tokens {
            planned.body_tokens
        } else {
            planned.body_tokens.saturating_sub(TRUNCATED_MARK_TOKENS)
        };
        let fitted = truncate_to_escaped_tokens(text, room);
        Self { tier, text: fitted.to_owned(), truncated: fitted.len() < text.len() }
    }

    fn bare() -> Self {
        Self { tier: Tier::Uri, text: String::new(), truncated: false }
    }
}

/// Reads in flight at once: 16, so that a 4000-token block's reads (up to
/// 10 at the demo's p95, more with short memories whole) take one round
/// over S3 rather than two (`BENCHMARKS.md`); the session reads use as many.
pub const READ_CONCURRENCY: usize = 16;

/// The texts of a plan's entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reads {
    /// Per plan entry: its tier and text after reading (a failed read falls
    /// back to `abstract` or `uri`).
    pub texts: Vec<Shown>,
    /// Bytes fetched from the store.
    pub bytes_read: u64,
    /// Objects fetched.
    pub reads: usize,
    /// Read failures (at most 5, each at most 200 characters).
    pub errors: Vec<String>,
}

/// The store key a tier of `c` is read from.
fn key_for(account: &AccountId, c: &Candidate) -> Option<String> {
    let target = if c.is_directory { c.uri.join(OVERVIEW_SIDECAR).ok()? } else { c.uri.clone() };
    Some(tree_key(account, &target))
}

/// The tier's text from the object's body (a passage's `full`: its range
/// of the file, when the file still has it).
fn extract(c: &Candidate, tier: Tier, body: &str) -> Option<String> {
    if let (Tier::Full, Some(span)) = (tier, c.span) {
        let range = usize::try_from(span.start).ok()?..usize::try_from(span.end).ok()?;
        return body.get(range).map(str::trim).filter(|t| !t.is_empty()).map(str::to_owned);
    }
    let text = match (tier, c.is_directory) {
        (Tier::Full, false) => Some(full_text(body).to_owned()),
        (Tier::Overview, true) => Some(directory_overview(body).to_owned()),
        (Tier::Overview, false) => file_overview(c.is_memory, body),
        _ => None,
    }?;
    (!text.is_empty()).then_some(text)
}

/// The text to show when a read gave nothing: the abstract if it fits the
/// planned body, else a bare URI.
fn fallback(c: &Candidate, body_tokens: usize) -> Shown {
    if !c.abstract_text.is_empty() && estimate_escaped_tokens(&c.abstract_text) <= body_tokens {
        Shown { tier: Tier::Abstract, text: c.abstract_text.clone(), truncated: false }
    } else {
        Shown::bare()
    }
}

/// A plan entry to read: its place in the plan, and the entry.
type Slot = (usize, Planned);

/// Reads what `plan` needs and returns every entry's final tier and text.
///
/// Cost: one GET per object an entry at `overview` or `full` is read from
/// (a file's passages share theirs), [`READ_CONCURRENCY`] in flight.
pub async fn read_planned(store: &SharedStore, account: &AccountId, candidates: &[Candidate], plan: &Plan) -> Reads {
    // Entries that need no read are settled now; only reads go through the
    // window, so `n` objects take ceil(n / READ_CONCURRENCY) rounds.
    let mut results: Vec<Shown> = plan
        .entries
        .iter()
        .map(|p| match p.tier {
            Tier::Abstract => Shown::fitted(Tier::Abstract, &candidates[p.candidate].abstract_text, p),
            _ => Shown::bare(),
        })
        .collect();
    // One GET per object: a file whose passages are several entries is
    // read once for all of them.
    let mut by_key: Vec<(Option<String>, Vec<Slot>)> = Vec::new();
    for (slot, p) in
        plan.entries.iter().copied().enumerate().filter(|(_, p)| matches!(p.tier, Tier::Overview | Tier::Full))
    {
        let key = key_for(account, &candidates[p.candidate]);
        match by_key.iter_mut().find(|(k, _)| key.is_some() && *k == key) {
            Some((_, slots)) => slots.push((slot, p)),
            None => by_key.push((key, vec![(slot, p)])),
        }
    }
    let jobs = by_key.into_iter().map(|(key, slots)| async move {
        let Some(key) = key else {
            let settled = slots.iter().map(|(slot, p)| (*slot, fallback(&candidates[p.candidate], p.body_tokens)));
            return (settled.collect::<Vec<_>>(), None);
        };
        match store.get(&key).await {
            Ok(object) => {
                let size = object.body.len() as u64;
                let body = String::from_utf8_lossy(&object.body);
                let shown = slots
                    .iter()
                    .map(|(slot, p)| {
                        let c = &candidates[p.candidate];
                        let read = match extract(c, p.tier, &body) {
                            Some(text) => {
                                let shown = Shown::fitted(p.tier, &text, p);
                                if shown.text.is_empty() { fallback(c, p.body_tokens) } else { shown }
                            }
                            None => fallback(c, p.body_tokens),
                        };
                        (*slot, read)
                    })
                    .collect();
                (shown, Some(Ok(size)))
            }
            Err(e) => {
                let uri = &candidates[slots[0].1.candidate].uri;
                let message = match &e {
                    StoreError::NotFound(_) => format!("{uri} is in the index but not in the store"),
                    other => other.to_string(),
                };
                let shown = slots.iter().map(|(slot, p)| (*slot, fallback(&candidates[p.candidate], p.body_tokens)));
                (shown.collect(), Some(Err(message)))
            }
        }
    });
    let reads: Vec<_> = stream::iter(jobs).buffered(READ_CONCURRENCY).collect().await;
    let mut out = Reads::default();
    for (shown, read) in reads {
        for (slot, text) in shown {
            results[slot] = text;
        }
        match read {
            Some(Ok(bytes)) => {
                out.reads += 1;
                out.bytes_read += bytes;
            }
            Some(Err(message)) => {
                out.reads += 1;
                if out.errors.len() < 5 {
                    out.errors.push(message.chars().take(200).collect());
                }
            }
            None => {}
        }
    }
    out.texts = results;
    out
}
