//! Properties of the pure parts of context assembly:
//!
//! - the planner ([`skald::assemble::plan::plan`]) over arbitrary candidate
//!   sets, budgets and `detail` requests: it never plans past the budget,
//!   keeps rank order, places each candidate at most once, accounts for
//!   every candidate, never pins an entry to a bare URI, respects tier
//!   ceilings and only plans tiers that have text;
//! - how the plan fills the budget: a pinned entry sits at its pin; bare
//!   URIs appear only in a plan with no text at all; an automatic entry's
//!   text is cut only to what fits (a prefix of at least `MIN_CUT_TOKENS`,
//!   marked); an entry is not left below a deeper tier that would still
//!   fit; a candidate is dropped only when it no longer fits;
//! - the renderer ([`skald::assemble::render::render`]) over arbitrary
//!   entries: the block is well-formed XML that a parser (quick-xml's
//!   `Reader`) reads back into exactly the entries it was given, whatever
//!   their bodies hold, and the planner's cost model is an upper bound of
//!   the rendered estimate;
//! - the two together: texts of exactly the planned sizes (or larger ones
//!   cut the way reads cut them) render within the budget, keeping every
//!   placed entry's URI.

use std::collections::HashSet;

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use skald::assemble::candidate::{Candidate, Origin};
use skald::assemble::params::{Detail, Tier};
use skald::assemble::plan::{self, MIN_CUT_TOKENS, Plan, PlanRequest, Planned};
use skald::assemble::render::{self, EntryView, envelope_quarters};
use skald::index::Category;
use skald::index::record::Span;
use skald::tokens::{estimate_escaped_tokens, estimate_tokens, truncate_to_escaped_tokens};
use skald::uri::VikingUri;
use skald::xml_text::{is_xml_char, xml_safe};
use skald_tests::xml::parse_block;

const CATEGORIES: [Category; 7] = Category::ALL;

const PINNABLE: [Tier; 3] = [Tier::Abstract, Tier::Overview, Tier::Full];

/// No failure files are written next to the tests (this suite only adds
/// its own files); a failure prints its minimal input instead.
fn config() -> ProptestConfig {
    ProptestConfig { failure_persistence: None, ..ProptestConfig::default() }
}

// ---------------------------------------------------------------------------
// Generators
// ---------------------------------------------------------------------------

/// Characters of ordinary text: ASCII, CJK (ideographs, kana, Hangul,
/// full-width forms, extension B), emoji and other astral code points, the
/// characters XML escapes, and CR, LF and tab.
fn text_char() -> impl Strategy<Value = char> + Clone {
    prop_oneof![
        8 => proptest::char::range(' ', '~'),
        3 => proptest::char::range('\u{4e00}', '\u{9fff}'),
        1 => proptest::char::range('\u{3040}', '\u{30ff}'),
        1 => proptest::char::range('\u{ac00}', '\u{d7af}'),
        1 => proptest::char::range('\u{ff01}', '\u{ff5e}'),
        1 => proptest::char::range('\u{20000}', '\u{2a6df}'),
        1 => proptest::char::range('\u{1f300}', '\u{1faff}'),
        1 => proptest::char::range('\u{1d400}', '\u{1d7ff}'),
        2 => prop::sample::select(vec!['<', '>', '&', '"', '\'', '\r', '\n', '\t', 'é', '—', '\u{3002}']),
    ]
}

/// [`text_char`] plus characters XML 1.0 cannot hold (C0 controls, U+FFFE,
/// U+FFFF) and some it can but that look suspicious (DEL, C1 controls).
fn hostile_char() -> impl Strategy<Value = char> + Clone {
    prop_oneof![
        12 => text_char(),
        1 => proptest::char::range('\u{0}', '\u{1f}'),
        1 => prop::sample::select(vec!['\u{7f}', '\u{85}', '\u{9f}', '\u{fffe}', '\u{ffff}', '\u{fffd}', '\u{feff}']),
    ]
}

/// An abstract: empty now and then, else up to 120 mixed characters.
fn abstract_text() -> impl Strategy<Value = String> {
    prop_oneof![
        1 => Just(String::new()),
        9 => vec(hostile_char(), 1..120).prop_map(String::from_iter),
    ]
}

/// A body: characters and fragments that try to forge or break elements.
fn body_text() -> impl Strategy<Value = String> {
    let fragment = prop::sample::select(vec![
        "</memory>",
        "<memory uri=\"x\">",
        "<memory uri=\"x\" detail=\"full\"/>",
        "&amp;",
        "&",
        "&#13;",
        "&lt;",
        "<![CDATA[",
        "]]>",
        "<![CDATA[ x ]]>",
        "<!-- comment -->",
        "<?pi x?>",
        "<!DOCTYPE x>",
        "\r",
        "\r\n",
        "\n\r",
        "\t",
        "\u{0}",
        "\u{7}",
        "\u{1b}",
        "\u{b}\u{c}",
        "\u{fffe}",
        "\u{ffff}",
        "😀",
        "👩‍👩‍👧",
        "中文记忆",
        "한국어",
        "  ",
        "\n\n",
    ])
    .prop_map(str::to_owned);
    let piece = prop_oneof![3 => hostile_char().prop_map(String::from), 1 => fragment];
    vec(piece, 0..48).prop_map(|pieces| pieces.concat())
}

