//! The planner: a pure function from candidates (in rank order), a budget
//! and the `detail` request to a plan — which entries to show at which
//! tier. No I/O, no clock, no model. Every cost is known before reading
//! (the abstract's tokens and the record's overview and full token counts),
//! so the reads the plan asks for are never wasted.
//!
//! `detail = auto` fills breadth first: round 0 puts every entry at
//! `abstract` while the budget lasts (a bare `uri` when that is all that
//! fits); round 1 lifts
//! directories to `overview`; round 2 lifts files to `full` (else to
//! `overview`) — both in rank order and within the per-entry cap; a last
//! round spends what is left past the cap. A pinned tier places each entry
//! at its pin (within its ceiling) or drops it.

use std::collections::HashSet;

use super::candidate::Candidate;
use super::params::{Detail, Tier};
use super::render::{EntryView, envelope_quarters};
use crate::index::Category;

/// One placed entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Planned {
    /// Index into the candidates.
    pub candidate: usize,
    /// Its tier.
    pub tier: Tier,
    /// Tokens of its rendered element (an upper bound).
    pub tokens: usize,
    /// Tokens its body may take once read (the body's share of `tokens`).
    pub body_tokens: usize,
}

/// Upgrade counts, as `stats.fill`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Fill {
    /// Tokens after round 0 (every entry at its floor).
    pub floor_tokens: usize,
    /// Entries lifted to `overview`.
    pub overview_upgrades: usize,
    /// Entries lifted to `full` within the cap.
    pub full_upgrades: usize,
    /// Entries lifted past the per-entry cap with what was left.
    pub spare_upgrades: usize,
}

/// The plan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Placed entries, in rank order.
    pub entries: Vec<Planned>,
    /// Candidates that fit at no tier.
    pub dropped: usize,
    /// Candidates whose content repeats an earlier one.
    pub deduped: usize,
    /// The per-entry cap used by the capped rounds.
    pub per_entry_cap: usize,
    /// Upgrade counts.
    pub fill: Fill,
    /// Planned tokens of the whole block (an upper bound of the rendered
    /// estimate).
    pub tokens: usize,
}

/// What the planner needs besides the candidates.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanRequest<'a> {
    /// The budget.
    pub max_tokens: usize,
    /// Tier selection.
    pub detail: &'a Detail,
    /// The share of the budget events may take (purpose presets).
    pub events_budget_share: Option<f64>,
}

/// The tokens a separator (`"\n"`) adds: an upper bound of its quarter.
const SEPARATOR_TOKENS: usize = 1;

/// The per-entry cap: twice an even share of the budget.
#[must_use]
pub fn per_entry_cap(max_tokens: usize, candidates: usize) -> usize {
    (max_tokens / candidates.max(1) * 2).max(1)
}

/// The deepest tier a candidate may reach without a pin: directories stop
/// at overview, memories may reach full, resources and skills stop at
/// abstract.
#[must_use]
pub fn ceiling(c: &Candidate) -> Tier {
    if c.is_directory {
        Tier::Overview
    } else if c.is_memory {
        Tier::Full
    } else {
        Tier::Abstract
    }
}

/// The tier `pin` gives `c`: a scalar pin within the candidate's ceiling; a
/// per-category pin lifts resources and skills but still stops directories
/// at overview.
fn pinned_tier(c: &Candidate, detail: &Detail, pin: Tier) -> Tier {
    let limit = match detail {
        Detail::PerCategory(_) if !c.is_directory => Tier::Full,
        _ => ceiling(c),
    };
    pin.min(limit)
}

/// Rendered body tokens of `c` at `tier`, or `None` when it has no such text.
fn body_tokens(c: &Candidate, tier: Tier) -> Option<usize> {
    let tokens = match tier {
        Tier::Uri => 0,
        Tier::Abstract => (!c.abstract_text.is_empty()).then_some(c.abstract_tokens)?,
        Tier::Overview => c.overview_tokens?,
        Tier::Full if c.is_directory => return None,
        Tier::Full => c.full_tokens?,
    };
    Some(tokens as usize)
}

