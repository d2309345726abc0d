//! The planner: a pure function from candidates (in rank order), a budget
//! and the `detail` request to a plan — which entries to show at which
//! tier. No I/O, no clock, no model. Every cost is known before reading
//! (the abstract's tokens and the record's overview and full token counts),
//! so the reads the plan asks for are never wasted.
//!
//! `detail = auto` spends tokens on rank:
//! - round 0 gives every entry, in rank order, its floor text (the
//!   abstract; an overview or body for a node without one; the whole body
//!   of a memory file at most [`WHOLE_FACTOR`] times its abstract, or of
//!   the first entry when a memory within [`BEST_WHOLE_SHARE`] of the
//!   budget) whole
//!   when it fits within the floor cap (a memory's or a short file's: the
//!   budget left) and the budget, else
//!   cut to fit (at a character boundary, rendered `truncated="true"`)
//!   when at least [`MIN_CUT_TOKENS`] of it fit; an entry that fits no
//!   text is left out;
//! - round 0b gives cut entries, in rank order, what they lack (whole, or
//!   cut longer);
//! - round 1 lifts directories to `overview`, round 2 files to `full`
//!   (else `overview`), both in rank order within the per-entry cap; a
//!   spare round spends what is left past the cap;
//! - last, only when no entry with text fits at all, bare URIs go to the
//!   left-out entries in rank order while they fit: a pointer beats an
//!   empty block, but beside entries with text the tokens left stay
//!   unspent rather than buy names without content.
//!
//! So a higher-ranked entry is never a bare URI while a lower-ranked one
//! carries text, and fewer entries with text beat more without. A pinned
//! tier places each entry at its pin (within its ceiling) or drops it.

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
    /// Whether the body is cut short of its tier's whole text (to
    /// `body_tokens`).
    pub cut: bool,
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

/// The fewest body tokens a cut text keeps (about a short sentence): a
/// text that fits less is left out rather than shown as a stub.
pub const MIN_CUT_TOKENS: usize = 16;

/// The per-entry cap: twice an even share of the budget.
#[must_use]
pub fn per_entry_cap(max_tokens: usize, candidates: usize) -> usize {
    (max_tokens / candidates.max(1) * 2).max(1)
}

/// The most round 0 gives one entry's floor text before cutting it: the
/// per-entry cap, but at least a quarter of the budget (abstracts are short
/// by construction, cut at ingest, so most show whole even when many
/// candidates make the per-entry cap small).
#[must_use]
pub fn floor_cap(max_tokens: usize, candidates: usize) -> usize {
    per_entry_cap(max_tokens, candidates).max(max_tokens / 4)
}

