//! Episodes: a committed archive's messages as event memories, with no
//! model. Pure: messages in, files out; no I/O, no clock.
//!
//! An archive is cut into short windows of consecutive messages
//! ([`windows`]); each window becomes one Markdown file under the user's
//! `memories/events/{YYYY}/{MM}/{DD}/` ([`render`]), dated by its first
//! message's `created_at` as the client sent it (its own offset, so the
//! date is the one the speaker saw), every line attributed to its speaker
//! and its text verbatim. Tool calls and outputs are cut to a bounded
//! excerpt with their size. Names are built from the session id (a long
//! one shortened, [`name_stem`]), the archive number and the window number
//! only, so a retried commit or a redelivered event makes the same files.

use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::sessions::{SessionId, StoredMessage};

/// How an archive is cut into episodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpisodeOptions {
    /// The most messages in one episode. Default 2: one exchange, which
    /// the conversational evaluation measured best (the evidence in a
    /// 1600-token block and in `find`'s top 10, against windows of 4 and
    /// 6; `BENCHMARKS.md`).
    pub max_messages: usize,
    /// The most estimated tokens in one episode; a longer single message
    /// is an episode of its own. Default 600.
    pub max_tokens: usize,
    /// The most characters a tool call's input or output keeps (the rest
    /// is counted, not kept). Default 300.
    pub tool_excerpt_chars: usize,
}

impl Default for EpisodeOptions {
    fn default() -> Self {
        Self { max_messages: 2, max_tokens: 600, tool_excerpt_chars: 300 }
    }
}

/// One episode file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Episode {
    /// Its path under the user's root: `memories/events/YYYY/MM/DD/{name}.md`.
    pub path: String,
    /// The file's Markdown.
    pub body: String,
    /// The ids of the messages it holds, in order.
    pub message_ids: Vec<String>,
}

/// Where each episode starts and ends in `messages`: windows of at most
/// `max_messages` messages and `max_tokens` estimated tokens (`tokens`
/// gives a message's), each cut before a user message when the message
/// and a reply would not fit (so what the user said and its answer stay
/// together: at the default of 2, every user message starts a window,
/// and two user messages in a row do not shift the exchanges after them).
#[must_use]
pub fn windows(tokens: &[usize], is_user: &[bool], options: &EpisodeOptions) -> Vec<std::ops::Range<usize>> {
    let max_messages = options.max_messages.max(1);
    let mut out = Vec::new();
    let (mut start, mut used) = (0, 0);
    for (i, &t) in tokens.iter().enumerate() {
        let count = i - start;
        let full = count >= max_messages
            || (count > 0 && used + t > options.max_tokens)
            || (count > 0 && count + 2 > max_messages && is_user.get(i).copied().unwrap_or(false));
        if count > 0 && full {
            out.push(start..i);
            (start, used) = (i, 0);
        }
        used += t;
    }
    if start < tokens.len() {
        out.push(start..tokens.len());
    }
    out
}

/// The episodes of archive `archive` of session `session`: `messages`
/// (oldest first) cut by [`windows`] and rendered. `fallback` dates a
/// message whose `created_at` does not parse (the commit's time).
#[must_use]
pub fn episodes(
    session: &SessionId,
    archive: u64,
    messages: &[StoredMessage],
    fallback: OffsetDateTime,
    options: &EpisodeOptions,
) -> Vec<Episode> {
    let lines: Vec<String> = messages.iter().map(|m| message_text(m, options)).collect();
    let tokens: Vec<usize> = lines.iter().map(|l| crate::tokens::estimate_tokens(l)).collect();
    let is_user: Vec<bool> = messages.iter().map(|m| m.role == "user").collect();
    windows(&tokens, &is_user, options)
        .into_iter()
        .enumerate()
        .map(|(n, range)| render(session, archive, n + 1, &messages[range.clone()], &lines[range], fallback))
        .collect()
}

/// Where an episode sits in its conversation, parsed from its URI as
/// [`episodes`] names them (`{tree}/events/YYYY/MM/DD/{session}-{archive}-{NN}.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place<'a> {
    /// Everything before `/events/`: the user's (or peer's) memories.
    pub tree: &'a str,
    /// The day folder it is in.
    pub date: time::Date,
    /// `{session}-{archive}`: the archive it came from.
    pub archive: &'a str,
    /// Its number within the archive, from 1.
    pub number: usize,
}

