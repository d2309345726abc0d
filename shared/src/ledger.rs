//! The per-session dedup ledger: `.recall_log.json` in the
//! session folder, recording which URI was served at which tier on which
//! turn. Read and written only when a request opts in (`dedup_turns > 0`
//! with a `session_id`). The rules are pure functions ([`cooled`],
//! [`merge_and_prune`]); [`Ledger`] does the I/O, with compare-and-swap
//! writes that merge concurrent records and never fail the request.

use std::collections::{BTreeMap, HashSet};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::store::{PutMode, SharedStore, StoreError};
use crate::uri::VikingUri;

/// The ledger format version.
pub const LEDGER_VERSION: u32 = 1;
/// Records kept at most (newest first).
pub const MAX_RECORDS: usize = 500;
/// Write attempts before a write is reported as failed (the request's soft
/// stop bounds them in time too).
const WRITE_ATTEMPTS: u32 = 64;

/// One served URI.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Served {
    /// The turn it was served on.
    pub turn: u64,
    /// The tier it was served at (`uri`, `abstract`, `overview`, `full`).
    pub detail: String,
}

/// The ledger object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerData {
    /// Format version (1).
    pub version: u32,
    /// The turn of the last write.
    pub updated_turn: u64,
    /// Served URIs.
    pub entries: BTreeMap<String, Served>,
}

impl LedgerData {
    fn empty() -> Self {
        Self { version: LEDGER_VERSION, updated_turn: 0, entries: BTreeMap::new() }
    }
}

/// The URIs cooled at turn `now`: served at a tier other than `uri` on a
/// turn `t ≤ now` with `now − t < dedup_turns`. A URI served only as a bare
/// URI is not cooled (it may come back deeper); records ahead of the clock
/// are ignored.
#[must_use]
pub fn cooled(data: &LedgerData, now: u64, dedup_turns: u64) -> HashSet<String> {
    data.entries
        .iter()
        .filter(|(_, s)| s.detail != "uri" && s.turn <= now && now - s.turn < dedup_turns)
        .map(|(uri, _)| uri.clone())
        .collect()
}

/// `data` with `served` recorded at turn `now` (replacing older records of
/// the same URIs), records older than `4 × dedup_turns` turns or ahead of
/// the clock dropped, and at most [`MAX_RECORDS`] kept, newest first.
#[must_use]
pub fn merge_and_prune(mut data: LedgerData, served: &[(String, String)], now: u64, dedup_turns: u64) -> LedgerData {
    for (uri, detail) in served {
        data.entries.insert(uri.clone(), Served { turn: now, detail: detail.clone() });
    }
    let horizon = now.saturating_sub(dedup_turns.saturating_mul(4));
    data.entries.retain(|_, s| s.turn >= horizon && s.turn <= now);
    if data.entries.len() > MAX_RECORDS {
        let mut by_age: Vec<(String, u64)> = data.entries.iter().map(|(u, s)| (u.clone(), s.turn)).collect();
        by_age.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let keep: HashSet<String> = by_age.into_iter().take(MAX_RECORDS).map(|(u, _)| u).collect();
        data.entries.retain(|u, _| keep.contains(u));
    }
    data.version = LEDGER_VERSION;
    data.updated_turn = data.updated_turn.max(now);
    data
}

/// What happened to the ledger in one request, as `stats.dedup`
/// (`DedupStats` in `infra/openapi.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DedupStatus {
    /// `dedup_turns`.
    pub turns: u64,
    /// `off`, `new` (no ledger yet), `ok`, `write_failed`.
    pub status: &'static str,
    /// URIs cooled this turn.
    pub cooled: usize,
    /// The turn clock, when the ledger was used (`null` otherwise).
    pub turn: Option<u64>,
}

impl DedupStatus {
    /// Dedup not requested.
    #[must_use]
    pub fn off(turns: u64) -> Self {
        Self { turns, status: "off", cooled: 0, turn: None }
    }
}

/// A loaded ledger, ready to exclude cooled URIs and to record this turn.
#[derive(Debug)]
pub struct Ledger<'a> {
    store: &'a SharedStore,
    key: String,
    turn: u64,
    dedup_turns: u64,
    /// The cooled URIs of this turn.
    pub cooled: HashSet<String>,
    /// `new` or `ok` (see [`DedupStatus`]).
    pub status: &'static str,
    /// What was read, with the write mode that replaces exactly it: the
    /// first write attempt needs no second read.
    loaded: (LedgerData, PutMode),
}

impl<'a> Ledger<'a> {
    /// Loads the ledger at `key` for turn `turn`. An unreadable or missing
    /// ledger loads empty with status `new`.
    ///
    /// Cost: one GET.
    pub async fn load(store: &'a SharedStore, key: String, turn: u64, dedup_turns: u64) -> Self {
        let read = store.get(&key).await;
        Self::from_read(store, key, read, turn, dedup_turns)
    }

