//! Neighbours: the piece after a hit joins the candidates. An answer
//! often comes right after the words a question matches — the reply after
//! "what does she do?", the paragraph under the heading that names the
//! topic — so each candidate's next piece (the next episode of its
//! conversation, the next passage of its file) ranks at a share of the
//! candidate's score ([`NEXT_EPISODE_SHARE`], [`NEXT_PASSAGE_SHARE`]),
//! unless it ranks higher on its own. The planner then places it like any
//! candidate, within the budget. Pure: the caller looks the nodes up.

use std::collections::HashMap;

use super::candidate::Candidate;
use crate::index::Record;
use crate::index::record::{LEVEL_FILE, LEVEL_PASSAGE, Level};
use crate::uri::VikingUri;

/// The share of an episode's scores the next episode ranks at: 0.95, so
/// it comes right after its episode and above what ranks a little lower.
/// On the conversational evaluation (`BENCHMARKS.md`) this held the whole
/// answer in the 1600-token block for 3.4 more questions in 100 (0.90:
/// 2.4, 0.99: 2.0, 1.0: 1.0): the reply to "what does she do?" is often
/// the episode after the question.
pub const NEXT_EPISODE_SHARE: f64 = 0.95;

/// The share of a passage's scores the next passage ranks at: 0.85, below
/// the passage's near rivals, so it joins when the budget allows. On the
/// retrieval set's long documents (`BENCHMARKS.md`) a higher share cost
/// other relevant files their place (0.95: relevant in the 1600 block
/// 93.2 % → 92.8 % in English, multi-answer 75.8 % → 72.2 %); 0.85 costs
/// nothing there and lifts the block's precision.
pub const NEXT_PASSAGE_SHARE: f64 = 0.85;

/// The share of `candidate`'s scores its next piece ranks at.
fn share(candidate: &Candidate) -> f64 {
    if candidate.level >= LEVEL_PASSAGE { NEXT_PASSAGE_SHARE } else { NEXT_EPISODE_SHARE }
}

/// The nodes that may follow `candidate`: its file's next passage, or the
/// next episode of its conversation
/// ([`crate::memory::episodes::next_uris`]). Empty for anything else.
#[must_use]
pub fn next_nodes(candidate: &Candidate) -> Vec<(VikingUri, Level)> {
    if candidate.level >= LEVEL_PASSAGE {
        return candidate.level.checked_add(1).map(|level| (candidate.uri.clone(), level)).into_iter().collect();
    }
    if candidate.level != LEVEL_FILE || !candidate.is_memory {
        return Vec::new();
    }
    crate::memory::episodes::next_uris(candidate.uri.as_str())
        .iter()
        .filter_map(|uri| VikingUri::parse(uri).ok())
        .map(|uri| (uri, LEVEL_FILE))
        .collect()
}

/// Joins the next pieces `found` (records the caller looked up from
/// [`next_nodes`] of `candidates`, already filtered like the search) to
/// `candidates`: each at its share of the candidate it follows,
/// with that candidate's origin and bucket; one already there keeps the
/// better of its rank and this one. The order is the caller's to restore.
pub fn join(candidates: &mut Vec<Candidate>, found: &[Record]) {
    if found.is_empty() {
        return;
    }
    let by_node: HashMap<(&VikingUri, Level), &Record> = found.iter().map(|r| (&r.uri, r.level)).zip(found).collect();
    let mut next: Vec<Candidate> = Vec::new();
    for candidate in candidates.iter() {
        for (uri, level) in next_nodes(candidate) {
            let Some(record) = by_node.get(&(&uri, level)) else { continue };
            next.push(Candidate::from_record(
                record,
                candidate.score * share(candidate),
                candidate.rank_score * share(candidate),
                candidate.origin,
                candidate.category,
            ));
        }
    }
    for piece in next {
        match candidates.iter_mut().find(|c| c.key() == piece.key()) {
            Some(there) if there.rank_score < piece.rank_score => *there = piece,
            Some(_) => {}
            None => candidates.push(piece),
        }
    }
}