/// A URI segment that `VikingUri` accepts: plain names, and names with
/// `&`, `'`, `"`, `<`, `>`, spaces, CJK and emoji.
fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => prop::sample::select(vec![
            "notes", "r&d", "o'neil", "\"quoted\"", "a<b>c", "a b", "记忆", "日志文件", "한국", "😀", "résumé", "%20",
            "x;y", "&amp;", "2026", "events", "-_@",
        ])
        .prop_map(str::to_owned),
        1 => "[a-z0-9&'_@\\-\u{4e00}-\u{4e20}]{1,8}",
    ]
}

/// A valid URI from 1..4 segments; files end in `.md`.
fn uri(is_directory: bool) -> impl Strategy<Value = VikingUri> {
    vec(segment(), 1..4).prop_map(move |segs| {
        let path = if is_directory { segs.join("/") } else { format!("{}.md", segs.join("/")) };
        VikingUri::from_path(&path).unwrap_or_else(|e| panic!("generator built an invalid uri {path:?}: {e}"))
    })
}

/// A score: mostly in `[0, 1]`, sometimes negative, non-finite or large.
fn score() -> impl Strategy<Value = f64> {
    prop_oneof![
        8 => 0.0f64..=1.0,
        1 => -1.0f64..0.0,
        1 => prop::sample::select(vec![f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.005, 0.995, 1.0, 123.456]),
    ]
}

/// Token counts of an overview or full tier: small or large, sometimes absent.
fn tier_tokens(large: u32) -> impl Strategy<Value = Option<u32>> {
    prop::option::weighted(0.75, prop_oneof![0u32..40, 0u32..large])
}

/// One candidate. The dedup key is fixed up by [`candidates`]: `Some(k)`
/// shares key `k` with other candidates, `None` is unique.
fn candidate() -> impl Strategy<Value = (Candidate, Option<u8>)> {
    (any::<bool>(), any::<bool>())
        .prop_flat_map(|(is_directory, is_memory)| {
            (
                uri(is_directory),
                Just(is_directory),
                Just(is_memory),
                prop::sample::select(CATEGORIES.to_vec()),
                score(),
                abstract_text(),
                tier_tokens(600),
                tier_tokens(3000),
                prop::option::weighted(0.3, 0u8..6),
                prop::option::weighted(0.25, 1u32..400),
            )
        })
        .prop_map(|(uri, is_directory, is_memory, category, score, abstract_text, overview, full, dup, line)| {
            // Some files' candidates are passages of them.
            let span = line.filter(|_| !is_directory).map(|line| Span {
                start: line * 40,
                end: line * 40 + 200,
                first_line: line,
                last_line: line + 5,
            });
            let candidate = Candidate {
                uri,
                category,
                is_directory,
                is_memory,
                score,
                rank_score: score,
                origin: Origin::Own,
                // As ingest prices it: the escaped estimate of the abstract.
                abstract_tokens: u32::try_from(estimate_escaped_tokens(&abstract_text)).unwrap_or(u32::MAX),
                abstract_text,
                overview_tokens: overview,
                full_tokens: full,
                dedup_key: String::new(),
                level: match (is_directory, span) {
                    (true, _) => skald::index::record::LEVEL_ABSTRACT,
                    (false, None) => skald::index::record::LEVEL_FILE,
                    (false, Some(_)) => skald::index::record::LEVEL_PASSAGE,
                },
                span,
            };
            (candidate, dup)
        })
}

/// 0..60 candidates in rank order, some sharing dedup keys.
fn candidates() -> impl Strategy<Value = Vec<Candidate>> {
    vec(candidate(), 0..60).prop_map(|list| {
        list.into_iter()
            .enumerate()
            .map(|(i, (mut c, dup))| {
                c.dedup_key = dup.map_or_else(|| format!("unique-{i}"), |k| format!("shared-{k}"));
                c
            })
            .collect()
    })
}

/// Candidates as real nodes are: each tier's text longer than the one
/// below it (overview at least one token over the abstract, full at least
/// two over both, so the shorter `detail="full"` attribute cannot make
/// it cheaper).
fn candidates_with_increasing_costs() -> impl Strategy<Value = Vec<Candidate>> {
    candidates().prop_map(|list| {
        list.into_iter()
            .map(|mut c| {
                let floor = if c.abstract_text.is_empty() { 0 } else { c.abstract_tokens };
                c.overview_tokens = c.overview_tokens.map(|o| floor + 1 + o);
                c.full_tokens = c.full_tokens.map(|f| floor.max(c.overview_tokens.unwrap_or(0)) + 2 + f);
                c
            })
            .collect()
    })
}

/// `auto`, each pin, or a per-category map (possibly empty).
fn detail() -> impl Strategy<Value = Detail> {
    let tier = prop::sample::select(PINNABLE.to_vec());
    prop_oneof![
        2 => Just(Detail::Auto),
        2 => tier.clone().prop_map(Detail::Pin),
        2 => prop::collection::btree_map(prop::sample::select(CATEGORIES.to_vec()), tier, 0..4)
            .prop_map(Detail::PerCategory),
    ]
}

/// No events share (most requests), or one as purpose presets set it.
fn events_share() -> impl Strategy<Value = Option<f64>> {
    prop::option::weighted(0.25, prop_oneof![0.0f64..=1.0, Just(0.4), Just(0.75)])
}

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