/// The deepest tier a candidate may reach without a pin: directories stop
/// at overview, memories and passages may reach full, other resources and
/// skills stop at abstract.
#[must_use]
pub fn ceiling(c: &Candidate) -> Tier {
    if c.span.is_some() {
        // A passage is short by construction, and the match itself.
        Tier::Full
    } else if c.is_directory {
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

/// The exact envelope of `c` at `tier` (marked cut or not), in quarter
/// tokens.
fn envelope(c: &Candidate, tier: Tier, truncated: bool) -> usize {
    let view = EntryView {
        uri: c.uri.as_str(),
        lines: c.lines(),
        category: c.category.as_str(),
        score: c.score,
        tier,
        text: "",
        truncated,
    };
    envelope_quarters(&view)
}

/// The rendered tokens of `c` at `tier` (body estimate plus the exact
/// envelope), and the body's share.
fn cost(c: &Candidate, tier: Tier) -> Option<(usize, usize)> {
    let body = body_tokens(c, tier)?;
    Some(((envelope(c, tier, false) + body * 4).div_ceil(4), body))
}

/// `c` at `tier` cut to fit `room` tokens: its rendered tokens and body,
/// or `None` when fewer than [`MIN_CUT_TOKENS`] of the body fit (or the
/// whole text fits, which is no cut).
fn cut_cost(c: &Candidate, tier: Tier, room: usize) -> Option<(usize, usize)> {
    let whole = body_tokens(c, tier)?;
    let body = (room * 4).checked_sub(envelope(c, tier, true))? / 4;
    (body >= MIN_CUT_TOKENS && body < whole).then_some(((envelope(c, tier, true) + body * 4).div_ceil(4), body))
}

/// The tier of `c`'s floor text under `detail = auto`: a short file whole,
/// else its abstract (a passage's head, when [`passage_whole`] does not
/// show it whole), or for a node without one the shallowest deeper text
/// within its ceiling.
fn floor_tier(c: &Candidate) -> Option<Tier> {
    if short_enough_whole(c) && c.span.is_none() {
        return Some(Tier::Full);
    }
    [Tier::Abstract, Tier::Overview, Tier::Full].into_iter().find(|t| *t <= ceiling(c) && body_tokens(c, *t).is_some())
}

/// `full` when `c` is a passage whose whole text fits `room` (the floor
/// cap, within what the budget has left): the
/// match itself is shown whole from round 0 when the budget is roomy (at
/// 1600 tokens, a quarter of it), and starts at its head when it is tight.
/// Upgrading it later would come too late: the per-entry cap of the
/// upgrade rounds (twice an even share: 80 tokens for 40 candidates at
/// 1600) is below a passage, and by the uncapped round the lower-ranked
/// entries have spent the budget. Whole from round 0 at any budget,
/// passages crowd a tight one (at 300 tokens the retrieval set's
/// relevant-with-text share fell from 0.714 to 0.681).
fn passage_whole(c: &Candidate, room: usize) -> Option<Tier> {
    (c.span.is_some() && cost(c, Tier::Full).is_some_and(|(tokens, _)| tokens <= room)).then_some(Tier::Full)
}

/// `full` when `c`, the first entry placed, is a memory file (not a
/// passage) whose whole text costs at most [`BEST_WHOLE_SHARE`] of the
/// budget and fits `room`: the best match shows all of itself (an
/// episode's replies too, which its digest leaves out), the rest their
/// floors.
fn best_whole(c: &Candidate, max: usize, room: usize) -> Option<Tier> {
    let (tokens, _) = cost(c, Tier::Full).filter(|_| c.is_memory && c.span.is_none())?;
    (tokens as f64 <= BEST_WHOLE_SHARE * max as f64 && tokens <= room).then_some(Tier::Full)
}

/// The share of the budget the best entry may take whole in round 0: a
/// quarter (400 tokens at 1600). Chosen on the conversational evaluation
/// (`BENCHMARKS.md`): the answer in a 1600-token block rose from 83.4% to
/// 84.1%, and every evidence message from 38.8% to 49.5%, against 84.0%
/// and 48.2% at 0.15 and no gain at 0.4; the second and third entries
/// whole too gained less (84.0%, 83.7%). The 400-token block is unchanged.
pub const BEST_WHOLE_SHARE: f64 = 0.25;

/// Whether `c` is a file short enough to show whole from round 0: its
/// full text may reach `full` and costs at most [`WHOLE_FACTOR`] times
/// its abstract.
fn short_enough_whole(c: &Candidate) -> bool {
    ceiling(c) == Tier::Full
        && c.abstract_tokens > 0
        && c.full_tokens.is_some_and(|full| f64::from(full) <= WHOLE_FACTOR * f64::from(c.abstract_tokens))
}

/// How much longer than its abstract a file may be and still show whole
/// in round 0: 1, a file whose abstract is all of it. Chosen on the
/// conversational evaluation (`BENCHMARKS.md`): an episode's abstract is
/// its digest (what the user said, replies left out), and digests first
/// hold what 82.7% of answers need in a 1600-token block against 79.5%
/// with a factor of 2.5 (most exchanges whole); the retrieval set's
/// context scores are unchanged.
pub const WHOLE_FACTOR: f64 = 1.0;

struct Budget {
    max: usize,
    used: usize,
    events_max: Option<usize>,
    events_used: usize,
}

impl Budget {
    fn fits(&self, delta: usize, category: Category) -> bool {
        delta <= self.room(category)
    }

    /// The tokens an entry of `category` may still take.
    fn room(&self, category: Category) -> usize {
        let all = self.max.saturating_sub(self.used);
        match self.events_max {
            Some(m) if category == Category::Events => all.min(m.saturating_sub(self.events_used)),
            _ => all,
        }
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
    let floor_cap = floor_cap(max, candidates.len());
    let events_max = request.events_budget_share.map(|s| (max as f64 * s.clamp(0.0, 1.0)) as usize);
    let mut budget = Budget { max, used: 0, events_max, events_used: 0 };
    let mut out = Plan { per_entry_cap: cap, ..Plan::default() };
    let mut seen: HashSet<&str> = HashSet::new();
    // Candidates with no text placed, for the bare-URI round.
    let mut left_out: Vec<usize> = Vec::new();

    // Round 0: every entry's floor, in rank order.
    for (i, c) in candidates.iter().enumerate() {
        if !seen.insert(c.dedup_key.as_str()) {
            out.deduped += 1;
            continue;
        }
        let sep = if out.entries.is_empty() { 0 } else { SEPARATOR_TOKENS };
        let chosen = match request.detail.pin(c.category) {
            // A pin: the pinned tier, else the best available below it, if
            // it fits (a pin is explicit: no cap); never a bare URI or a cut.
            Some(pin) => {
                let top = pinned_tier(c, request.detail, pin);
                [Tier::Full, Tier::Overview, Tier::Abstract]
                    .into_iter()
                    .filter(|t| *t <= top)
                    .find_map(|t| cost(c, t).map(|(tokens, body)| (t, tokens, body)))
                    .filter(|(_, tokens, _)| budget.fits(tokens + sep, c.category))
                    .map(|(tier, tokens, body)| Planned { candidate: i, tier, tokens, body_tokens: body, cut: false })
            }
            None => {
                let whole = passage_whole(c, floor_cap.min(budget.room(c.category).saturating_sub(sep)));
                let best = out.entries.is_empty().then(|| best_whole(c, max, budget.room(c.category))).flatten();
                whole.or(best).or_else(|| floor_tier(c))
            }
            .and_then(|tier| {
                // The floor cap, but never below the shortest cut: a text
                // beats a bare URI even when many candidates share a small
                // budget.
                let shortest_cut = (envelope(c, tier, true) + MIN_CUT_TOKENS * 4).div_ceil(4);
                // A memory's floor is never cut to the cap, only to what the
                // budget has left: a memory cut short is a broken statement
                // (on the conversational evaluation, capped digests held
                // what 36% of answers need at 400 tokens, uncapped 59%; the
                // retrieval set lost 0.1 point). A short file shown whole
                // may take what the budget has left too: cutting it would
                // save little.
                let cap = if tier == Tier::Full || c.is_memory { usize::MAX } else { floor_cap };
                let room = cap.max(shortest_cut).min(budget.room(c.category).saturating_sub(sep));
                let (tokens, body) = cost(c, tier)?;
                if tokens <= room {
                    Some(Planned { candidate: i, tier, tokens, body_tokens: body, cut: false })
                } else {
                    cut_cost(c, tier, room).map(|(tokens, body)| Planned {
                        candidate: i,
                        tier,
                        tokens,
                        body_tokens: body,
                        cut: true,
                    })
                }
            }),
        };
        match chosen {
            Some(p) => {
                budget.spend(p.tokens + sep, c.category);
                out.entries.push(p);
            }
            None => left_out.push(i),
        }
    }
    // Upgrades, only for entries that fill automatically.
    let auto = |p: &Planned| request.detail.pin(candidates[p.candidate].category).is_none();

    // Round 0b: cut entries, in rank order, get what they lack: their
    // whole text if it fits, else as much more of it as fits.
    for slot in 0..out.entries.len() {
        let p = out.entries[slot];
        let c = &candidates[p.candidate];
        if !p.cut {
            continue;
        }
        let room = p.tokens + budget.room(c.category);
        let grown = match cost(c, p.tier) {
            Some((tokens, body)) if tokens <= room => Some((tokens, body, false)),
            _ => cut_cost(c, p.tier, room).filter(|(_, body)| *body > p.body_tokens).map(|(t, b)| (t, b, true)),
        };
        if let Some((tokens, body, cut)) = grown {
            budget.swap(p.tokens, tokens, c.category);
            out.entries[slot] = Planned { tokens, body_tokens: body, cut, ..p };
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
                out.entries[slot] = Planned { tier, tokens, body_tokens: body, cut: false, ..p };
                match (round, tier) {
                    (2, _) => out.fill.spare_upgrades += 1,
                    (_, Tier::Full) => out.fill.full_upgrades += 1,
                    _ => out.fill.overview_upgrades += 1,
                }
            }
        }
    }

    // Last, when nothing with text fits: bare URIs, in rank order, while
    // they fit.
    let no_text = out.entries.is_empty();
    for i in left_out.into_iter().filter(|_| no_text) {
        let c = &candidates[i];
        if request.detail.pin(c.category).is_some() {
            continue;
        }
        let sep = if out.entries.is_empty() { 0 } else { SEPARATOR_TOKENS };
        if let Some((tokens, _)) = cost(c, Tier::Uri)
            && budget.fits(tokens + sep, c.category)
        {
            budget.spend(tokens + sep, c.category);
            out.entries.push(Planned { candidate: i, tier: Tier::Uri, tokens, body_tokens: 0, cut: false });
        }
    }
    out.dropped = candidates.len() - out.deduped - out.entries.len();
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
            span: None,
            level: crate::index::record::LEVEL_FILE,
        }
    }

    fn tiers(plan: &Plan) -> Vec<(usize, Tier)> {
        plan.entries.iter().map(|p| (p.candidate, p.tier)).collect()
    }

    fn auto(max_tokens: usize) -> PlanRequest<'static> {
        PlanRequest { max_tokens, detail: &Detail::Auto, events_budget_share: None }
    }

    #[test]
    fn a_passage_is_whole_in_a_roomy_block_and_starts_at_its_head_in_a_tight_one() {
        let mut passage = cand("resources/guide.md", Category::Resources, 0.9, (100, None, Some(190)));
        passage.span = Some(crate::index::record::Span { start: 900, end: 1700, first_line: 40, last_line: 46 });
        let mut cs = vec![passage];
        // Forty lower-ranked memories whose bodies would take any spare room.
        cs.extend(
            (0..39)
                .map(|i| cand(&format!("user/u/memories/events/e{i}.md"), Category::Events, 0.5, (20, None, Some(45)))),
        );
        let roomy = plan(&cs, &auto(1600));
        assert_eq!(roomy.entries[0].tier, Tier::Full, "{:?}", tiers(&roomy));
        assert!(!roomy.entries[0].cut);
        let tight = plan(&cs, &auto(300));
        assert_eq!(tight.entries[0].tier, Tier::Abstract, "{:?}", tiers(&tight));
        assert!(tight.entries.len() > 2, "the passage leaves room for others: {:?}", tiers(&tight));
        // Without a span the same file stops at its abstract (a resource).
        cs[0].span = None;
        assert_eq!(plan(&cs, &auto(1600)).entries[0].tier, Tier::Abstract);
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
    fn fewer_entries_with_text_beat_more_bare_ones() {
        let cs: Vec<Candidate> = (0..20)
            .map(|i| cand(&format!("user/u/memories/entities/e{i}.md"), Category::Entities, 0.5, (30, None, Some(100))))
            .collect();
        let p = plan(&cs, &auto(200));
        assert!(p.tokens <= 200);
        assert!(p.entries.iter().all(|e| e.tier == Tier::Abstract), "{p:?}");
        assert_eq!(p.entries.len() + p.dropped, 20);
        assert_eq!(tiers(&p).iter().map(|t| t.0).collect::<Vec<_>>(), [0, 1, 2], "the best, in rank order");
    }

    #[test]
    fn an_abstract_over_the_floor_cap_is_cut_not_bared() {
        // Dense abstracts (as CJK ones are) over a quarter of the budget.
        let mut cs: Vec<Candidate> =
            (0..3).map(|i| cand(&format!("resources/e{i}.md"), Category::Resources, 0.9, (120, None, None))).collect();
        cs.extend((3..8).map(|i| cand(&format!("resources/r{i}.md"), Category::Resources, 0.5, (20, None, None))));
        let p = plan(&cs, &auto(300));
        assert!(p.tokens <= 300, "{p:?}");
        let top: Vec<_> = p.entries.iter().take(3).map(|e| (e.candidate, e.tier, e.cut)).collect();
        assert_eq!(top, [(0, Tier::Abstract, true), (1, Tier::Abstract, true), (2, Tier::Abstract, true)], "{p:?}");
        assert!(p.entries.iter().all(|e| e.tier != Tier::Uri && e.body_tokens >= MIN_CUT_TOKENS), "{p:?}");
        // With room, the cut grows back to the whole abstract.
        let p = plan(&cs[..1], &auto(300));
        assert_eq!((p.entries[0].tier, p.entries[0].cut, p.entries[0].body_tokens), (Tier::Abstract, false, 120));
        // A memory's abstract is never cut to the cap, only to the budget
        // left: the first two whole, the third where the budget ends.
        let memories: Vec<Candidate> = (0..3)
            .map(|i| cand(&format!("user/u/memories/entities/e{i}.md"), Category::Entities, 0.9, (120, None, None)))
            .collect();
        let p = plan(&memories, &auto(300));
        let cuts: Vec<_> = p.entries.iter().map(|e| (e.candidate, e.cut)).collect();
        assert_eq!((cuts.as_slice(), p.dropped), (&[(0, false), (1, false)][..], 1), "{p:?}");
        let p = plan(&memories, &auto(360));
        let cuts: Vec<_> = p.entries.iter().map(|e| (e.candidate, e.cut)).collect();
        assert_eq!(cuts, [(0, false), (1, false), (2, true)], "{p:?}");
        assert!(p.tokens <= 360, "{p:?}");
    }

    #[test]
    fn bare_uris_only_when_no_text_fits() {
        let cs = [
            cand("resources/none0.md", Category::Resources, 0.9, (0, None, None)),
            cand("resources/a.md", Category::Resources, 0.8, (10, None, None)),
            cand("resources/b.md", Category::Resources, 0.7, (10, None, None)),
            cand("resources/none3.md", Category::Resources, 0.6, (0, None, None)),
        ];
        let p = plan(&cs, &auto(1000));
        assert_eq!(tiers(&p), [(1, Tier::Abstract), (2, Tier::Abstract)]);
        assert_eq!(p.dropped, 2, "nodes without text are left out beside entries with text");
        // Nothing with text: pointers, in rank order, while they fit.
        let p = plan(&[cs[0].clone(), cs[3].clone()], &auto(1000));
        assert_eq!(tiers(&p), [(0, Tier::Uri), (1, Tier::Uri)]);
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
    fn a_short_memory_shows_whole_from_round_0_and_a_long_one_its_abstract() {
        let cs = [
            // Full text no longer than the abstract: whole, even past the
            // floor cap (100 of 400).
            cand("user/u/memories/events/short.md", Category::Events, 0.9, (120, None, Some(120))),
            // Full text longer than the abstract: its abstract first.
            cand("user/u/memories/events/long.md", Category::Events, 0.8, (30, None, Some(400))),
            // A resource stops at its abstract, however short.
            cand("resources/r.md", Category::Resources, 0.7, (30, None, Some(40))),
        ];
        let p = plan(&cs, &auto(400));
        assert_eq!(tiers(&p), [(0, Tier::Full), (1, Tier::Abstract), (2, Tier::Abstract)], "{p:?}");
        assert!(!p.entries[0].cut && p.tokens <= 400, "{p:?}");
        // With no room for it whole, the short file is cut like any floor text.
        let p = plan(&cs[..1], &auto(90));
        assert_eq!((p.entries[0].tier, p.entries[0].cut), (Tier::Full, true), "{p:?}");
    }

    #[test]
    fn the_best_memory_shows_whole_within_a_quarter_of_the_budget() {
        let cs: Vec<Candidate> = (0..40)
            .map(|i| cand(&format!("user/u/memories/events/e{i}.md"), Category::Events, 0.5, (30, None, Some(300))))
            .collect();
        // 1600: the best whole (about 310 of 400), every other its digest.
        let p = plan(&cs, &auto(1600));
        assert_eq!(tiers(&p)[..3], [(0, Tier::Full), (1, Tier::Abstract), (2, Tier::Abstract)], "{p:?}");
        assert!(!p.entries[0].cut && p.tokens <= 1600, "{p:?}");
        // 800: a quarter is 200, too little: the best shows its digest too.
        assert_eq!(tiers(&plan(&cs, &auto(800)))[0], (0, Tier::Abstract));
        // A resource first stops at its abstract; the memory after it is
        // not the first entry.
        let mut mixed = vec![cand("resources/r.md", Category::Resources, 0.9, (30, None, Some(300)))];
        mixed.extend(cs.iter().cloned());
        assert_eq!(tiers(&plan(&mixed, &auto(1600)))[..2], [(0, Tier::Abstract), (1, Tier::Abstract)]);
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
