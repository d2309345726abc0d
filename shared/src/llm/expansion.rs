//! Query expansion: one bounded call that reads
//! the session's context — its latest archive overview and last messages —
//! and plans at most [`MAX_PLANNED`] extra queries. The original query is
//! always kept first. The prompt and the parsing are pure; only
//! [`expand`] calls the model. Context mode and list mode share it.

use std::time::Duration;

use serde::{Serialize, Serializer};
use serde_json::Value;

use super::{ChatModel, ChatRequest, cut_chars, prompt_query};

/// Planned queries kept beyond the original.
pub const MAX_PLANNED: usize = 2;
/// Messages of the session shown to the planner.
pub const RECENT_MESSAGES: usize = 5;
/// Characters of the archive overview shown to the planner.
pub const OVERVIEW_CHARS: usize = 8_000;
/// Characters of each message shown to the planner.
pub const MESSAGE_CHARS: usize = 1_000;
/// Characters a planned query is cut to.
pub const QUERY_CHARS: usize = 300;
/// Tokens the planner may generate.
const MAX_TOKENS: u32 = 400;

/// What the planner is told. The first words identify the stage.
pub const SYSTEM: &str = "You plan search queries for an assistant's long-term memory. \
You get a conversation's context and the user's current query. Write at most 2 short search queries \
that retrieve stored memories, documents or skills the current query depends on but does not name \
itself: resolve pronouns and references to earlier turns, and name the concrete topic. \
Answer with one JSON object and nothing else: \
{\"reasoning\": \"<one sentence>\", \"queries\": [{\"query\": \"...\", \"context_type\": \"memory|resource|skill\", \
\"intent\": \"<what it finds>\", \"priority\": 1}]}. \
Use an empty list when the current query needs nothing more. Write the queries in the conversation's language.";

/// A session's context as the stages see it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionContext {
    /// The latest archive overview, if any.
    pub overview: Option<String>,
    /// The last messages, oldest first: `(role, text)`.
    pub messages: Vec<(String, String)>,
}

impl SessionContext {
    /// Whether there is nothing to expand from.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.overview.as_deref().is_none_or(|o| o.trim().is_empty())
            && self.messages.iter().all(|(_, text)| text.trim().is_empty())
    }
}

/// `stats.query_expansion`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpansionStatus {
    /// Not asked for, no session context, or no model configured.
    Off,
    /// The model answered (possibly with no extra query).
    Used,
    /// The call or its answer failed; the original query alone is used.
    Failed,
    /// No time was left, or the call ran out of it.
    Timeout,
}

impl ExpansionStatus {
    /// `off`, `used`, `failed` or `timeout`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Used => "used",
            Self::Failed => "failed",
            Self::Timeout => "timeout",
        }
    }
}

/// As its wire name ([`ExpansionStatus::as_str`]).
impl Serialize for ExpansionStatus {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// One planned query, as the reference's `query_plan.queries[]`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlannedQuery {
    /// The query text.
    pub query: String,
    /// `memory`, `resource` or `skill` (default `resource`, as the
    /// reference). Informational: every query searches every type.
    pub context_type: &'static str,
    /// What it is meant to find.
    pub intent: String,
    /// 1 (highest) to 5; default 3.
    pub priority: i64,
}

/// The expansion model's answer after normalisation; serialises as the
/// reference's `query_plan` object (`QueryPlan` in `infra/openapi.json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct QueryPlan {
    /// The model's one-line reasoning.
    pub reasoning: String,
    /// Distinct planned queries, none equal to the original, at most
    /// [`MAX_PLANNED`].
    pub queries: Vec<PlannedQuery>,
}

/// What the stage produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Expansion {
    /// The status.
    pub status: ExpansionStatus,
    /// The queries to search: the original first, then the planned ones.
    pub queries: Vec<String>,
    /// The plan, when the planner answered.
    pub plan: Option<QueryPlan>,
    /// Why it failed or timed out (for `stats` and logs).
    pub error: Option<String>,
}

impl Expansion {
    /// The original query alone, with `status`.
    #[must_use]
    pub fn original(query: &str, status: ExpansionStatus, error: Option<String>) -> Self {
        Self { status, queries: vec![query.to_owned()], plan: None, error }
    }

    /// The planned queries only (`stats.planned_queries`).
    #[must_use]
    pub fn planned(&self) -> &[String] {
        self.queries.get(1..).unwrap_or_default()
    }
}