fn view<'a>(c: &'a Candidate, tier: Tier, text: &'a str) -> EntryView<'a> {
    EntryView {
        uri: c.uri.as_str(),
        lines: c.lines(),
        category: c.category.as_str(),
        score: c.score,
        tier,
        text,
        truncated: false,
    }
}

/// The tokens of `c` at `tier` with a body of `body` tokens, marked cut
/// or not.
fn priced_body(c: &Candidate, tier: Tier, body: usize, truncated: bool) -> usize {
    (envelope_quarters(&EntryView { truncated, ..view(c, tier, "") }) + 4 * body).div_ceil(4)
}

/// The floor tier of an automatic entry: a short memory file's body, its
/// abstract, else the shallowest deeper tier with text within its ceiling.
fn floor_tier(c: &Candidate) -> Option<Tier> {
    // A memory file at most `WHOLE_FACTOR` times its abstract: whole (a
    // passage starts at its head like any long text).
    let short = c.full_tokens.is_some_and(|f| f64::from(f) <= plan::WHOLE_FACTOR * f64::from(c.abstract_tokens));
    if plan::ceiling(c) == Tier::Full && c.abstract_tokens > 0 && short && c.span.is_none() {
        return Some(Tier::Full);
    }
    [Tier::Abstract, Tier::Overview, Tier::Full]
        .into_iter()
        .find(|t| *t <= plan::ceiling(c) && planned_body(c, *t).is_some())
}

/// The fewest tokens any text of `c` takes under `detail = auto`: its floor
/// whole, or cut to [`MIN_CUT_TOKENS`] when that is shorter; `None` when
/// it has no text.
fn least_text(c: &Candidate) -> Option<usize> {
    let tier = floor_tier(c)?;
    let body = planned_body(c, tier)?;
    let whole = priced_body(c, tier, body, false);
    Some(if body > MIN_CUT_TOKENS { whole.min(priced_body(c, tier, MIN_CUT_TOKENS, true)) } else { whole })
}

/// The body tokens the planner should price `c` at `tier` with.
fn planned_body(c: &Candidate, tier: Tier) -> Option<usize> {
    match tier {
        Tier::Uri => Some(0),
        Tier::Abstract => (!c.abstract_text.is_empty()).then_some(c.abstract_tokens as usize),
        Tier::Overview => c.overview_tokens.map(|t| t as usize),
        Tier::Full if c.is_directory => None,
        Tier::Full => c.full_tokens.map(|t| t as usize),
    }
}

/// The deepest tier `c` may be planned at under `detail`.
fn limit(c: &Candidate, detail: &Detail) -> Tier {
    match (detail, detail.pin(c.category)) {
        // A per-category pin may lift files (resources, skills) past their ceiling.
        (Detail::PerCategory(_), Some(pin)) if !c.is_directory => pin,
        (_, Some(pin)) => pin.min(plan::ceiling(c)),
        (_, None) => plan::ceiling(c),
    }
}

/// The score as the block must show it: two decimals, 0.00 when not finite.
fn expected_score(score: f64) -> String {
    format!("{:.2}", if score.is_finite() { score } else { 0.0 })
}

/// Quarter tokens of one character once escaped (additive: four copies
/// estimate to exactly its quarters).
fn quarters_of(c: char) -> usize {
    estimate_escaped_tokens(&String::from(c).repeat(4))
}

/// A text whose escaped estimate is exactly `tokens`: `palette`'s
/// characters in turn (from `start`) while they fit, padded with `a`.
fn text_of_tokens(tokens: usize, palette: &[char], start: usize) -> String {
    let budget = tokens * 4;
    let mut used = 0;
    let mut out = String::new();
    if !palette.is_empty() {
        for &c in palette.iter().cycle().skip(start % palette.len()) {
            let q = quarters_of(c);
            if used + q > budget {
                break;
            }
            used += q;
            out.push(c);
        }
    }
    out.extend(std::iter::repeat_n('a', budget - used));
    out
}

fn fail(message: String) -> TestCaseError {
    TestCaseError::fail(message)
}