/// The rendered tokens of `c` at `tier` (body estimate plus the exact
/// envelope), and the body's share.
fn cost(c: &Candidate, tier: Tier) -> Option<(usize, usize)> {
    let body = body_tokens(c, tier)?;
    let view = EntryView { uri: c.uri.as_str(), category: c.category.as_str(), score: c.score, tier, text: "" };
    let quarters = envelope_quarters(&view) + body * 4;
    Some((quarters.div_ceil(4), body))
}

struct Budget {
    max: usize,
    used: usize,
    events_max: Option<usize>,
    events_used: usize,
}

impl Budget {
    fn fits(&self, delta: usize, category: Category) -> bool {
        self.used + delta <= self.max
            && (category != Category::Events || self.events_max.is_none_or(|m| self.events_used + delta <= m))
    }

    /// Whether replacing an entry of `old` tokens by one of `new` fits (a
    /// deeper tier can render shorter: its `detail` attribute is).
    fn fits_swap(&self, old: usize, new: usize, category: Category) -> bool {
        new <= old || self.fits(new - old, category)
    }

    fn swap(&mut self, old: usize, new: usize, category: Category) {
        self.used = self.used + new - old;
        if category == Category::Events {
            self.events_used = self.events_used + new - old;
        }
    }

    fn spend(&mut self, delta: usize, category: Category) {
        self.used += delta;
        if category == Category::Events {
            self.events_used += delta;
        }
    }
}