impl<'a> Place<'a> {
    /// The place of the episode at `uri`; `None` for a URI that is not an
    /// episode's.
    #[must_use]
    pub fn of(uri: &'a str) -> Option<Self> {
        let parts: Vec<&str> = uri.rsplitn(6, '/').collect();
        let [name, day, month, year, "events", tree] = parts.as_slice() else { return None };
        let stem = name.strip_suffix(".md")?;
        let (archive, number) = stem.rsplit_once('-')?;
        let (session, archive_number) = archive.rsplit_once('-')?;
        let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
        if session.is_empty() || !digits(number) || !digits(archive_number) {
            return None;
        }
        let month = time::Month::try_from(month.parse::<u8>().ok()?).ok()?;
        let date = time::Date::from_calendar_date(year.parse().ok()?, month, day.parse().ok()?).ok()?;
        Some(Self { tree, date, archive, number: number.parse().ok()? })
    }
}

/// Where the episode after the one at `uri` may be, as [`episodes`] names
/// them: number `NN + 1` of the same archive, in the same day's folder or
/// the next day's (an exchange that crossed midnight). Empty for a URI
/// that is not an episode's. Pure: whether either exists is the caller's
/// question.
#[must_use]
pub fn next_uris(uri: &str) -> Vec<String> {
    let Some(place) = Place::of(uri) else { return Vec::new() };
    let Some(next) = place.number.checked_add(1) else { return Vec::new() };
    let name = format!("{}-{next:02}.md", place.archive);
    let folder = |d: time::Date| {
        format!("{}/events/{:04}/{:02}/{:02}/{name}", place.tree, d.year(), u8::from(d.month()), d.day())
    };
    std::iter::once(place.date).chain(place.date.next_day()).map(folder).collect()
}

/// Estimated tokens an episode's digest keeps of a message the user then
/// answers (the assistant's question the user's reply needs). Default 24,
/// about a sentence.
pub const DIGEST_CONTEXT_TOKENS: usize = 24;

/// The most bytes an episode's digest keeps as its abstract: 1,200, where
/// any other file's abstract keeps `index.abstract_max_bytes` (400), so
/// a long message stays whole (only one near an episode's 600 estimated
/// tokens is still cut); the planner cuts a digest to what the budget
/// has left.
/// On the conversational evaluation (`BENCHMARKS.md`) 400 bytes cut long
/// messages mid-sentence: the answer in the 1600-token block 82.7 % →
/// 83.2 % with 1,200.
pub const DIGEST_MAX_BYTES: usize = 1200;

/// Whether `uri` names an episode, as [`episodes`] names them.
#[must_use]
pub fn is_episode(uri: &str) -> bool {
    Place::of(uri).is_some()
}

/// An episode's digest, its abstract: the header, every user message
/// whole, every other message the user then answers cut to
/// `context_tokens` estimated tokens (with `…`), and the replies after the
/// user's last message left out (an episode of no user message keeps its
/// first, cut). What the user said is the memory and the replies are
/// context: on the conversational evaluation a 1600-token block of
/// digests held what 82% of answers need, against 79% with whole
/// exchanges (`BENCHMARKS.md`). `None` when `body` (an episode's text,
/// fields block removed) holds no message line.
///
/// Cost: one pass over `body`.
#[must_use]
pub fn digest(body: &str, context_tokens: usize) -> Option<String> {
    // (line, where its text starts, is the user's), a message's next
    // lines folded into it.
    let mut header: Vec<&str> = Vec::new();
    let mut said: Vec<(String, usize, bool)> = Vec::new();
    for line in body.lines() {
        if said.is_empty() && line.trim() == "# Summary" {
            // The heading older episodes carry.
            continue;
        }
        match (speaker(line), said.last_mut()) {
            (Some((start, user)), _) => said.push((line.to_owned(), start, user)),
            (None, Some((text, _, _))) => {
                text.push('\n');
                text.push_str(line);
            }
            (None, None) => header.push(line),
        }
    }
    let last_user = said.iter().rposition(|(_, _, user)| *user).unwrap_or(0);
    let mut out = header.join("\n");
    for (line, start, user) in said.get(..=last_user)? {
        if !out.is_empty() {
            out.push('\n');
        }
        let text = &line[*start..];
        let kept = if *user { text } else { cut_at_word(text, context_tokens) };
        out.push_str(&line[..*start]);
        out.push_str(kept.trim_end());
        if kept.len() < text.len() {
            out.push('…');
        }
    }
    Some(out)
}