/// Every property of one plan of `cs` under `request`.
fn check_plan(cs: &[Candidate], request: &PlanRequest<'_>, p: &Plan) -> Result<(), TestCaseError> {
    prop_assert!(p.tokens <= request.max_tokens, "planned {} > max_tokens {}", p.tokens, request.max_tokens);
    // Rank order, each candidate at most once.
    prop_assert!(p.entries.windows(2).all(|w| w[0].candidate < w[1].candidate), "not in candidate order: {p:?}");
    prop_assert!(p.entries.iter().all(|e| e.candidate < cs.len()));
    // Every candidate accounted for; duplicates are exactly the repeated keys.
    prop_assert_eq!(p.entries.len() + p.dropped + p.deduped, cs.len());
    let distinct = cs.iter().map(|c| c.dedup_key.as_str()).collect::<HashSet<_>>().len();
    prop_assert_eq!(p.deduped, cs.len() - distinct);
    let placed_keys: HashSet<&str> = p.entries.iter().map(|e| cs[e.candidate].dedup_key.as_str()).collect();
    prop_assert_eq!(placed_keys.len(), p.entries.len(), "two placed entries share a dedup key");
    prop_assert_eq!(p.per_entry_cap, plan::per_entry_cap(request.max_tokens.max(1), cs.len()));

    for e in &p.entries {
        let c = &cs[e.candidate];
        if request.detail.pin(c.category).is_some() {
            prop_assert_ne!(e.tier, Tier::Uri, "a pinned entry is a bare uri: {:?} {:?}", e, c);
        }
        prop_assert!(
            e.tier <= limit(c, request.detail),
            "{:?} above its limit {:?}: {:?}",
            e,
            limit(c, request.detail),
            c
        );
        // The tier has text, and is priced as its body plus the exact envelope.
        let body = planned_body(c, e.tier);
        prop_assert!(body.is_some(), "{:?} planned at a tier without text: {:?}", e, c);
        let body = body.unwrap_or_default();
        if e.cut {
            // Only an automatic entry's floor is cut, to at least the minimum.
            prop_assert!(request.detail.pin(c.category).is_none(), "a pinned entry is cut: {:?}", e);
            prop_assert_eq!(Some(e.tier), floor_tier(c));
            prop_assert!(MIN_CUT_TOKENS <= e.body_tokens && e.body_tokens < body, "{:?} of {}", e, body);
        } else {
            prop_assert_eq!(e.body_tokens, body);
        }
        prop_assert_eq!(e.tokens, priced_body(c, e.tier, e.body_tokens, e.cut));
    }
    // Bare URIs only in a plan without text (so never above an entry with text).
    if p.entries.iter().any(|e| e.tier == Tier::Uri) {
        prop_assert!(p.entries.iter().all(|e| e.tier == Tier::Uri), "a bare uri beside text: {p:?}");
    }
    if matches!(request.detail, Detail::Pin(_)) {
        prop_assert!(p.entries.iter().all(|e| e.tier != Tier::Uri));
    }
    // The plan's total is its entries plus one token per separator.
    let sum: usize = p.entries.iter().map(|e| e.tokens).sum();
    prop_assert_eq!(p.tokens, sum + p.entries.len().saturating_sub(1));
    // Events stay within their share.
    if let Some(share) = request.events_budget_share {
        let events_max = (request.max_tokens.max(1) as f64 * share.clamp(0.0, 1.0)) as usize;
        let events: usize =
            p.entries.iter().filter(|e| cs[e.candidate].category == Category::Events).map(|e| e.tokens).sum();
        prop_assert!(events <= events_max, "events take {events} > their share {events_max}");
    }
    Ok(())
}

/// The rendered tokens of `c` at `tier` as the planner prices them (body
/// estimate plus the exact envelope), or `None` when it has no such text.
fn priced(c: &Candidate, tier: Tier) -> Option<usize> {
    planned_body(c, tier).map(|body| (envelope_quarters(&view(c, tier, "")) + 4 * body).div_ceil(4))
}

/// The tier a pin places `c` at: its pin within its limit, else the best
/// tier below that has text; `None` when none has.
fn pinned_tier(c: &Candidate, detail: &Detail) -> Option<Tier> {
    let top = limit(c, detail);
    [Tier::Full, Tier::Overview, Tier::Abstract].into_iter().filter(|t| *t <= top).find(|t| priced(c, *t).is_some())
}

/// Whether every tier of `c` that has text costs strictly more than the
/// one below it (as the planner assumes of real nodes). Then an
/// upgrade only ever spends budget, never frees it.
fn costs_increase(c: &Candidate) -> bool {
    let costs: Vec<usize> = [Tier::Uri, Tier::Abstract, Tier::Overview, Tier::Full]
        .into_iter()
        .filter(|t| *t <= plan::ceiling(c))
        .filter_map(|t| priced(c, t))
        .collect();
    costs.windows(2).all(|w| w[0] < w[1])
}

