//! The digest rewrite: one bounded call over
//! the rendered block (plus, with a session, a capped slice of its
//! context) that condenses it into cited bullets. The prompt and
//! [`normalize_digest`] are pure; only [`rewrite`] calls the model.
//!
//! A kept bullet starts with `- `, is at most [`MAX_BULLET_CHARS`]
//! characters, and cites only URIs of entries that were served.

use std::collections::HashSet;
use std::ops::Range;
use std::time::Duration;

use super::expansion::SessionContext;
use super::{ChatModel, ChatRequest, Usage, cut_chars};

/// The digest's first line.
pub const DIGEST_HEADER: &str = "Memory digest:";
/// Characters per bullet.
pub const MAX_BULLET_CHARS: usize = 500;
/// Characters of session context the prompt may carry.
pub const SESSION_SLICE_CHARS: usize = 2_000;
/// What the model answers when nothing is relevant.
pub const NO_RELEVANT: &str = "NO_RELEVANT_MEMORY";
/// Stands in for a `viking://` URI of the session context that was not
/// served, so the model cannot cite it.
const OMITTED_URI: &str = "[uri not served]";

/// What the model is told. The first words identify the stage.
pub const SYSTEM: &str = "You condense retrieved memory into a short digest for an AI assistant. \
Do not use tools. Keep only facts from the fragments that help with the user's query; never restate \
the query, never give advice, never add facts the fragments do not state. \
Each bullet starts with \"- \" and ends with \"source: <uri>\", the uri copied exactly from the uri \
attribute of the fragment the fact comes from. Write in the language of the user's query. \
If no fragment is relevant to the query, answer exactly NO_RELEVANT_MEMORY.";

/// `stats.rewrite`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RewriteStatus {
    /// Not asked for (or `"auto"` without a query planner configured).
    Off,
    /// A digest with at least one cited bullet.
    Ok,
    /// The model found nothing relevant: `rendered` and `digest` are empty.
    NoRelevant,
    /// The call failed, or no bullet survived normalisation.
    Failed,
    /// No time was left, or the call ran out of it.
    Timeout,
    /// There was nothing to rewrite (no entries, or rendering was off).
    Empty,
}

impl RewriteStatus {
    /// `off`, `ok`, `no_relevant`, `failed`, `timeout` or `empty`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Ok => "ok",
            Self::NoRelevant => "no_relevant",
            Self::Failed => "failed",
            Self::Timeout => "timeout",
            Self::Empty => "empty",
        }
    }
}

/// As its wire name ([`RewriteStatus::as_str`]).
impl serde::Serialize for RewriteStatus {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// What the stage produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewritten {
    /// The status.
    pub status: RewriteStatus,
    /// The digest (empty unless `Ok`).
    pub digest: String,
    /// The model's usage, when it answered and reported it.
    pub usage: Option<Usage>,
    /// Why it failed or timed out.
    pub error: Option<String>,
}

impl Rewritten {
    /// A result with no digest and no usage.
    #[must_use]
    pub fn without_digest(status: RewriteStatus, error: Option<String>) -> Self {
        Self { status, digest: String::new(), usage: None, error }
    }
}

/// What [`normalize_digest`] made of an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Digest {
    /// [`DIGEST_HEADER`] and the kept bullets, one per line.
    Bullets(String),
    /// The answer was [`NO_RELEVANT`].
    NoRelevant,
    /// No bullet survived.
    Nothing,
}

/// The `viking://` URIs a line cites: each runs to whitespace or a
/// delimiter, without trailing punctuation or `/`.
#[must_use]
pub fn cited_uris(line: &str) -> Vec<&str> {
    uri_spans(line).into_iter().map(|span| &line[span]).collect()
}

/// Where [`cited_uris`] finds each URI in `text` (byte ranges).
fn uri_spans(text: &str) -> Vec<Range<usize>> {
    const STOP: &[char] = &['<', '>', '"', '\'', '`', ')', ']', '}', '）', '」', '】', '，', '。', '；', '、'];
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find("viking://") {
        let start = from + at;
        let tail = &text[start..];
        let end = tail.find(|c: char| c.is_whitespace() || STOP.contains(&c)).unwrap_or(tail.len());
        let uri = tail[..end].trim_end_matches(['.', ',', ';', ':', '!', '?', '/']);
        out.push(start..start + uri.len());
        from = start + end;
    }
    out
}