    /// The ledger from a GET of `key` the caller already made (so it can
    /// overlap with other reads). Cost: none.
    #[must_use]
    pub fn from_read(
        store: &'a SharedStore,
        key: String,
        read: Result<crate::store::Object, StoreError>,
        turn: u64,
        dedup_turns: u64,
    ) -> Self {
        let (data, mode) = match read {
            Ok(object) => match serde_json::from_slice::<LedgerData>(&object.body) {
                Ok(data) => (Some(data), PutMode::IfMatch(object.meta.etag)),
                Err(_) => (None, PutMode::IfMatch(object.meta.etag)),
            },
            Err(StoreError::NotFound(_)) => (None, PutMode::CreateNew),
            Err(e) => {
                tracing::warn!(error = %e, "dedup ledger unreadable; treating as new");
                (None, PutMode::Overwrite)
            }
        };
        let status = if data.is_some() { "ok" } else { "new" };
        let cooled = data.as_ref().map(|d| cooled(d, turn, dedup_turns)).unwrap_or_default();
        let loaded = (data.unwrap_or_else(LedgerData::empty), mode);
        Self { store, key, turn, dedup_turns, cooled, status, loaded }
    }

    /// The turn clock this ledger was loaded at.
    #[must_use]
    pub fn turn(&self) -> u64 {
        self.turn
    }

    /// The cooled URIs as URIs (invalid ones are skipped).
    #[must_use]
    pub fn cooled_uris(&self) -> HashSet<VikingUri> {
        self.cooled.iter().filter_map(|u| VikingUri::parse(u).ok()).collect()
    }

    /// Records `served` (uri, tier) at this turn, merging with concurrent
    /// writers by compare-and-swap. Returns the final status: `ok`/`new`,
    /// or `write_failed` (never an error: the request still succeeds).
    ///
    /// Cost: one conditional PUT on the first attempt (it reuses the read
    /// made at load time); a GET and a conditional PUT per retry.
    pub async fn record(&self, served: &[(String, String)]) -> &'static str {
        for attempt in 1..=WRITE_ATTEMPTS {
            let read = if attempt == 1 && self.loaded.1 != PutMode::Overwrite {
                // The state read at load time (a second GET only after a
                // conflict, or when that read failed).
                Some(self.loaded.clone())
            } else {
                None
            };
            let (current, mode) = match read {
                Some(loaded) => loaded,
                None => match self.store.get(&self.key).await {
                    Ok(object) => {
                        let data =
                            serde_json::from_slice::<LedgerData>(&object.body).unwrap_or_else(|_| LedgerData::empty());
                        (data, PutMode::IfMatch(object.meta.etag))
                    }
                    Err(StoreError::NotFound(_)) => (LedgerData::empty(), PutMode::CreateNew),
                    Err(e) => {
                        tracing::warn!(error = %e, "dedup ledger write failed");
                        return "write_failed";
                    }
                },
            };
            let next = merge_and_prune(current, served, self.turn, self.dedup_turns);
            let Ok(body) = serde_json::to_vec(&next) else { return "write_failed" };
            match self.store.put(&self.key, Bytes::from(body), mode).await {
                Ok(_) => return self.status,
                Err(StoreError::Conflict(_)) => {
                    let wait = u64::from(attempt.min(8)) * 4 + crate::index::unique() % 9;
                    tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "dedup ledger write failed");
                    return "write_failed";
                }
            }
        }
        tracing::warn!(key = %self.key, "dedup ledger write lost every compare-and-swap");
        "write_failed"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(records: &[(&str, u64, &str)]) -> LedgerData {
        let mut d = LedgerData::empty();
        for (u, t, detail) in records {
            d.entries.insert((*u).to_owned(), Served { turn: *t, detail: (*detail).to_owned() });
        }
        d
    }

    #[test]
    fn served_uris_cool_for_dedup_turns_but_bare_uris_do_not() {
        let d = data(&[("a", 10, "abstract"), ("b", 10, "uri"), ("c", 8, "full"), ("d", 12, "full")]);
        let at = |now| {
            let mut v: Vec<String> = cooled(&d, now, 2).into_iter().collect();
            v.sort();
            v
        };
        assert_eq!(at(10), ["a"]); // c: 10-8 = 2, not < 2; d is ahead of the clock
        assert_eq!(at(11), ["a"]);
        assert_eq!(at(12), ["d"]);
        assert!(cooled(&d, 10, 0).is_empty());
    }

    #[test]
    fn merging_upserts_then_prunes_old_and_future_records() {
        let d = data(&[("old", 1, "full"), ("keep", 8, "full"), ("future", 30, "full")]);
        let next = merge_and_prune(d, &[("new".into(), "abstract".into()), ("keep".into(), "uri".into())], 10, 2);
        let keys: Vec<&String> = next.entries.keys().collect();
        assert_eq!(keys, ["keep", "new"]);
        assert_eq!(next.entries["keep"], Served { turn: 10, detail: "uri".into() });
        assert_eq!(next.updated_turn, 10);
    }

    #[test]
    fn at_most_500_records_are_kept_newest_first() {
        let mut d = LedgerData::empty();
        for i in 0..600u64 {
            d.entries.insert(format!("u{i:03}"), Served { turn: 100 + i / 100, detail: "full".into() });
        }
        let next = merge_and_prune(d, &[], 105, 100);
        assert_eq!(next.entries.len(), MAX_RECORDS);
        assert!(next.entries.values().all(|s| s.turn >= 101), "the oldest turn's records go first");
    }
}