/// How the plan fills the budget:
///
/// - a pinned entry sits at its pin (or the best tier below it with text);
/// - a candidate is dropped only when, at its turn in round 0, it no
///   longer fitted (at its pin, or with its least text): round 0 used at
///   most `fill.floor_tokens`, so it does not fit what that leaves — and,
///   in a plan without text, only when its bare URI does not fit what the
///   plan leaves;
/// - when every candidate's tiers cost strictly more as they deepen (the
///   budget then only shrinks as the plan fills, so what fits the final
///   plan's room fitted all along): an automatic entry is a bare `uri`
///   only when no text of it fits, a cut one only when its whole text does
///   not fit, and none is left below a deeper tier (within its ceiling)
///   that fits.
fn check_fill(cs: &[Candidate], request: &PlanRequest<'_>, p: &Plan) -> Result<(), TestCaseError> {
    let max = request.max_tokens.max(1);
    let events_max = request.events_budget_share.map(|s| (max as f64 * s.clamp(0.0, 1.0)) as usize);
    let placed: HashSet<usize> = p.entries.iter().map(|e| e.candidate).collect();
    let no_text = p.entries.iter().all(|e| e.tier == Tier::Uri);
    let mut seen: HashSet<&str> = HashSet::new();
    for (i, c) in cs.iter().enumerate() {
        if !seen.insert(c.dedup_key.as_str()) || placed.contains(&i) {
            continue;
        }
        if events_max.is_some() && c.category == Category::Events {
            continue; // Its share's use in round 0 is not reported.
        }
        let pinned = request.detail.pin(c.category).is_some();
        let mut fits = vec![];
        if pinned {
            fits.push((
                pinned_tier(c, request.detail).and_then(|t| priced(c, t)),
                max.saturating_sub(p.fill.floor_tokens),
            ));
        } else {
            fits.push((least_text(c), max.saturating_sub(p.fill.floor_tokens)));
            if no_text {
                fits.push((priced(c, Tier::Uri), max.saturating_sub(p.tokens)));
            }
        }
        for (cost, left) in fits {
            if let Some(cost) = cost {
                prop_assert!(
                    cost + 1 > left,
                    "candidate {} dropped although {} tokens and a separator fit the {} tokens left: {:?}",
                    i,
                    cost,
                    left,
                    p
                );
            }
        }
    }
    for e in &p.entries {
        let c = &cs[e.candidate];
        if request.detail.pin(c.category).is_some() {
            prop_assert_eq!(Some(e.tier), pinned_tier(c, request.detail), "pinned entry off its pin: {:?} {:?}", e, c);
        }
    }
    if !cs.iter().all(costs_increase) {
        return Ok(());
    }
    let left = max.saturating_sub(p.tokens);
    let events_used: usize = p
        .entries
        .iter()
        .enumerate()
        .filter(|(_, e)| cs[e.candidate].category == Category::Events)
        .map(|(slot, e)| e.tokens + usize::from(slot > 0))
        .sum();
    let room = |c: &Candidate| match events_max {
        Some(m) if c.category == Category::Events => left.min(m.saturating_sub(events_used)),
        _ => left,
    };
    for e in p.entries.iter().filter(|e| request.detail.pin(cs[e.candidate].category).is_none()) {
        let c = &cs[e.candidate];
        if e.tier == Tier::Uri
            && let Some(text) = least_text(c)
        {
            prop_assert!(text > e.tokens + room(c), "{:?} bare although {} tokens of text fit: {:?}", e, text, c);
        }
        if e.cut {
            let whole = priced(c, e.tier).unwrap_or(0);
            prop_assert!(whole > e.tokens + room(c), "{:?} cut although its whole text ({}) fits", e, whole);
        }
        for deeper in [Tier::Abstract, Tier::Overview, Tier::Full] {
            if deeper <= e.tier || deeper > plan::ceiling(c) {
                continue;
            }
            let Some(cost) = priced(c, deeper) else { continue };
            prop_assert!(
                cost > e.tokens + room(c),
                "{:?} left at {:?} ({} tokens) although {:?} ({} tokens) fits the {} tokens left of {}: {:?}",
                e.candidate,
                e.tier,
                e.tokens,
                deeper,
                cost,
                room(c),
                max,
                c
            );
        }
    }
    Ok(())
}

/// The text a read of `planned` yields when the object's text is `text`:
/// cut to the planned size (and marked when shorter than `text`, leaving
/// room for the mark when the plan did not price a cut); nothing
/// left falls back to the abstract (if it fits the planned body) or a bare
/// URI — as `assemble::read` does.
fn as_read(c: &Candidate, planned: &Planned, text: &str) -> (Tier, String, bool) {
    // A cut the plan did not price makes room for its mark.
    let fits = estimate_escaped_tokens(text) <= planned.body_tokens;
    let room = if planned.cut || fits {
        planned.body_tokens
    } else {
        planned.body_tokens.saturating_sub(render::TRUNCATED_MARK_TOKENS)
    };
    let fitted = truncate_to_escaped_tokens(text, room);
    if !fitted.is_empty() {
        (planned.tier, fitted.to_owned(), fitted.len() < text.len())
    } else if !c.abstract_text.is_empty() && estimate_escaped_tokens(&c.abstract_text) <= planned.body_tokens {
        (Tier::Abstract, c.abstract_text.clone(), false)
    } else {
        (Tier::Uri, String::new(), false)
    }
}