/// The share of its best adjacent hit's rank score an episode gains when
/// the exchange before or after it is a candidate too: 0.05 (0.03 from a
/// neighbour at 0.65). A conversation dwells on a topic for a few turns,
/// so a hit whose neighbour matches too is more likely the one asked
/// about than a lone one that scores the same. On the conversational
/// evaluation (`BENCHMARKS.md`) the answer in the 400-token block rose
/// from 59.8% to 60.7% and in the 1600-token block from 84.1% to 84.2%;
/// 0.02 gave 60.6% and 84.3%, 0.1 lost (57.5%, 82.4%), and two or three
/// exchanges either side gained less in a replay of the top 40 hits.
pub const ADJACENT_EPISODE_SHARE: f64 = 0.05;

/// Raises each episode among `candidates` by [`ADJACENT_EPISODE_SHARE`]
/// of the better rank score of the episodes just before and after it in
/// its archive, when either is a candidate (scores as they were before
/// any raise; `score`, what the block shows, is left as it is). Other
/// candidates are unchanged. The order is the caller's to restore.
///
/// Cost: one URI parse per candidate and a hash map of the episodes.
pub fn cohere(candidates: &mut [Candidate]) {
    let places: Vec<Option<(&str, &str, usize)>> = candidates
        .iter()
        .map(|c| {
            (c.level == LEVEL_FILE && c.is_memory)
                .then(|| crate::memory::episodes::Place::of(c.uri.as_str()))
                .flatten()
                .map(|p| (p.tree, p.archive, p.number))
        })
        .collect();
    let mut best: HashMap<(&str, &str, usize), f64> = HashMap::new();
    for (place, c) in places.iter().zip(candidates.iter()) {
        if let Some(place) = place {
            best.entry(*place).and_modify(|s| *s = s.max(c.rank_score)).or_insert(c.rank_score);
        }
    }
    let raises: Vec<f64> = places
        .iter()
        .map(|place| {
            let Some((tree, archive, number)) = *place else { return 0.0 };
            [number.checked_sub(1), number.checked_add(1)]
                .into_iter()
                .flatten()
                .filter_map(|n| best.get(&(tree, archive, n)).copied())
                .reduce(f64::max)
                .map_or(0.0, |s| ADJACENT_EPISODE_SHARE * s.max(0.0))
        })
        .collect();
    for (c, raise) in candidates.iter_mut().zip(raises) {
        c.rank_score += raise;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assemble::candidate::Origin;
    use crate::index::record::Span;
    use crate::index::{Category, ContextType};

    fn record(path: &str, level: Level) -> Record {
        let memory = path.contains("/memories/");
        Record {
            uri: VikingUri::from_path(path).expect("uri"),
            level,
            context_type: if memory { ContextType::Memory } else { ContextType::Resource },
            category: if memory { Category::Events } else { Category::Resources },
            abstract_text: String::new(),
            abstract_tokens: 0,
            overview_tokens: None,
            full_tokens: Some(10),
            size: 0,
            created_at: 0,
            updated_at: 0,
            tags: vec![],
            owner_user_id: None,
            source_hash: path.to_owned(),
            source_version: None,
            terms: String::new(),
            passages: 0,
            span: (level >= LEVEL_PASSAGE).then_some(Span {
                start: u32::from(level) * 10,
                end: u32::from(level) * 10 + 5,
                first_line: 1,
                last_line: 1,
            }),
        }
    }

    fn candidate(path: &str, level: Level, score: f64) -> Candidate {
        Candidate::from_record(&record(path, level), score, score, Origin::Own, Category::Events)
    }

    const E: &str = "user/u/memories/events/2026/07/14";

    #[test]
    fn the_next_episode_and_the_next_passage_join_below_their_candidate() {
        let mut candidates = vec![
            candidate(&format!("{E}/chat-001-04.md"), LEVEL_FILE, 0.80),
            candidate("user/u/resources/guide.md", LEVEL_PASSAGE + 2, 0.70),
            // Already a candidate, ranked lower than its share: raised.
            candidate(&format!("{E}/chat-001-09.md"), LEVEL_FILE, 0.50),
            candidate(&format!("{E}/chat-001-08.md"), LEVEL_FILE, 0.60),
        ];
        let found = [
            record(&format!("{E}/chat-001-05.md"), LEVEL_FILE),
            record("user/u/resources/guide.md", LEVEL_PASSAGE + 3),
            record(&format!("{E}/chat-001-09.md"), LEVEL_FILE),
            // Nobody's next: ignored.
            record(&format!("{E}/chat-001-20.md"), LEVEL_FILE),
        ];
        join(&mut candidates, &found);
        let got: Vec<(String, Level, String)> = candidates
            .iter()
            .map(|c| (c.uri.file_name().unwrap_or_default().to_owned(), c.level, format!("{:.3}", c.rank_score)))
            .collect();
        let want = [
            ("chat-001-04.md", LEVEL_FILE, "0.800"),
            ("guide.md", LEVEL_PASSAGE + 2, "0.700"),
            ("chat-001-09.md", LEVEL_FILE, "0.570"),
            ("chat-001-08.md", LEVEL_FILE, "0.600"),
            ("chat-001-05.md", LEVEL_FILE, "0.760"),
            ("guide.md", LEVEL_PASSAGE + 3, "0.595"),
        ];
        let want: Vec<(String, Level, String)> =
            want.iter().map(|(n, l, s)| ((*n).to_owned(), *l, (*s).to_owned())).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn an_episode_whose_neighbour_is_a_hit_too_rises() {
        let mut candidates = vec![
            candidate(&format!("{E}/chat-001-04.md"), LEVEL_FILE, 0.60),
            // 04's neighbour: 04 gains 0.05 × 0.70, 05 gains 0.05 × 0.60.
            candidate(&format!("{E}/chat-001-05.md"), LEVEL_FILE, 0.70),
            // Beside 06 (below): gains 0.05 × 0.50.
            candidate(&format!("{E}/chat-001-07.md"), LEVEL_FILE, 0.62),
            // Another archive, another tree: alone.
            candidate(&format!("{E}/chat-002-03.md"), LEVEL_FILE, 0.62),
            candidate("user/v/memories/events/2026/07/14/chat-001-06.md", LEVEL_FILE, 0.62),
            // Not episodes: unchanged.
            candidate("user/u/resources/guide.md", LEVEL_PASSAGE, 0.65),
            candidate("user/u/memories/preferences/food.md", LEVEL_FILE, 0.64),
        ];
        // An exchange that crossed midnight is still 05's and 07's
        // neighbour, and gains from the better (0.05 × 0.70).
        candidates.push(candidate("user/u/memories/events/2026/07/15/chat-001-06.md", LEVEL_FILE, 0.50));
        cohere(&mut candidates);
        let got: Vec<String> = candidates.iter().map(|c| format!("{:.3}/{:.2}", c.rank_score, c.score)).collect();
        let want = [
            "0.635/0.60",
            "0.730/0.70",
            "0.645/0.62",
            "0.620/0.62",
            "0.620/0.62",
            "0.650/0.65",
            "0.640/0.64",
            "0.535/0.50",
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn only_passages_and_episodes_have_a_next_piece() {
        let rows: &[(&str, Level, &[&str])] = &[
            (
                &format!("{E}/chat-001-04.md"),
                LEVEL_FILE,
                &[
                    "viking://user/u/memories/events/2026/07/14/chat-001-05.md",
                    "viking://user/u/memories/events/2026/07/15/chat-001-05.md",
                ],
            ),
            ("user/u/resources/guide.md", LEVEL_PASSAGE, &["viking://user/u/resources/guide.md"]),
            ("user/u/resources/guide.md", LEVEL_FILE, &[]),
            ("user/u/memories/preferences/food.md", LEVEL_FILE, &[]),
            ("user/u/memories/events", 0, &[]),
        ];
        for (path, level, want) in rows {
            let got: Vec<String> =
                next_nodes(&candidate(path, *level, 0.5)).iter().map(|(u, _)| u.to_string()).collect();
            assert_eq!(got, *want, "{path} {level}");
        }
    }
}