/// The user text of the planner's prompt: the overview, the last
/// [`RECENT_MESSAGES`] messages (`[role]: text`, each cut to
/// [`MESSAGE_CHARS`]) and the current query (at most
/// [`super::PROMPT_QUERY_CHARS`] characters of it: [`prompt_query`]).
#[must_use]
pub fn prompt(context: &SessionContext, query: &str) -> String {
    let overview = context.overview.as_deref().map(str::trim).filter(|o| !o.is_empty());
    let overview = match overview {
        Some(o) if o.chars().count() > OVERVIEW_CHARS => format!("{}\n…(cut)", cut_chars(o, OVERVIEW_CHARS)),
        Some(o) => o.to_owned(),
        None => "None".to_owned(),
    };
    let recent: Vec<String> = context
        .messages
        .iter()
        .skip(context.messages.len().saturating_sub(RECENT_MESSAGES))
        .filter(|(_, text)| !text.trim().is_empty())
        .map(|(role, text)| format!("[{role}]: {}", cut_chars(text.trim(), MESSAGE_CHARS)))
        .collect();
    let recent = if recent.is_empty() { "None".to_owned() } else { recent.join("\n") };
    let query = prompt_query(query);
    format!("## Session summary\n{overview}\n\n## Recent messages\n{recent}\n\n## Current query\n{query}\n")
}

fn normalised(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase()
}

/// The JSON value in a model's answer: the whole text, or the text inside a
/// code fence, or from the first `{` (or `[`) to the last `}` (or `]`).
fn json_in(text: &str) -> Option<Value> {
    let text = text.trim();
    if let Ok(v) = serde_json::from_str(text) {
        return Some(v);
    }
    let unfenced = text
        .strip_prefix("```json")
        .or_else(|| text.strip_prefix("```"))
        .and_then(|t| t.trim_end().strip_suffix("```"))
        .map(str::trim);
    if let Some(v) = unfenced.and_then(|t| serde_json::from_str(t).ok()) {
        return Some(v);
    }
    for (open, close) in [('{', '}'), ('[', ']')] {
        if let (Some(a), Some(b)) = (text.find(open), text.rfind(close))
            && a < b
            && let Ok(v) = serde_json::from_str(&text[a..=b])
        {
            return Some(v);
        }
    }
    None
}

/// Parses the planner's answer into a plan: queries as objects (`query`,
/// `context_type`, `intent`, `priority`) or plain strings, in an object's
/// `queries` or a bare array; blank, over-long (cut), repeated ones and
/// ones equal to `original` (ignoring case and spacing) are dropped, at
/// most [`MAX_PLANNED`] kept.
///
/// # Errors
/// A message when the answer holds no JSON or no query list.
pub fn parse_plan(answer: &str, original: &str) -> Result<QueryPlan, String> {
    let value = json_in(answer).ok_or("the planner's answer is not JSON")?;
    let (reasoning, items) = match &value {
        Value::Object(map) => {
            let reasoning = match map.get("reasoning") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            let items =
                map.get("queries").and_then(Value::as_array).ok_or("the planner's answer has no queries list")?;
            (reasoning, items.as_slice())
        }
        Value::Array(items) => (String::new(), items.as_slice()),
        _ => return Err("the planner's answer is not a JSON object".into()),
    };
    let mut seen = vec![normalised(original)];
    let mut queries = Vec::new();
    for item in items {
        if queries.len() == MAX_PLANNED {
            break;
        }
        let (text, fields) = match item {
            Value::String(s) => (s.as_str(), None),
            Value::Object(map) => (map.get("query").and_then(Value::as_str).unwrap_or(""), Some(map)),
            _ => continue,
        };
        let text = cut_chars(text.trim(), QUERY_CHARS).trim_end();
        let key = normalised(text);
        if key.is_empty() || seen.contains(&key) {
            continue;
        }
        seen.push(key);
        let field = |name: &str| fields.and_then(|m| m.get(name));
        let context_type = match field("context_type").and_then(Value::as_str) {
            Some("memory") => "memory",
            Some("skill") => "skill",
            _ => "resource",
        };
        queries.push(PlannedQuery {
            query: text.to_owned(),
            context_type,
            intent: field("intent").and_then(Value::as_str).unwrap_or("").to_owned(),
            priority: field("priority").and_then(Value::as_i64).unwrap_or(3).clamp(1, 5),
        });
    }
    Ok(QueryPlan { reasoning, queries })
}