// ---------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(config())]

    /// The planner's invariants hold for any candidates, budget and detail.
    #[test]
    fn plans_respect_budget_order_ceilings_and_tiers(
        cs in candidates(),
        max_tokens in 64usize..4000,
        detail in detail(),
        share in events_share(),
    ) {
        let request = PlanRequest { max_tokens, detail: &detail, events_budget_share: share };
        let p = plan::plan(&cs, &request);
        check_plan(&cs, &request, &p)?;
        // Pure: the same input gives the same plan.
        prop_assert_eq!(&plan::plan(&cs, &request), &p);
    }

    /// The plan fills as the contract says: pins are exact, nothing is
    /// dropped that fitted, a bare URI only when nothing else fits, nothing
    /// left shallower than a tier that would still fit.
    #[test]
    fn plans_fill_the_budget_as_the_contract_says(
        cs in prop_oneof![candidates(), candidates_with_increasing_costs()],
        max_tokens in 64usize..4000,
        detail in detail(),
        share in events_share(),
    ) {
        let request = PlanRequest { max_tokens, detail: &detail, events_budget_share: share };
        let p = plan::plan(&cs, &request);
        check_fill(&cs, &request, &p)?;
    }

    /// Any entries render to well-formed XML that parses back to exactly
    /// those entries, and each element costs no more than the planner
    /// assumes.
    #[test]
    fn rendered_blocks_parse_back_to_their_entries(
        entries in vec(
            (
                any::<bool>().prop_flat_map(uri),
                prop::sample::select(CATEGORIES.to_vec()),
                score(),
                prop::sample::select(vec![Tier::Uri, Tier::Abstract, Tier::Overview, Tier::Full]),
                body_text(),
                any::<bool>(),
                prop::option::weighted(0.3, (1u32..5000, 0u32..80)),
            ),
            0..12,
        ),
    ) {
        let views: Vec<EntryView<'_>> = entries
            .iter()
            .map(|(uri, category, score, tier, text, truncated, lines)| EntryView {
                lines: lines.map(|(first, more)| (first, first + more)),
                uri: uri.as_str(),
                category: category.as_str(),
                score: *score,
                tier: *tier,
                text,
                truncated: *truncated,
            })
            .collect();
        let rendered = render::render(&views);
        let bad: Vec<char> = rendered.chars().filter(|c| !is_xml_char(*c)).collect();
        prop_assert!(bad.is_empty(), "characters XML 1.0 cannot hold: {bad:?} in {rendered:?}");
        let parsed = parse_block(&rendered).map_err(|e| fail(format!("{e}\nrendered: {rendered:?}")))?;
        prop_assert_eq!(parsed.len(), views.len(), "rendered: {:?}", rendered);
        for (p, v) in parsed.iter().zip(&views) {
            prop_assert_eq!(&p.uri, v.uri);
            prop_assert_eq!(&p.lines, &v.lines.map(|(first, last)| format!("{first}-{last}")));
            prop_assert_eq!(&p.category, v.category);
            prop_assert_eq!(&p.score, &expected_score(v.score));
            let (whole, decimals) = p.score.split_once('.').unwrap_or((&p.score, ""));
            prop_assert!(decimals.len() == 2 && decimals.bytes().all(|b| b.is_ascii_digit()), "score {}", p.score);
            prop_assert!(!whole.is_empty());
            prop_assert_eq!(&p.detail, v.tier.as_str());
            prop_assert_eq!(p.truncated, v.truncated && v.tier != Tier::Uri);
            let want = (v.tier != Tier::Uri).then(|| format!("\n{}\n", xml_safe(v.text)));
            prop_assert_eq!(&p.text, &want, "rendered: {:?}", rendered);
        }
        // The planner's cost model bounds every element, and the block.
        let mut bound = views.len().saturating_sub(1);
        for v in &views {
            let one = render::render(std::slice::from_ref(v));
            let body = if v.tier == Tier::Uri { 0 } else { estimate_escaped_tokens(v.text) };
            let priced = (envelope_quarters(v) + 4 * body).div_ceil(4);
            prop_assert!(estimate_tokens(&one) <= priced, "{} > {} for {:?}", estimate_tokens(&one), priced, one);
            bound += priced;
        }
        prop_assert!(estimate_tokens(&rendered) <= bound);
    }

    /// Plan, read (texts of exactly the planned sizes, or larger ones cut
    /// as reads cut them), render: the block fits the plan and the budget,
    /// and every placed entry is there with its URI.
    #[test]
    fn planned_reads_render_within_the_budget(
        cs in candidates(),
        max_tokens in 64usize..4000,
        detail in detail(),
        share in events_share(),
        palette in vec(hostile_char(), 0..48),
        oversize in vec(prop::option::weighted(0.3, 1usize..80), 60),
    ) {
        let request = PlanRequest { max_tokens, detail: &detail, events_budget_share: share };
        let p = plan::plan(&cs, &request);
        check_plan(&cs, &request, &p)?;
        let reads: Vec<(Tier, String, bool)> = p
            .entries
            .iter()
            .enumerate()
            .map(|(k, e)| {
                let c = &cs[e.candidate];
                match e.tier {
                    Tier::Uri => (Tier::Uri, String::new(), false),
                    // A cut abstract is its prefix within the planned body.
                    Tier::Abstract => as_read(c, e, &c.abstract_text),
                    Tier::Overview | Tier::Full => {
                        let extra = oversize.get(k).copied().flatten().unwrap_or(0);
                        let text = text_of_tokens(e.body_tokens + extra, &palette, k);
                        assert_eq!(estimate_escaped_tokens(&text), e.body_tokens + extra, "generator: {text:?}");
                        as_read(c, e, &text)
                    }
                }
            })
            .collect();
        // A read never comes back deeper or longer than planned; a cut
        // abstract is a marked prefix of the abstract.
        for ((tier, text, truncated), e) in reads.iter().zip(&p.entries) {
            prop_assert!(*tier <= e.tier);
            prop_assert!(estimate_escaped_tokens(text) <= e.body_tokens || *tier == Tier::Uri);
            if e.tier == Tier::Abstract {
                let whole = &cs[e.candidate].abstract_text;
                prop_assert!(whole.starts_with(text.as_str()));
                prop_assert_eq!(*truncated, e.cut && text.len() < whole.len(), "{:?}", e);
            }
        }
        let views: Vec<EntryView<'_>> = reads
            .iter()
            .zip(&p.entries)
            .map(|((tier, text, truncated), e)| EntryView { truncated: *truncated, ..view(&cs[e.candidate], *tier, text) })
            .collect();
        let rendered = render::render(&views);
        let used = estimate_tokens(&rendered);
        prop_assert!(used <= p.tokens, "rendered {} > planned {}", used, p.tokens);
        prop_assert!(used <= max_tokens, "rendered {} > max_tokens {}", used, max_tokens);
        let parsed = parse_block(&rendered).map_err(|e| fail(format!("{e}\nrendered: {rendered:?}")))?;
        let uris: Vec<&str> = parsed.iter().map(|e| e.uri.as_str()).collect();
        let want: Vec<&str> = p.entries.iter().map(|e| cs[e.candidate].uri.as_str()).collect();
        prop_assert_eq!(uris, want);
        let marked: Vec<bool> = parsed.iter().map(|e| e.truncated).collect();
        let cut: Vec<bool> = views.iter().map(|v| v.truncated && v.tier != Tier::Uri).collect();
        prop_assert_eq!(marked, cut);
    }

    /// With texts of exactly the planned sizes, every read keeps its tier
    /// and its whole text.
    #[test]
    fn exact_size_reads_are_kept_whole(
        cs in candidates(),
        max_tokens in 64usize..4000,
        detail in detail(),
        palette in vec(text_char(), 0..48),
    ) {
        let request = PlanRequest { max_tokens, detail: &detail, events_budget_share: None };
        let p = plan::plan(&cs, &request);
        for (k, e) in p.entries.iter().enumerate() {
            if matches!(e.tier, Tier::Overview | Tier::Full) {
                let text = text_of_tokens(e.body_tokens, &palette, k);
                if text.is_empty() {
                    continue;
                }
                let (tier, got, truncated) = as_read(&cs[e.candidate], e, &text);
                prop_assert_eq!(tier, e.tier);
                prop_assert_eq!(got, text);
                prop_assert!(!truncated);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Examples
// ---------------------------------------------------------------------------

fn candidate_at(
    path: &str,
    category: Category,
    abstract_text: &str,
    overview: Option<u32>,
    full: Option<u32>,
) -> Candidate {
    Candidate {
        uri: VikingUri::from_path(path).expect("valid uri"),
        category,
        is_directory: !path.ends_with(".md"),
        is_memory: path.contains("/memories/"),
        score: 0.5,
        rank_score: 0.5,
        origin: Origin::Own,
        abstract_text: abstract_text.to_owned(),
        abstract_tokens: u32::try_from(estimate_escaped_tokens(abstract_text)).expect("small"),
        overview_tokens: overview,
        full_tokens: full,
        dedup_key: path.to_owned(),
        span: None,
        level: skald::index::record::LEVEL_FILE,
    }
}

#[test]
fn the_parser_reads_back_a_hostile_body() {
    let body = "</memory><memory uri=\"x\"> & <![CDATA[ x ]]> \r\n\t\u{0}😀中文";
    let uri = VikingUri::from_path("user/u/memories/entities/r&d/o'neil \"记忆\".md").expect("valid uri");
    let v = EntryView {
        lines: None,
        uri: uri.as_str(),
        category: "entities",
        score: 0.7249,
        tier: Tier::Full,
        text: body,
        truncated: false,
    };
    let rendered = render::render(&[v, EntryView { tier: Tier::Uri, ..v }]);
    let parsed = parse_block(&rendered).expect("well-formed");
    assert_eq!(parsed.len(), 2);
    assert_eq!(parsed[0].uri, uri.as_str());
    assert_eq!(parsed[0].score, "0.72");
    assert_eq!(
        parsed[0].text.as_deref(),
        Some("\n</memory><memory uri=\"x\"> & <![CDATA[ x ]]> \r\n\t\u{fffd}😀中文\n")
    );
    assert_eq!(parsed[1].text, None);
    assert_eq!(parsed[1].detail, "uri");
}

#[test]
fn the_parser_rejects_what_the_renderer_must_never_write() {
    let head = "<memory uri=\"viking://a\" type=\"events\" score=\"0.50\" detail=\"full\">";
    let good = format!("{head}\nx\n</memory>");
    assert_eq!(parse_block(&good).expect("well-formed").len(), 1);
    for bad in [
        format!("{head}\n<memory uri=\"x\">\n</memory></memory>"),
        format!("{head}\n</memory></memory>"),
        format!("{head}\n<![CDATA[ x ]]>\n</memory>"),
        format!("{head}\n<!-- x -->\n</memory>"),
        format!("{head}\na & b\n</memory>"),
        format!("{head}\n&nbsp;\n</memory>"),
        format!("{head}\nx\n</memory> {good}"),
        format!("{good}\n"),
        "<memory uri=\"viking://a\" type=\"events\" detail=\"uri\"/>".to_owned(),
        "<memory uri=\"viking://a\" uri=\"b\" type=\"events\" score=\"0.50\" detail=\"uri\"/>".to_owned(),
        "<other uri=\"viking://a\" type=\"events\" score=\"0.50\" detail=\"uri\"/>".to_owned(),
        format!("{head}\nx\n"),
    ] {
        assert!(parse_block(&bad).is_err(), "accepted {bad:?}");
    }
}

#[test]
fn the_generated_texts_have_exactly_the_asked_size() {
    let palette = ['<', '中', '😀', '\r', '&', 'x', '\u{0}'];
    for tokens in [0, 1, 2, 3, 7, 50, 333] {
        for start in 0..palette.len() {
            assert_eq!(estimate_escaped_tokens(&text_of_tokens(tokens, &palette, start)), tokens);
        }
    }
}

#[test]
fn a_tight_auto_plan_keeps_texts_and_a_pinned_plan_drops_instead() {
    let cs: Vec<Candidate> = (0..12)
        .map(|i| {
            candidate_at(
                &format!("user/u/memories/events/2026/01/{i:02}/e.md"),
                Category::Events,
                "An event abstract that is long enough to cost tokens.",
                Some(40),
                Some(200),
            )
        })
        .collect();
    let auto = plan::plan(&cs, &PlanRequest { max_tokens: 120, detail: &Detail::Auto, events_budget_share: None });
    // Two entries with text (the best deepened with what was left) beat
    // more entries without.
    assert_eq!(
        auto.entries.iter().map(|e| (e.candidate, e.tier)).collect::<Vec<_>>(),
        [(0, Tier::Overview), (1, Tier::Abstract)]
    );
    assert!(auto.tokens <= 120);
    let pin = Detail::Pin(Tier::Abstract);
    let pinned = plan::plan(&cs, &PlanRequest { max_tokens: 120, detail: &pin, events_budget_share: None });
    assert!(pinned.entries.iter().all(|e| e.tier == Tier::Abstract), "{pinned:?}");
    assert!(pinned.dropped > 0);
    assert!(pinned.tokens <= 120);
}

// Minimal cases of what `plans_fill_the_budget_as_the_contract_says` and
// the render round trip check, each named for the contract rule it holds
// the library to.

/// The planner's rule: `uri` "is the state of an entry that fits at no
/// other tier". An entry without an abstract (a directory whose
/// `.abstract.md` is empty but whose `.overview.md` is not; a memory whose
/// abstract is empty) must still reach a tier that fits.
#[test]
fn an_entry_without_an_abstract_still_reaches_a_tier_that_fits() {
    let cs = [
        candidate_at("resources/docs", Category::Resources, "", Some(30), None),
        candidate_at("user/u/memories/events/2026/01/01/a.md", Category::Events, "", None, Some(50)),
    ];
    let p = plan::plan(&cs, &PlanRequest { max_tokens: 1600, detail: &Detail::Auto, events_budget_share: None });
    let tiers: Vec<(usize, Tier)> = p.entries.iter().map(|e| (e.candidate, e.tier)).collect();
    assert_eq!(tiers, [(0, Tier::Overview), (1, Tier::Full)], "{p:?}");
}

/// The planner's rule: round 0 puts every entry at `abstract`, and `uri`
/// is only for an entry that fits at no other tier. A 400-byte CJK
/// abstract (200 tokens, the most ingest writes) among 21 candidates is
/// over the per-entry cap (1600 / 21 * 2 = 152) but fits the budget many
/// times over; it must not be left a bare URI.
#[test]
fn a_long_abstract_among_many_candidates_is_shown_while_the_budget_has_room() {
    let mut cs: Vec<Candidate> = (0..20)
        .map(|i| {
            candidate_at(
                &format!("user/u/memories/entities/e{i}.md"),
                Category::Entities,
                "A short abstract.",
                None,
                None,
            )
        })
        .collect();
    cs.insert(3, candidate_at("user/u/memories/entities/long.md", Category::Entities, &"检".repeat(133), None, None));
    assert_abstract_shown(&cs, 3, 1600);
}

/// As above with fewer candidates: ten at 600 tokens, one whose abstract
/// is 100 CJK characters (150 tokens, 300 bytes; its element 179).
/// That is over the per-entry cap (120) and over a quarter of the budget
/// (150), but the other nine leave room for it; it must not be left a bare
/// URI.
#[test]
fn an_abstract_over_a_quarter_of_the_budget_is_shown_while_the_budget_has_room() {
    let mut cs: Vec<Candidate> = (0..9)
        .map(|i| candidate_at(&format!("user/u/memories/entities/e{i}.md"), Category::Entities, "Short.", None, None))
        .collect();
    cs.insert(0, candidate_at("user/u/memories/entities/long.md", Category::Entities, &"检".repeat(100), None, None));
    assert_abstract_shown(&cs, 0, 600);
}

/// Plans `cs` into `max_tokens` (auto) and checks that candidate `at`,
/// whose abstract fits what the plan leaves, is shown at its abstract.
fn assert_abstract_shown(cs: &[Candidate], at: usize, max_tokens: usize) {
    let p = plan::plan(cs, &PlanRequest { max_tokens, detail: &Detail::Auto, events_budget_share: None });
    let entry = p.entries.iter().find(|e| e.candidate == at).expect("placed");
    let abstract_cost = priced(&cs[at], Tier::Abstract).expect("has an abstract");
    assert!(p.tokens - entry.tokens + abstract_cost <= max_tokens, "the abstract would not fit: {p:?}");
    assert_eq!(
        entry.tier,
        Tier::Abstract,
        "a {abstract_cost}-token abstract left a bare uri with {} of {max_tokens} tokens planned: {p:?}",
        p.tokens
    );
}

/// The block is well-formed XML and a parser recovers
/// every entry's URI exactly. `VikingUri` accepts U+FFFE and U+FFFF (they
/// are not control characters), which XML 1.0 cannot hold: either the URI
/// is rejected, or it must still render as well-formed XML.
#[test]
fn every_uri_the_library_accepts_renders_as_well_formed_xml() {
    for path in ["resources/a\u{ffff}b.md", "resources/\u{fffe}/c.md"] {
        let Ok(uri) = VikingUri::from_path(path) else { continue };
        for tier in [Tier::Uri, Tier::Abstract] {
            let v = EntryView {
                lines: None,
                uri: uri.as_str(),
                category: "resources",
                score: 0.5,
                tier,
                text: "body",
                truncated: false,
            };
            let rendered = render::render(&[v]);
            let bad: Vec<char> = rendered.chars().filter(|c| !is_xml_char(*c)).collect();
            assert!(bad.is_empty(), "{uri:?} renders characters XML 1.0 cannot hold {bad:?}: {rendered:?}");
            let parsed = parse_block(&rendered).expect("well-formed");
            assert_eq!(parsed[0].uri, uri.as_str());
        }
    }
}
