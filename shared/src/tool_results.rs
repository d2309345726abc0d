//! A session's tool results: the outputs of the `tool` parts its messages
//! carry, as OpenClaw's plugin reads them back
//! (`GET /api/v1/sessions/{id}/tool-results`, `…/{tool_result_id}` and
//! `…/{tool_result_id}/search`). A result's id is its part's `tool_id`;
//! offsets and lengths count Unicode code points, as the reference's.
//! Pure: the messages come from [`crate::sessions`].

use serde_json::Value;

use crate::sessions::StoredMessage;

/// One tool part's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolResult {
    /// The part's `tool_id`.
    pub id: String,
    /// The part's `tool_name` (`""` when it has none).
    pub tool_name: String,
    /// The part's `tool_status` (`""` when it has none).
    pub status: String,
    /// Its output (a non-string output as JSON text).
    pub output: String,
    /// Its message's `created_at`.
    pub created_at: String,
}

impl ToolResult {
    /// The output's length in code points.
    #[must_use]
    pub fn chars(&self) -> usize {
        self.output.chars().count()
    }
}

/// The tool results of `messages`, oldest first; a part without a
/// `tool_id` or an output has none, and a later part with the same id
/// replaces an earlier one (a tool call's result arrives after its call).
#[must_use]
pub fn tool_results(messages: &[StoredMessage]) -> Vec<ToolResult> {
    let mut out: Vec<ToolResult> = Vec::new();
    for message in messages {
        for part in message.parts.iter().flatten() {
            if part.get("type").and_then(Value::as_str) != Some("tool") {
                continue;
            }
            let Some(id) = part.get("tool_id").and_then(Value::as_str).filter(|id| !id.is_empty()) else { continue };
            let output = match part.get("tool_output") {
                None | Some(Value::Null) => continue,
                Some(Value::String(text)) => text.clone(),
                Some(other) => other.to_string(),
            };
            let text = |key: &str| part.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
            let result = ToolResult {
                id: id.to_owned(),
                tool_name: text("tool_name"),
                status: text("tool_status"),
                output,
                created_at: message.created_at.clone(),
            };
            out.retain(|r| r.id != result.id);
            out.push(result);
        }
    }
    out
}

/// The code points `offset..offset+limit` of `text`, and whether more
/// follow.
#[must_use]
pub fn page(text: &str, offset: usize, limit: usize) -> (String, bool) {
    let mut chars = text.chars().skip(offset);
    let page: String = chars.by_ref().take(limit).collect();
    (page, chars.next().is_some())
}

/// Where `query` occurs in `text` (case-insensitive for ASCII letters),
/// at most `limit` matches, each as its code-point offset and the text
/// `context` code points around it.
#[must_use]
pub fn search(text: &str, query: &str, limit: usize, context: usize) -> Vec<(usize, String)> {
    let haystack: Vec<char> = text.chars().collect();
    let needle: Vec<char> = query.chars().collect();
    if needle.is_empty() || needle.len() > haystack.len() {
        return Vec::new();
    }
    let mut matches = Vec::new();
    let mut at = 0;
    while at + needle.len() <= haystack.len() && matches.len() < limit {
        let hit = haystack[at..at + needle.len()].iter().zip(&needle).all(|(a, b)| a.eq_ignore_ascii_case(b));
        if hit {
            let start = at.saturating_sub(context);
            let end = (at + needle.len() + context).min(haystack.len());
            matches.push((at, haystack[start..end].iter().collect()));
            at += needle.len();
        } else {
            at += 1;
        }
    }
    matches
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn message(parts: &Value) -> StoredMessage {
        let mut m = StoredMessage::said("m1", "assistant", "", "2026-12-01T10:00:00Z");
        m.content = None;
        m.parts = parts.as_array().cloned();
        m
    }

    #[test]
    fn tool_parts_with_an_output_are_results_and_the_latest_wins() {
        let messages = [
            message(&json!([
                {"type": "text", "text": "running"},
                {"type": "tool", "tool_id": "t1", "tool_name": "bash", "tool_status": "running"},
                {"type": "tool", "tool_id": "t2", "tool_name": "read", "tool_output": {"lines": 3}},
            ])),
            message(
                &json!([{"type": "tool", "tool_id": "t1", "tool_name": "bash", "tool_output": "ok", "tool_status": "completed"}]),
            ),
        ];
        let results = tool_results(&messages);
        let ids: Vec<(&str, &str, &str)> =
            results.iter().map(|r| (r.id.as_str(), r.output.as_str(), r.status.as_str())).collect();
        assert_eq!(ids, [("t2", "{\"lines\":3}", ""), ("t1", "ok", "completed")]);
    }

    #[test]
    fn pages_and_searches_count_code_points() {
        let text = "日本語のログ: ERROR at line 3; error again";
        assert_eq!(page(text, 0, 3), ("日本語".to_owned(), true));
        assert_eq!(page(text, 31, 100), ("again".to_owned(), false));
        let found = search(text, "error", 5, 2);
        assert_eq!(found, [(8, ": ERROR a".to_owned()), (25, "; error a".to_owned())]);
        assert_eq!(search(text, "error", 1, 0).len(), 1);
        assert!(search(text, "", 5, 2).is_empty());
    }
}