/// Runs the stage: `budget` is its timeout (`None`: no time left, skipped
/// as `timeout` without a call). Never fails: a failed or late call falls
/// back to the original query.
pub async fn expand(
    model: &dyn ChatModel,
    context: &SessionContext,
    query: &str,
    budget: Option<Duration>,
) -> Expansion {
    let Some(budget) = budget else {
        return Expansion::original(query, ExpansionStatus::Timeout, Some("no time left for query expansion".into()));
    };
    let user = prompt(context, query);
    let request = ChatRequest { system: SYSTEM, user: &user, json: true, max_tokens: MAX_TOKENS };
    let answer = match tokio::time::timeout(budget, model.complete(&request)).await {
        Err(_) => {
            let message = format!("query expansion took longer than {} ms", budget.as_millis());
            return Expansion::original(query, ExpansionStatus::Timeout, Some(message));
        }
        Ok(Err(e)) => return Expansion::original(query, ExpansionStatus::Failed, Some(e.to_string())),
        Ok(Ok(answer)) => answer,
    };
    match parse_plan(&answer.text, query) {
        Ok(plan) => {
            let mut queries = vec![query.to_owned()];
            queries.extend(plan.queries.iter().map(|q| q.query.clone()));
            Expansion { status: ExpansionStatus::Used, queries, plan: Some(plan), error: None }
        }
        Err(e) => Expansion::original(query, ExpansionStatus::Failed, Some(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context() -> SessionContext {
        SessionContext {
            overview: Some("We are migrating the billing service to Postgres.".into()),
            messages: (1..=7).map(|i| ("user".to_owned(), format!("message {i}"))).collect(),
        }
    }

    #[test]
    fn the_prompt_carries_the_overview_the_last_five_messages_and_the_query() {
        let text = prompt(&context(), "what did we decide about it?");
        assert!(text.contains("migrating the billing service"), "{text}");
        assert!(!text.contains("message 2") && text.contains("[user]: message 3") && text.contains("message 7"));
        assert!(text.ends_with("## Current query\nwhat did we decide about it?\n"), "{text}");
        let empty = prompt(&SessionContext::default(), "q");
        assert!(empty.contains("## Session summary\nNone") && empty.contains("## Recent messages\nNone"));
        let long = "年".repeat(super::super::PROMPT_QUERY_CHARS + 10);
        let text = prompt(&context(), &long);
        let kept = "年".repeat(super::super::PROMPT_QUERY_CHARS);
        assert!(text.ends_with(&format!("## Current query\n{kept}\n…(cut)\n")), "{text}");
    }

    #[test]
    fn an_empty_context_has_nothing_to_expand() {
        assert!(SessionContext::default().is_empty());
        assert!(SessionContext { overview: Some("  ".into()), messages: vec![("user".into(), " ".into())] }.is_empty());
        assert!(!context().is_empty());
    }

    #[test]
    fn plans_are_deduplicated_capped_and_never_repeat_the_original() {
        let answer = r#"{"reasoning": "r", "queries": [
            {"query": "  Billing  migration ", "context_type": "memory", "intent": "i", "priority": 9},
            {"query": "what did we decide about IT?"},
            {"query": "billing migration"},
            "postgres schema",
            {"query": "third one"}]}"#;
        let plan = parse_plan(answer, "What did we decide about it?").expect("parses");
        let texts: Vec<&str> = plan.queries.iter().map(|q| q.query.as_str()).collect();
        assert_eq!(texts, ["Billing  migration", "postgres schema"]);
        assert_eq!((plan.queries[0].context_type, plan.queries[0].priority), ("memory", 5));
        assert_eq!((plan.queries[1].context_type, plan.queries[1].priority), ("resource", 3));
        assert_eq!(plan.reasoning, "r");
    }

    #[test]
    fn fenced_prefixed_and_bare_array_answers_parse_and_garbage_does_not() {
        let fenced = "```json\n{\"queries\": [{\"query\": \"a\"}]}\n```";
        assert_eq!(parse_plan(fenced, "q").map(|p| p.queries.len()), Ok(1));
        let chatty = "Sure! Here it is: {\"queries\": [\"a\", \"b\"]} Hope that helps.";
        assert_eq!(parse_plan(chatty, "q").map(|p| p.queries.len()), Ok(2));
        assert_eq!(parse_plan("[\"a\"]", "q").map(|p| p.queries.len()), Ok(1));
        assert_eq!(parse_plan("{\"queries\": []}", "q").map(|p| p.queries.len()), Ok(0));
        assert!(parse_plan("I cannot help with that", "q").is_err());
        assert!(parse_plan("{\"answer\": 1}", "q").is_err());
        assert!(parse_plan("\"just a string\"", "q").is_err());
    }

    #[test]
    fn planned_queries_are_cut_to_their_limit() {
        let long = "x".repeat(QUERY_CHARS + 50);
        let plan = parse_plan(&format!("[\"{long}\"]"), "q").expect("parses");
        assert_eq!(plan.queries[0].query.chars().count(), QUERY_CHARS);
    }
}