/// The text of a bullet line without its marker (`-`, `*`, `•`, or `1.` /
/// `1)`), or `None` for a line that is not a bullet.
fn bullet_text(line: &str) -> Option<&str> {
    let line = line.trim_start();
    let rest = if let Some(r) = line.strip_prefix(['-', '*', '•']) {
        r
    } else {
        let digits = line.find(|c: char| !c.is_ascii_digit()).unwrap_or(line.len());
        if digits == 0 || digits > 3 {
            return None;
        }
        line[digits..].strip_prefix(['.', ')'])?
    };
    rest.starts_with(char::is_whitespace).then(|| rest.trim()).filter(|t| !t.is_empty())
}

/// `text` cut to [`MAX_BULLET_CHARS`] - 2 characters (room for `- `),
/// keeping the citation at its end: the prose before the first cited URI
/// (and a `source:` label right before it) is shortened and marked `…`.
fn fit_bullet(text: &str) -> String {
    let limit = MAX_BULLET_CHARS - 2;
    if text.chars().count() <= limit {
        return text.to_owned();
    }
    let Some(first_uri) = text.find("viking://") else { return cut_chars(text, limit).to_owned() };
    let before = &text[..first_uri];
    let mut label =
        ["source:", "Source:", "来源：", "来源:"].iter().filter_map(|l| before.rfind(l)).max().unwrap_or(first_uri);
    if let Some(open) = text[..label].chars().next_back().filter(|c| matches!(c, '(' | '（' | '[')) {
        label -= open.len_utf8();
    }
    let tail = text[label..].trim_start();
    let room = limit.saturating_sub(tail.chars().count() + 2);
    if room < 20 {
        return cut_chars(text, limit).to_owned();
    }
    format!("{}… {tail}", cut_chars(text[..label].trim_end(), room).trim_end())
}

/// Normalises a model's digest: keeps bullet lines (`-`, `*`, `•`,
/// numbered) rewritten to `- `, each at most [`MAX_BULLET_CHARS`]
/// characters with its citation kept; drops bullets that cite nothing or
/// any URI not in `served`; stops at `max_bullets` (at least 1).
#[must_use]
pub fn normalize_digest(answer: &str, max_bullets: usize, served: &HashSet<&str>) -> Digest {
    let bare = answer.trim().trim_matches(|c: char| c.is_whitespace() || "`*\"'.。".contains(c));
    if bare.eq_ignore_ascii_case(NO_RELEVANT) {
        return Digest::NoRelevant;
    }
    let mut bullets: Vec<String> = Vec::new();
    for line in answer.lines() {
        if bullets.len() >= max_bullets.max(1) {
            break;
        }
        let Some(text) = bullet_text(line) else { continue };
        let text = fit_bullet(text);
        let cited = cited_uris(&text);
        if cited.is_empty() || !cited.iter().all(|u| served.contains(u)) {
            continue;
        }
        bullets.push(format!("- {text}"));
    }
    if bullets.is_empty() {
        // An answer that is only the marker with some noise is still "nothing relevant".
        return if answer.to_ascii_uppercase().contains(NO_RELEVANT) { Digest::NoRelevant } else { Digest::Nothing };
    }
    Digest::Bullets(format!("{DIGEST_HEADER}\n{}", bullets.join("\n")))
}

/// `text` with every `viking://` URI not in `served` replaced where it
/// stands (never inside a longer, served URI), so that the prompt names
/// only served entries.
fn scrub(text: &str, served: &HashSet<&str>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut kept = 0;
    for span in uri_spans(text) {
        if !served.contains(&text[span.clone()]) {
            out.push_str(&text[kept..span.start]);
            out.push_str(OMITTED_URI);
            kept = span.end;
        }
    }
    out.push_str(&text[kept..]);
    out
}

/// The session slice the prompt carries: the overview first, then the
/// most recent user messages, newest first, within
/// [`SESSION_SLICE_CHARS`]; URIs that were not served are scrubbed.
#[must_use]
pub fn session_slice(context: &SessionContext, served: &HashSet<&str>) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut left = SESSION_SLICE_CHARS;
    let mut take = |label: &str, text: &str, left: &mut usize| {
        let text = text.trim();
        if text.is_empty() || *left <= label.len() + 1 {
            return;
        }
        let kept = cut_chars(text, *left - label.len() - 1);
        *left -= label.len() + 1 + kept.chars().count();
        parts.push(format!("{label} {kept}"));
    };
    if let Some(overview) = &context.overview {
        take("Session summary:", overview, &mut left);
    }
    for (_, text) in context.messages.iter().rev().filter(|(role, _)| role == "user") {
        take("User said:", text, &mut left);
    }
    scrub(&parts.join("\n"), served)
}