/// The longest prefix of `text` within `tokens` estimated tokens that does
/// not end inside a Latin word (back to its last space when it would).
fn cut_at_word(text: &str, tokens: usize) -> &str {
    let kept = crate::tokens::truncate_to_tokens(text, tokens);
    let inside = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    let mid_word = inside(kept.chars().next_back()) && inside(text[kept.len()..].chars().next());
    match kept.rfind(char::is_whitespace) {
        Some(at) if mid_word => &kept[..at],
        _ => kept,
    }
}

/// Where a message line as [`render`] writes it (`user: …`, `[21:06]
/// assistant: …`, `user (alice): …`) starts its text, and whether the
/// speaker is the user; `None` for any other line (a message's next line).
fn speaker(line: &str) -> Option<(usize, bool)> {
    let mut rest = line;
    if let Some(after) = line.strip_prefix('[') {
        let close = after.find("] ")?;
        let when = &after[..close];
        if when.is_empty() || !when.bytes().all(|b| b.is_ascii_digit() || matches!(b, b'-' | b':' | b' ')) {
            return None;
        }
        rest = &after[close + 2..];
    }
    let role = ["user", "assistant", "system", "tool"].into_iter().find(|r| rest.starts_with(r))?;
    let mut after = &rest[role.len()..];
    if let Some(peer) = after.strip_prefix(" (") {
        after = &peer[peer.find("):")? + 1..];
    }
    let text = after.strip_prefix(": ").or_else(|| (after == ":").then_some(""))?;
    Some((line.len() - text.len(), role == "user"))
}

/// The longest session id an episode's name holds whole: 24 characters.
/// Every block entry carries its URI, so a plugin's `cc-` and a UUID (39
/// characters) would cost each entry about 10 tokens of the budget.
pub const NAME_SESSION_MAX: usize = 24;

/// How an episode's name starts for session `session`: the id itself, its
/// leading dots removed (they would hide the file from the index; `session`
/// when nothing is left), when it is at most [`NAME_SESSION_MAX`]
/// characters; else its first 8 characters and 10 hex digits (40 bits) of
/// its SHA-256, 19 characters (`cc-3f2a9c1e-8b7d-4e2a-9f1c-2d3e4f5a6b7c`
/// → `cc-3f2a9-d49f0a78e9`). Deterministic, so a retried commit names the
/// same files; two sessions share a stem only when their first 8
/// characters and 40 bits of their hashes agree, about one pair in a
/// trillion, and then only on a day both spoke. Episodes
/// named whole before this rule give way to the short names the next time
/// their archive is remembered (its episode list removes the names it no
/// longer makes), and live ones at the session's next commit.
///
/// Cost: one SHA-256 of the id, for a long one.
#[must_use]
pub fn name_stem(session: &str) -> std::borrow::Cow<'_, str> {
    use sha2::Digest as _;
    let stem = session.trim_start_matches('.');
    if stem.is_empty() {
        return "session".into();
    }
    if stem.len() <= NAME_SESSION_MAX {
        return stem.into();
    }
    let hex = hex::encode(&sha2::Sha256::digest(session.as_bytes())[..5]);
    // Session ids are ASCII (`SessionId`); `get` keeps any other text whole.
    let head = stem.get(..8).unwrap_or(stem).trim_end_matches(['-', '.', '_']);
    format!("{head}-{hex}").into()
}

/// When `message` was said: its `created_at` as sent, else `fallback`.
fn said_at(message: &StoredMessage, fallback: OffsetDateTime) -> OffsetDateTime {
    OffsetDateTime::parse(&message.created_at, &Rfc3339).unwrap_or(fallback)
}