/// Plans `candidates` (in rank order) into `request.max_tokens`.
///
/// Cost: O(candidates) envelope renders per round; no allocation beyond the
/// plan.
#[must_use]
pub fn plan(candidates: &[Candidate], request: &PlanRequest<'_>) -> Plan {
    let max = request.max_tokens.max(1);
    let cap = per_entry_cap(max, candidates.len());
    // Abstracts are short by construction (cut at ingest), so round 0 shows
    // every entry's abstract while the budget lasts even when many
    // candidates make the per-entry cap small; only an abstract over a
    // quarter of the budget (and the cap) falls to a bare URI.
    let floor_cap = cap.max(max / 4);
    let events_max = request.events_budget_share.map(|s| (max as f64 * s.clamp(0.0, 1.0)) as usize);
    let mut budget = Budget { max, used: 0, events_max, events_used: 0 };
    let mut out = Plan { per_entry_cap: cap, ..Plan::default() };
    let mut seen: HashSet<&str> = HashSet::new();

    // Round 0: every entry at its floor, in rank order.
    for (i, c) in candidates.iter().enumerate() {
        if !seen.insert(c.dedup_key.as_str()) {
            out.deduped += 1;
            continue;
        }
        let sep = if out.entries.is_empty() { 0 } else { SEPARATOR_TOKENS };
        let tiers: Vec<Tier> = match request.detail.pin(c.category) {
            // A pin: the pinned tier, else the best available below it; never a bare URI.
            Some(pin) => {
                let top = pinned_tier(c, request.detail, pin);
                [Tier::Full, Tier::Overview, Tier::Abstract].into_iter().filter(|t| *t <= top).collect()
            }
            None => vec![Tier::Abstract, Tier::Uri],
        };
        let available: Vec<(Tier, usize, usize)> =
            tiers.iter().filter_map(|t| cost(c, *t).map(|(tokens, body)| (*t, tokens, body))).collect();
        let first = if request.detail.pin(c.category).is_some() { available.first().copied() } else { None };
        let chosen = match first {
            // Pinned: the first available tier if it fits (a pin is explicit: no cap), or dropped.
            Some((tier, tokens, body)) => budget.fits(tokens + sep, c.category).then_some((tier, tokens, body)),
            None if request.detail.pin(c.category).is_some() => None,
            None => available.iter().copied().find(|(tier, tokens, _)| {
                (*tier == Tier::Uri || *tokens <= floor_cap) && budget.fits(tokens + sep, c.category)
            }),
        };
        match chosen {
            Some((tier, tokens, body)) => {
                budget.spend(tokens + sep, c.category);
                out.entries.push(Planned { candidate: i, tier, tokens, body_tokens: body });
            }
            None => out.dropped += 1,
        }
    }
    // Upgrades, only for entries that fill automatically.
    let auto = |p: &Planned| request.detail.pin(candidates[p.candidate].category).is_none();

    // Round 0b: once every entry has its floor, bare URIs whose abstract was
    // over the round-0 cap get it now, in rank order, while it fits.
    for slot in 0..out.entries.len() {
        let p = out.entries[slot];
        let c = &candidates[p.candidate];
        if p.tier == Tier::Uri
            && auto(&p)
            && let Some((tokens, body)) = cost(c, Tier::Abstract)
            && budget.fits_swap(p.tokens, tokens, c.category)
        {
            budget.swap(p.tokens, tokens, c.category);
            out.entries[slot] = Planned { tier: Tier::Abstract, tokens, body_tokens: body, ..p };
        }
    }
    out.fill.floor_tokens = budget.used;

    // (which entries, the tiers tried in order, whether the cap applies)
    type Round = (fn(&Candidate) -> bool, &'static [Tier], bool);
    let rounds: [Round; 3] = [
        (|c| c.is_directory, &[Tier::Overview], true),
        (|c| !c.is_directory, &[Tier::Full, Tier::Overview], true),
        (|_| true, &[Tier::Full, Tier::Overview], false),
    ];
    for (round, (eligible, targets, capped)) in rounds.into_iter().enumerate() {
        for slot in 0..out.entries.len() {
            let p = out.entries[slot];
            let c = &candidates[p.candidate];
            // A bare URI can deepen too (a node with no abstract may still
            // have an overview or a body).
            if !auto(&p) || !eligible(c) {
                continue;
            }
            let upgrade = targets.iter().copied().filter(|t| *t > p.tier && *t <= ceiling(c)).find_map(|t| {
                let (tokens, body) = cost(c, t)?;
                ((!capped || tokens <= cap) && budget.fits_swap(p.tokens, tokens, c.category))
                    .then_some((t, tokens, body))
            });
            if let Some((tier, tokens, body)) = upgrade {
                budget.swap(p.tokens, tokens, c.category);
                out.entries[slot] = Planned { tier, tokens, body_tokens: body, ..p };
                match (round, tier) {
                    (2, _) => out.fill.spare_upgrades += 1,
                    (_, Tier::Full) => out.fill.full_upgrades += 1,
                    _ => out.fill.overview_upgrades += 1,
                }
            }
        }
    }
    out.tokens = budget.used;
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assemble::candidate::Origin;
    use crate::uri::VikingUri;

    fn cand(path: &str, category: Category, score: f64, tokens: (u32, Option<u32>, Option<u32>)) -> Candidate {
        let is_directory = !path.ends_with(".md");
        Candidate {
            uri: VikingUri::from_path(path).expect("valid"),
            category,
            is_directory,
            is_memory: path.contains("/memories/"),
            score,
            rank_score: score,
            origin: Origin::Own,
            abstract_text: "a".repeat(tokens.0 as usize * 4),
            abstract_tokens: tokens.0,
            overview_tokens: tokens.1,
            full_tokens: tokens.2,
            dedup_key: path.to_owned(),
        }
    }

    fn tiers(plan: &Plan) -> Vec<(usize, Tier)> {
        plan.entries.iter().map(|p| (p.candidate, p.tier)).collect()
    }

    fn auto(max_tokens: usize) -> PlanRequest<'static> {
        PlanRequest { max_tokens, detail: &Detail::Auto, events_budget_share: None }
    }

    #[test]
    fn auto_goes_breadth_first_then_deepens_in_rank_order() {
        let cs = [
            cand("user/u/memories/events/a.md", Category::Events, 0.9, (10, Some(30), Some(60))),
            cand("user/u/memories/events/b.md", Category::Events, 0.8, (10, Some(30), Some(60))),
            cand("resources/docs", Category::Resources, 0.7, (10, Some(40), None)),
            cand("resources/x.md", Category::Resources, 0.6, (10, Some(40), Some(500))),
        ];
        // Plenty: events to full, the directory to overview, the resource file stays at abstract.
        let p = plan(&cs, &auto(4000));
        assert_eq!(tiers(&p), [(0, Tier::Full), (1, Tier::Full), (2, Tier::Overview), (3, Tier::Abstract)]);
        assert!(p.tokens <= 4000);
        // Tight: every entry is visible first; only the best deepen.
        let p = plan(&cs, &auto(280));
        assert_eq!(p.entries.len(), 4);
        assert!(p.entries.iter().all(|e| e.tier >= Tier::Abstract));
        assert!(p.tokens <= 280, "{p:?}");
    }

    #[test]
    fn entries_that_fit_nowhere_else_are_bare_uris_or_dropped() {
        let cs: Vec<Candidate> = (0..20)
            .map(|i| cand(&format!("user/u/memories/entities/e{i}.md"), Category::Entities, 0.5, (30, None, Some(100))))
            .collect();
        let p = plan(&cs, &auto(200));
        assert!(p.tokens <= 200);
        assert!(p.entries.iter().any(|e| e.tier == Tier::Uri), "{p:?}");
        assert_eq!(p.entries.len() + p.dropped, 20);
        assert!(p.dropped > 0);
    }

    #[test]
    fn a_pin_places_each_entry_at_its_tier_or_drops_it() {
        let cs = [
            cand("user/u/memories/events/a.md", Category::Events, 0.9, (10, Some(30), Some(60))),
            cand("user/u/memories/events/b.md", Category::Events, 0.8, (10, None, Some(400))),
            cand("resources/x.md", Category::Resources, 0.6, (10, Some(40), Some(80))),
        ];
        let detail = Detail::Pin(Tier::Full);
        let p = plan(&cs, &PlanRequest { max_tokens: 300, detail: &detail, events_budget_share: None });
        // a: full; b: its full does not fit -> dropped (no degrading); the resource's ceiling is abstract.
        assert_eq!(tiers(&p), [(0, Tier::Full), (2, Tier::Abstract)]);
        assert_eq!(p.dropped, 1);
        // A per-category pin lifts resources past their ceiling.
        let detail = Detail::PerCategory([(Category::Resources, Tier::Full)].into_iter().collect());
        let p = plan(&cs, &PlanRequest { max_tokens: 3000, detail: &detail, events_budget_share: None });
        assert_eq!(tiers(&p)[2], (2, Tier::Full));
        assert_eq!(tiers(&p)[0], (0, Tier::Full), "unpinned categories still fill automatically");
    }

    #[test]
    fn duplicates_are_counted_not_placed() {
        let mut b = cand("user/u/memories/events/b.md", Category::Events, 0.8, (10, None, None));
        b.dedup_key = "user/u/memories/events/a.md".into();
        let cs = [cand("user/u/memories/events/a.md", Category::Events, 0.9, (10, None, None)), b];
        let p = plan(&cs, &auto(1000));
        assert_eq!((p.entries.len(), p.deduped), (1, 1));
    }

    #[test]
    fn the_events_share_limits_events_only() {
        let cs = [
            cand("user/u/memories/events/a.md", Category::Events, 0.9, (10, Some(200), Some(600))),
            cand("user/u/memories/entities/b.md", Category::Entities, 0.8, (10, Some(200), Some(600))),
        ];
        let p = plan(&cs, &PlanRequest { max_tokens: 1000, detail: &Detail::Auto, events_budget_share: Some(0.3) });
        let events: usize = p.entries.iter().filter(|e| e.candidate == 0).map(|e| e.tokens).sum();
        assert!(events <= 300, "{p:?}");
        assert_eq!(tiers(&p)[1].1, Tier::Full);
    }
}