/// The user text of the prompt: the query (at most
/// [`super::PROMPT_QUERY_CHARS`] characters of it:
/// [`super::prompt_query`]), the session slice, the fragments and the cap.
#[must_use]
pub fn prompt(query: &str, rendered: &str, slice: &str, max_bullets: usize) -> String {
    let query = super::prompt_query(query);
    let session = if slice.is_empty() { String::new() } else { format!("Session context:\n{slice}\n\n") };
    format!(
        "User query:\n{query}\n\n{session}Retrieved fragments:\n{rendered}\n\nAnswer with at most {max_bullets} bullets."
    )
}

/// Runs the stage over `rendered` (the served block) for `query`: `budget`
/// is its timeout (`None`: skipped as `timeout` without a call). Never
/// fails: every failure is a status.
pub async fn rewrite(
    model: &dyn ChatModel,
    query: &str,
    rendered: &str,
    slice: &str,
    max_bullets: usize,
    served: &HashSet<&str>,
    budget: Option<Duration>,
) -> Rewritten {
    if rendered.trim().is_empty() {
        return Rewritten::without_digest(RewriteStatus::Empty, None);
    }
    let Some(budget) = budget else {
        return Rewritten::without_digest(RewriteStatus::Timeout, Some("no time left for the rewrite".into()));
    };
    // Only served URIs reach the model: a URI the query or a fragment's
    // body mentions that was not served is masked like the session's.
    let user = prompt(&scrub(query, served), &scrub(rendered, served), slice, max_bullets);
    let max_tokens = u32::try_from(160 * max_bullets + 64).unwrap_or(u32::MAX);
    let request = ChatRequest { system: SYSTEM, user: &user, json: false, max_tokens };
    let answer = match tokio::time::timeout(budget, model.complete(&request)).await {
        Err(_) => {
            let message = format!("the rewrite took longer than {} ms", budget.as_millis());
            return Rewritten::without_digest(RewriteStatus::Timeout, Some(message));
        }
        Ok(Err(e)) => return Rewritten::without_digest(RewriteStatus::Failed, Some(e.to_string())),
        Ok(Ok(answer)) => answer,
    };
    let usage = answer.usage;
    match normalize_digest(&answer.text, max_bullets, served) {
        Digest::Bullets(digest) => Rewritten { status: RewriteStatus::Ok, digest, usage, error: None },
        Digest::NoRelevant => {
            Rewritten { status: RewriteStatus::NoRelevant, digest: String::new(), usage, error: None }
        }
        Digest::Nothing => Rewritten {
            status: RewriteStatus::Failed,
            digest: String::new(),
            usage,
            error: Some("no bullet of the answer cited a served entry".into()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "viking://user/alice/memories/events/a.md";
    const B: &str = "viking://resources/docs/b.md";

    fn served() -> HashSet<&'static str> {
        [A, B].into_iter().collect()
    }

    fn bullets(answer: &str, max: usize) -> Vec<String> {
        match normalize_digest(answer, max, &served()) {
            Digest::Bullets(d) => {
                let mut lines = d.lines();
                assert_eq!(lines.next(), Some(DIGEST_HEADER));
                lines.map(str::to_owned).collect()
            }
            other => panic!("expected bullets, got {other:?}"),
        }
    }

    #[test]
    fn uncited_and_unserved_bullets_are_dropped() {
        let answer = format!(
            "Here is the digest:\n- uncited fact\n- fact one source: {A}\n- cites another viking://resources/other.md\n\
             - mixes {A} and viking://user/bob/x.md\n- fact two (source: {B})."
        );
        assert_eq!(bullets(&answer, 6), [format!("- fact one source: {A}"), format!("- fact two (source: {B}).")]);
    }

    #[test]
    fn star_numbered_and_dot_bullets_become_dashes_and_the_cap_holds() {
        let answer = format!("* one source: {A}\n2. two source: {B}\n• three 来源：{A}。\n- four source: {A}");
        assert_eq!(
            bullets(&answer, 3),
            [format!("- one source: {A}"), format!("- two source: {B}"), format!("- three 来源：{A}。")]
        );
        assert_eq!(bullets(&answer, 0).len(), 1, "at least one bullet is kept");
    }

    #[test]
    fn long_bullets_are_cut_to_500_characters_and_keep_their_citation() {
        let answer = format!("- {} source: {A}", "word ".repeat(200));
        let kept = bullets(&answer, 6);
        assert_eq!(kept.len(), 1);
        assert!(kept[0].chars().count() <= MAX_BULLET_CHARS, "{}", kept[0].chars().count());
        assert!(kept[0].ends_with(&format!("… source: {A}")), "{}", kept[0]);
        let cjk = format!("- {} 来源：{B}", "记忆".repeat(400));
        let kept = bullets(&cjk, 6);
        assert!(kept[0].chars().count() <= MAX_BULLET_CHARS && kept[0].ends_with(B));
    }

    #[test]
    fn the_no_relevant_marker_is_recognised_and_nothing_else_is_a_digest() {
        for answer in
            ["NO_RELEVANT_MEMORY", "  no_relevant_memory.\n", "`NO_RELEVANT_MEMORY`", "**NO_RELEVANT_MEMORY**"]
        {
            assert_eq!(normalize_digest(answer, 6, &served()), Digest::NoRelevant, "{answer:?}");
        }
        assert_eq!(normalize_digest("", 6, &served()), Digest::Nothing);
        assert_eq!(normalize_digest("Sorry, I can't.", 6, &served()), Digest::Nothing);
        assert_eq!(normalize_digest("-nospace source: viking://resources/docs/b.md", 6, &served()), Digest::Nothing);
    }

    #[test]
    fn citations_are_read_without_trailing_punctuation() {
        assert_eq!(cited_uris(&format!("x source: {A}. and <{B}>")), [A, B]);
        assert_eq!(cited_uris(&format!("（来源：{B}）")), [B]);
        assert_eq!(cited_uris(&format!("{B}/")), [B]);
        assert!(cited_uris("no uri here").is_empty());
    }

    #[test]
    fn the_session_slice_puts_the_overview_first_keeps_user_messages_and_scrubs_unserved_uris() {
        let context = SessionContext {
            overview: Some("Working on billing.".into()),
            messages: vec![
                ("user".into(), "older question".into()),
                ("assistant".into(), "assistant text".into()),
                ("user".into(), "see viking://user/alice/memories/secret.md and viking://resources/docs/b.md".into()),
            ],
        };
        let slice = session_slice(&context, &served());
        assert!(
            slice.starts_with("Session summary: Working on billing.\nUser said: see [uri not served] and"),
            "{slice}"
        );
        assert!(slice.contains(B) && slice.contains("older question") && !slice.contains("assistant text"));
        let long = SessionContext { overview: Some("o".repeat(5_000)), messages: vec![] };
        assert!(session_slice(&long, &served()).chars().count() <= SESSION_SLICE_CHARS);
    }

    #[test]
    fn scrubbing_masks_an_unserved_uri_where_it_stands_and_never_inside_a_served_one() {
        let text = format!(
            "<memory uri=\"{B}\">see viking://resources/docs and {B}, not viking://resources/docs/c.md.</memory>"
        );
        assert_eq!(
            scrub(&text, &served()),
            format!("<memory uri=\"{B}\">see [uri not served] and {B}, not [uri not served].</memory>")
        );
        assert_eq!(scrub("no uri at all", &served()), "no uri at all");
    }

    #[test]
    fn the_prompt_names_the_query_the_fragments_and_the_cap() {
        let text = prompt("q?", "<memory uri=\"x\"/>", "", 4);
        assert!(text.starts_with("User query:\nq?\n\nRetrieved fragments:\n<memory"), "{text}");
        assert!(text.ends_with("at most 4 bullets."));
        assert!(prompt("q", "r", "Session summary: s", 6).contains("Session context:\nSession summary: s\n\n"));
        let long = "q".repeat(super::super::PROMPT_QUERY_CHARS + 1);
        let text = prompt(&long, "r", "", 6);
        let kept = "q".repeat(super::super::PROMPT_QUERY_CHARS);
        assert!(text.starts_with(&format!("User query:\n{kept}\n…(cut)\n\nRetrieved")), "{text}");
    }
}