/// Episode `number` of archive `archive`: its file name, header and lines.
fn render(
    session: &SessionId,
    archive: u64,
    number: usize,
    messages: &[StoredMessage],
    texts: &[String],
    fallback: OffsetDateTime,
) -> Episode {
    let first = messages.first().map_or(fallback, |m| said_at(m, fallback));
    let last = messages.last().map_or(fallback, |m| said_at(m, fallback));
    let day = |t: OffsetDateTime| format!("{:04}-{:02}-{:02}", t.year(), u8::from(t.month()), t.day());
    let clock = |t: OffsetDateTime| format!("{:02}:{:02}", t.hour(), t.minute());
    let path = format!(
        "memories/events/{:04}/{:02}/{:02}/{}-{archive:03}-{number:02}.md",
        first.year(),
        u8::from(first.month()),
        first.day(),
        name_stem(session.as_str())
    );
    // One header gives the date and time; a line carries its own time only
    // when it differs from the header's (every token a block spends on
    // framing is one it cannot spend on what was said).
    let mut body = format!("{} ({}) {}", day(first), first.weekday(), clock(first));
    if (day(last), clock(last)) != (day(first), clock(first)) {
        let to = if day(first) == day(last) { clock(last) } else { format!("{} {}", day(last), clock(last)) };
        body.push_str(&format!("–{to}"));
    }
    body.push('\n');
    for (message, text) in messages.iter().zip(texts) {
        let at = said_at(message, fallback);
        let speaker = match &message.peer_id {
            Some(peer) if !peer.is_empty() => format!("{} ({peer})", message.role),
            _ => message.role.clone(),
        };
        if (day(at), clock(at)) == (day(first), clock(first)) {
            body.push_str(&format!("{speaker}: {text}\n"));
        } else {
            let when = if day(at) == day(first) { clock(at) } else { format!("{} {}", day(at), clock(at)) };
            body.push_str(&format!("[{when}] {speaker}: {text}\n"));
        }
    }
    Episode { path, body, message_ids: messages.iter().map(|m| m.id.clone()).collect() }
}

/// What `message` says: its text verbatim, then each tool part as one
/// bounded line (`[tool name: input … (N chars); output … (N chars)]`).
fn message_text(message: &StoredMessage, options: &EpisodeOptions) -> String {
    let mut out = message.text().trim_end().to_owned();
    for part in message.parts.iter().flatten() {
        if part.get("type").and_then(Value::as_str) != Some("tool") {
            continue;
        }
        let name = part.get("tool_name").and_then(Value::as_str).unwrap_or("tool");
        let mut pieces = Vec::new();
        for field in ["tool_input", "tool_output"] {
            let text = match part.get(field) {
                None | Some(Value::Null) => continue,
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
            };
            let size = text.chars().count();
            let kept = excerpt(&text.split_whitespace().collect::<Vec<_>>().join(" "), options.tool_excerpt_chars);
            let label = field.trim_start_matches("tool_");
            pieces.push(format!("{label} {kept} ({size} chars)"));
        }
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&format!("[tool {name}: {}]", pieces.join("; ")));
    }
    out
}

