//! The archive summary of a session commit: one bounded LLM call that
//! writes the working memory of the archived messages (the overview an
//! agent resumes from) and its one-paragraph abstract. Any failure — no
//! time left, a timeout, an error, an empty answer — falls back to the
//! deterministic [`crate::sessions::extractive_summary`], so a commit never
//! fails for its summary.

use std::time::Duration;

use super::{ChatModel, ChatRequest, cut_chars};
use crate::sessions::{ArchiveSummary, StoredMessage, extractive_summary};

/// The stage's cap; the request deadline may leave less.
pub const SUMMARY_CAP: Duration = Duration::from_secs(20);
/// Characters of transcript the prompt carries (the newest are kept).
pub const TRANSCRIPT_CHARS: usize = 48_000;
/// Characters of one message in the transcript.
pub const MESSAGE_CHARS: usize = 4_000;
/// Bytes of the abstract taken from the overview.
pub const ABSTRACT_BYTES: usize = 400;

const SYSTEM: &str = "You keep the working memory of a conversation between a user and an AI assistant, so that \
the assistant can resume it later without the transcript. Do not use tools. Write Markdown with exactly these \
parts: a first line `# ` followed by a short title; then a one-paragraph summary of where the conversation \
stands; then the sections `## Goals`, `## Decisions and facts`, `## Files and context`, `## Open issues`, each \
a short bullet list (write `- none` when empty). Report only what the transcript says; keep names, paths, \
numbers and identifiers exactly as written. Write in the language the user writes in.";

/// The transcript the prompt carries: `[role]: text` lines, each message cut
/// to [`MESSAGE_CHARS`], the newest kept within [`TRANSCRIPT_CHARS`].
#[must_use]
pub fn transcript(messages: &[StoredMessage]) -> String {
    let mut lines: Vec<String> = Vec::new();
    let mut used = 0;
    for m in messages.iter().rev() {
        let text = m.text();
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        let line = format!("[{}]: {}", m.role, cut_chars(text, MESSAGE_CHARS));
        used += line.chars().count() + 1;
        if used > TRANSCRIPT_CHARS && !lines.is_empty() {
            break;
        }
        lines.push(line);
    }
    lines.reverse();
    lines.join("\n")
}

/// The abstract of an overview: its first paragraph that is not a heading,
/// else its title, cut to [`ABSTRACT_BYTES`].
#[must_use]
pub fn abstract_of(overview: &str) -> String {
    let paragraph = crate::index::extract::first_paragraph(overview).unwrap_or("");
    crate::index::extract::cut_to_bytes(paragraph, ABSTRACT_BYTES).to_owned()
}

/// The summaries of `messages` and how they were written (`llm` or
/// `extractive`): the model's within `budget` (`None`: no time left, no
/// call), else the extractive ones. Never fails.
pub async fn summarize(
    model: Option<&dyn ChatModel>,
    messages: &[StoredMessage],
    budget: Option<Duration>,
) -> (ArchiveSummary, &'static str) {
    let (Some(model), Some(budget)) = (model, budget) else {
        return (extractive_summary(messages), "extractive");
    };
    let user = format!("Transcript:\n{}\n\nWrite the working memory now.", transcript(messages));
    let request = ChatRequest { system: SYSTEM, user: &user, json: false, max_tokens: 1200 };
    match tokio::time::timeout(budget, model.complete(&request)).await {
        Ok(Ok(answer)) if !answer.text.trim().is_empty() => {
            let overview = answer.text.trim().to_owned();
            let abstract_text = abstract_of(&overview);
            (ArchiveSummary { overview, abstract_text }, "llm")
        }
        Ok(Ok(_)) => {
            tracing::warn!(model = model.id(), "archive summary: the model answered nothing; extractive summary");
            (extractive_summary(messages), "extractive")
        }
        Ok(Err(e)) => {
            tracing::warn!(model = model.id(), error = %e, "archive summary failed; extractive summary");
            (extractive_summary(messages), "extractive")
        }
        Err(_) => {
            tracing::warn!(model = model.id(), ms = budget.as_millis() as u64, "archive summary timed out");
            (extractive_summary(messages), "extractive")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(role: &str, text: &str) -> StoredMessage {
        StoredMessage::said("", role, text, "")
    }

    #[test]
    fn the_transcript_keeps_the_newest_messages_within_its_bound() {
        let many: Vec<StoredMessage> =
            (0..100).map(|i| message("user", &format!("{i:03} {}", "x".repeat(990)))).collect();
        let text = transcript(&many);
        assert!(text.chars().count() <= TRANSCRIPT_CHARS, "{}", text.len());
        assert!(text.ends_with(&"x".repeat(10)) && text.contains("[user]: 099 "), "the newest is kept");
        assert!(!text.contains("[user]: 000 "), "the oldest is dropped");
        assert_eq!(transcript(&[message("user", "hi"), message("assistant", " ")]), "[user]: hi");
    }

    #[test]
    fn the_abstract_is_the_overviews_first_paragraph() {
        assert_eq!(
            abstract_of("# Trip to Kyoto\n\nPlanning a December trip.\n\n## Goals\n- book\n"),
            "Planning a December trip."
        );
        assert_eq!(abstract_of("# Only a title\n"), "Only a title");
    }
}