/// `text` cut to at most `max` characters, with `…` when cut.
fn excerpt(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(id: &str, role: &str, text: &str, at: &str) -> StoredMessage {
        StoredMessage::said(id, role, text, at)
    }

    fn fallback() -> OffsetDateTime {
        OffsetDateTime::parse("2030-01-01T00:00:00Z", &Rfc3339).expect("time")
    }

    #[test]
    fn windows_hold_exchanges_within_both_bounds() {
        // (max messages, token estimates, which are the user's, the windows
        // as start..end)
        type Row<'a> = (usize, &'a [usize], &'a [bool], &'a [(usize, usize)]);
        let (u, a) = (true, false);
        let rows: &[Row<'_>] = &[
            (4, &[], &[], &[]),
            (4, &[5], &[u], &[(0, 1)]),
            // u a u a | u a: four messages at most.
            (4, &[5; 6], &[u, a, u, a, u, a], &[(0, 4), (4, 6)]),
            // u a a | u a a: cut before a user message when nearly full.
            (4, &[5; 6], &[u, a, a, u, a, a], &[(0, 3), (3, 6)]),
            // The token bound: 60 + 50 > 100.
            (4, &[60, 50, 10], &[u, a, u], &[(0, 1), (1, 3)]),
            // A message longer than the bound is a window of its own.
            (4, &[10, 500, 10], &[u, a, u], &[(0, 1), (1, 2), (2, 3)]),
            // One exchange per window.
            (2, &[5; 4], &[u, a, u, a], &[(0, 2), (2, 4)]),
            // Two user messages in a row: the exchanges after stay whole.
            (2, &[5; 5], &[u, u, a, u, a], &[(0, 1), (1, 3), (3, 5)]),
            // Two replies in a row: the second stands alone.
            (2, &[5; 5], &[u, a, a, u, a], &[(0, 2), (2, 3), (3, 5)]),
            // An assistant's opening line: its own window.
            (2, &[5; 3], &[a, u, a], &[(0, 1), (1, 3)]),
            (1, &[5; 3], &[u, a, u], &[(0, 1), (1, 2), (2, 3)]),
        ];
        for (max_messages, tokens, users, want) in rows {
            let options = EpisodeOptions { max_messages: *max_messages, max_tokens: 100, tool_excerpt_chars: 10 };
            let got: Vec<(usize, usize)> = windows(tokens, users, &options).iter().map(|r| (r.start, r.end)).collect();
            assert_eq!(got, *want, "{max_messages} {tokens:?} {users:?}");
        }
    }

    #[test]
    fn an_episode_is_dated_named_and_attributed_from_its_messages() {
        let session = SessionId::new("chat-7").expect("id");
        let mut said = vec![
            message("m1", "user", "Our dog Biscuit is allergic to chicken.", "2026-07-14T21:05:00-07:00"),
            message("m2", "assistant", "Noted: no chicken for Biscuit.\nAnything else?", "2026-07-14T21:06:30-07:00"),
            message("m3", "user", "No, thanks.", "2026-07-15T00:01:00-07:00"),
        ];
        said[2].peer_id = Some("alice".into());
        let three = EpisodeOptions { max_messages: 4, ..EpisodeOptions::default() };
        let out = episodes(&session, 2, &said, fallback(), &three);
        assert_eq!(out.len(), 1);
        let episode = &out[0];
        // The speaker's own date (not UTC's 15 July).
        assert_eq!(episode.path, "memories/events/2026/07/14/chat-7-002-01.md");
        assert_eq!(episode.message_ids, ["m1", "m2", "m3"]);
        // One header dates it; a line says its own time only when it
        // differs; every line verbatim.
        assert_eq!(
            episode.body,
            "2026-07-14 (Tuesday) 21:05–2026-07-15 00:01\nuser: Our dog Biscuit is allergic to chicken.\n[21:06] \
             assistant: Noted: no chicken for Biscuit.\nAnything else?\n[2026-07-15 00:01] user (alice): No, thanks.\n"
        );
        // Its digest keeps the user's words and what they answer.
        assert_eq!(
            digest(&episode.body, 3).as_deref(),
            Some(
                "2026-07-14 (Tuesday) 21:05–2026-07-15 00:01\nuser: Our dog Biscuit is allergic to chicken.\n[21:06] \
                 assistant: Noted: no…\n[2026-07-15 00:01] user (alice): No, thanks."
            )
        );
        // By default, one exchange an episode.
        let out = episodes(&session, 2, &said, fallback(), &EpisodeOptions::default());
        let ids: Vec<&[String]> = out.iter().map(|e| e.message_ids.as_slice()).collect();
        assert_eq!(ids, [&["m1".to_owned(), "m2".to_owned()][..], &["m3".to_owned()][..]]);
        assert_eq!(out[1].path, "memories/events/2026/07/15/chat-7-002-02.md");
    }

    #[test]
    fn each_episode_is_among_the_next_uris_of_the_one_before() {
        let session = SessionId::new("a-b-7").expect("id");
        // Crosses midnight and a month's end.
        let start = OffsetDateTime::parse("2026-01-31T23:50:00+01:00", &Rfc3339).expect("time");
        let said: Vec<StoredMessage> = (0..30)
            .map(|i| {
                let role = if i % 2 == 0 { "user" } else { "assistant" };
                let at = (start + time::Duration::minutes(i)).format(&Rfc3339).expect("format");
                message(&format!("m{i}"), role, "hello there", &at)
            })
            .collect();
        let out = episodes(&session, 12, &said, fallback(), &EpisodeOptions::default());
        assert_eq!(out.len(), 15);
        for pair in out.windows(2) {
            let next = next_uris(&format!("viking://user/u/{}", pair[0].path));
            assert!(next.contains(&format!("viking://user/u/{}", pair[1].path)), "{next:?} {}", pair[1].path);
        }
        assert_eq!(
            next_uris("viking://user/u/memories/events/2026/12/31/s-001-99.md"),
            [
                "viking://user/u/memories/events/2026/12/31/s-001-100.md",
                "viking://user/u/memories/events/2027/01/01/s-001-100.md"
            ]
        );
        for not_one in [
            "viking://user/u/memories/events/2026/12/31/notes.md",
            "viking://user/u/memories/events/2026/12/31/s-1x-02.md",
            "viking://user/u/memories/events/2026/13/31/s-001-02.md",
            "viking://user/u/memories/entities/2026/12/31/s-001-02.md",
            "viking://resources/s-001-02.md",
        ] {
            assert!(next_uris(not_one).is_empty(), "{not_one}");
        }
    }

    #[test]
    fn a_place_is_read_from_an_episode_uri_only() {
        let e = "viking://user/u/memories/events";
        let at = |y, m: time::Month, d| time::Date::from_calendar_date(y, m, d).expect("date");
        // (uri, its place as (tree, day, archive, number))
        type Row<'a> = (String, Option<(&'a str, time::Date, &'a str, usize)>);
        let rows: &[Row<'_>] = &[
            (
                format!("{e}/2026/07/14/my-chat-001-04.md"),
                Some(("viking://user/u/memories", at(2026, time::Month::July, 14), "my-chat-001", 4)),
            ),
            (format!("{e}/2026/07/14/chat-001.md"), None),
            (format!("{e}/2026/07/14/chat-abc-04.md"), None),
            (format!("{e}/2026/07/14/chat-001-x4.md"), None),
            (format!("{e}/2026/07/14/-001-04.md"), None),
            (format!("{e}/2026/02/30/chat-001-04.md"), None),
            (format!("{e}/2026/07/14/chat-001-04.txt"), None),
            ("viking://user/u/memories/preferences/2026/07/14/chat-001-04.md".to_owned(), None),
        ];
        for (uri, want) in rows {
            let got = Place::of(uri).map(|p| (p.tree, p.date, p.archive, p.number));
            assert_eq!(got, *want, "{uri}");
            assert_eq!(is_episode(uri), want.is_some(), "{uri}");
        }
    }

    #[test]
    fn tool_parts_are_cut_to_an_excerpt_with_their_size() {
        let mut call = message("t1", "assistant", "", "not a time");
        call.content = None;
        call.parts = Some(vec![
            serde_json::json!({"type": "text", "text": "Reading the file."}),
            serde_json::json!({"type": "tool", "tool_name": "read", "tool_input": {"path": "a.md"},
                               "tool_output": "x".repeat(1000)}),
            serde_json::json!({"type": "context", "text": "injected, not said"}),
        ]);
        let options = EpisodeOptions { tool_excerpt_chars: 5, ..EpisodeOptions::default() };
        let out = episodes(&SessionId::new("s").expect("id"), 1, &[call], fallback(), &options);
        // An unparsable time falls back to the commit's.
        assert_eq!(out[0].path, "memories/events/2030/01/01/s-001-01.md");
        assert!(
            out[0].body.ends_with(
                "assistant: Reading the file.\n[tool read: input {\"pat… (15 chars); output xxxxx… (1000 \
                 chars)]\n"
            ),
            "{}",
            out[0].body
        );
        assert!(!out[0].body.contains("injected"));
    }

    #[test]
    fn the_same_archive_makes_the_same_files() {
        let session = SessionId::new(".hidden").expect("id");
        let said: Vec<StoredMessage> = (0..20)
            .map(|i| {
                let role = if i % 2 == 0 { "user" } else { "assistant" };
                message(&format!("m{i}"), role, &format!("line {i}"), "2026-01-02T03:04:05Z")
            })
            .collect();
        let a = episodes(&session, 3, &said, fallback(), &EpisodeOptions::default());
        let b = episodes(&session, 3, &said, OffsetDateTime::UNIX_EPOCH, &EpisodeOptions::default());
        assert_eq!(a, b);
        assert_eq!(a.len(), 10);
        assert_eq!(a[0].path, "memories/events/2026/01/02/hidden-003-01.md", "no hidden file");
        let ids: Vec<&String> = a.iter().flat_map(|e| &e.message_ids).collect();
        assert_eq!(ids.len(), 20, "every message in exactly one episode");
    }

    #[test]
    fn a_long_session_id_is_shortened_in_the_names_and_stays_apart() {
        let uuid = "cc-3f2a9c1e-8b7d-4e2a-9f1c-2d3e4f5a6b7c";
        let other = "cc-3f2a9c1e-8b7d-4e2a-9f1c-2d3e4f5a6b7d";
        // (session id, its stem's length, starts with)
        let rows: &[(&str, usize, &str)] = &[
            ("s", 1, "s"),
            (".hidden", 6, "hidden"),
            ("...", 7, "session"),
            ("05-pm-shanghai-mixed-s11", 24, "05-pm-shanghai-mixed-s11"),
            ("05-pm-shanghai-mixed-s112", 19, "05-pm-sh-"),
            (uuid, 19, "cc-3f2a9-"),
            ("ab-----------------------z", 13, "ab-"),
        ];
        for &(id, len, start) in rows {
            let stem = name_stem(id);
            assert_eq!((stem.len(), stem.starts_with(start)), (len, true), "{id} -> {stem}");
            assert_eq!(stem, name_stem(id), "{id}: deterministic");
        }
        // Pinned: another stem would rename every stored episode.
        assert_eq!(name_stem(uuid), "cc-3f2a9-d49f0a78e9");
        assert_ne!(name_stem(uuid), name_stem(other), "ids sharing a prefix stay apart");
        let said = [message("m1", "user", "Hi.", "2026-01-02T03:04:05Z")];
        let made = episodes(&SessionId::new(uuid).expect("id"), 2, &said, fallback(), &EpisodeOptions::default());
        let uri = format!("viking://user/u/memories/events/{}", made[0].path.trim_start_matches("memories/events/"));
        assert_eq!(uri.len() + 20, format!("viking://user/u/memories/events/2026/01/02/{uuid}-002-01.md").len());
        let place = Place::of(&uri).expect("an episode's place");
        assert_eq!((place.archive, place.number), (format!("{}-002", name_stem(uuid)).as_str(), 1));
    }

    #[test]
    fn a_digest_keeps_what_the_user_said_and_what_they_answered() {
        // (episode body, context tokens, its digest)
        let rows: &[(&str, usize, Option<&str>)] = &[
            // The reply after the user's last message is left out.
            (
                "2026-01-02 (Friday) 10:05\nuser: We moved to Porto.\nassistant: Congratulations on the move!\n",
                24,
                Some("2026-01-02 (Friday) 10:05\nuser: We moved to Porto."),
            ),
            // A question the user answers keeps its opening; a user
            // message keeps every line.
            (
                "2026-01-02 (Friday) 10:05\nassistant: What is your dog called, and how old is she?\nuser: Pimenta.\nShe is two.\n",
                4,
                Some("2026-01-02 (Friday) 10:05\nassistant: What is your dog…\nuser: Pimenta.\nShe is two."),
            ),
            // No user message: the first message, cut.
            (
                "2026-01-02 (Friday) 10:05\nassistant: A long note about the weather.\nassistant: And more.\n",
                2,
                Some("2026-01-02 (Friday) 10:05\nassistant: A long…"),
            ),
            // Older episodes: a `# Summary` heading and a time on every line.
            (
                "# Summary\n2026-01-02 (Friday) 10:05–10:05:\n[10:05] user (bob): Hi.\n[10:05] assistant: Hello!\n",
                24,
                Some("2026-01-02 (Friday) 10:05–10:05:\n[10:05] user (bob): Hi."),
            ),
            // A line that only looks like a speaker's is the message's next line.
            (
                "2026-01-02 (Friday) 10:05\nuser: Notes:\nusers: many\n[soon] assistant: x\nassistant: Sure.\n",
                24,
                Some("2026-01-02 (Friday) 10:05\nuser: Notes:\nusers: many\n[soon] assistant: x"),
            ),
            // Chinese text is cut by its token estimate (1.5 a character).
            (
                "2026-01-02 (Friday) 10:05\nassistant: 你的狗叫什么名字？\nuser: 年糕。\n",
                3,
                Some("2026-01-02 (Friday) 10:05\nassistant: 你的…\nuser: 年糕。"),
            ),
            ("Just notes, nobody speaking.\n", 24, None),
            ("", 24, None),
        ];
        for (body, tokens, want) in rows {
            assert_eq!(digest(body, *tokens).as_deref(), *want, "{body:?}");
        }
    }
}
