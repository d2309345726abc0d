//! The tools: their portable input schemas (JSON literals: no
//! `anyOf`/`oneOf`/`$ref`/`$defs`, a `type` on every node, no `null`
//! default, every property described) and their mapping onto the REST
//! routes, with the reference's argument names and text outputs.
//!
//! | tool | REST | arguments → body |
//! |---|---|---|
//! | `find` | `POST /api/v1/search/find` | `min_score` → `score_threshold` (default 0.35); the rest as named |
//! | `search` | `POST /api/v1/search/search` | `min_score` → `score_threshold` (list mode default 0.35); `detail_by_category` → the `detail` object; `other_peer_penalties` → the `other_peer_penalty` object; `rewrite` `off`/`auto` → `false`/`true` |
//! | `recall` | `POST /api/v1/search/recall` | as named (`max_chars`, `min_score` are the preset's own aliases); `rewrite` a boolean or `auto` |
//! | `bootstrap` | `POST /api/v1/search/bootstrap` | as named |
//! | `read` | `GET /api/v1/content/read?uri=` | one read per URI, at most 10, at once |
//! | `list` | `GET /api/v1/fs/ls?uri=&recursive=&output=agent` | as named |
//! | `health` | `GET /health` | none |
//! | `remember` | `POST /api/v1/sessions/{id}/messages/batch`, then `…/commit` | `messages` in a new session `mcp-store-<12 hex>`, 100 a batch |

use std::sync::LazyLock;

use rmcp::model::{CallToolResult, ContentBlock, ErrorData, JsonObject, Tool, ToolAnnotations};
use serde_json::{Map, Value, json};
use skald::api::find::MAX_LIMIT;
use skald::app::App;
use skald::deadline::Deadline;

use crate::args::{Args, invalid};
use crate::render::{self, NO_BOOTSTRAP, NO_MATCH, NO_MEMORIES};
use crate::rest::{self, Answer, Renames, Route};

/// The server's `instructions`: which tool to use when.
pub const INSTRUCTIONS: &str = "Skald holds this user's long-term memory as viking:// URIs (memories, resources, skills). \
At the start of a session call bootstrap once. Before answering, call recall (or search with mode='context') for one \
budgeted block of relevant memory, or find for a ranked list of URIs. Expand any URI with read; browse a directory \
with list. To keep something the user said for later sessions, call remember with the messages.";

/// `find`'s and list-mode `search`'s default `min_score`, as the reference.
pub const LIST_MIN_SCORE: f64 = 0.35;

/// Most messages one `remember` call keeps.
pub const MAX_REMEMBER: usize = 1000;

/// Most URIs one `read` call takes.
pub const MAX_READ_URIS: usize = 10;

/// `search` arguments only context mode takes. In list mode one sent with
/// its documented default (or empty) is dropped, any other value is REST's
/// 400.
const CONTEXT_ONLY: &[&str] = &[
    "query_expansion",
    "max_tokens",
    "quotas",
    "purpose",
    "detail",
    "detail_by_category",
    "dedup_turns",
    "exclude_uris",
    "peer_scope",
    "other_peer_penalty",
    "other_peer_penalties",
    "rewrite",
    "rewrite_max_bullets",
];

/// The tools this server serves: each has one entry in [`list`] and one
/// arm in [`call`]'s exhaustive match, so a tool cannot be listed and then
/// answered by another's handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ToolName {
    Find,
    Search,
    Recall,
    Bootstrap,
    Read,
    List,
    Tree,
    Health,
    Remember,
    Write,
    Edit,
    Grep,
    Glob,
    Forget,
    AddResource,
    ListWatches,
    CancelWatch,
}

impl ToolName {
    /// Every tool, in the order [`list`] gives them.
    const ALL: [Self; 17] = [
        Self::Find,
        Self::Search,
        Self::Recall,
        Self::Bootstrap,
        Self::Read,
        Self::List,
        Self::Tree,
        Self::Health,
        Self::Remember,
        Self::Write,
        Self::Edit,
        Self::Grep,
        Self::Glob,
        Self::Forget,
        Self::AddResource,
        Self::ListWatches,
        Self::CancelWatch,
    ];

    /// The name hosts call it by.
    fn as_str(self) -> &'static str {
        match self {
            Self::Find => "find",
            Self::Search => "search",
            Self::Recall => "recall",
            Self::Bootstrap => "bootstrap",
            Self::Read => "read",
            Self::List => "list",
            Self::Tree => "tree",
            Self::Health => "health",
            Self::Remember => "remember",
            Self::Write => "write",
            Self::Edit => "edit",
            Self::Forget => "forget",
            Self::Grep => "grep",
            Self::Glob => "glob",
            Self::AddResource => "add_resource",
            Self::ListWatches => "list_watches",
            Self::CancelWatch => "cancel_watch",
        }
    }

    /// The tool `name` names, if any.
    fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == name)
    }
}

/// Every tool, in listing order (built on first use).
#[must_use]
pub fn list() -> &'static [Tool] {
    static TOOLS: LazyLock<Vec<Tool>> = LazyLock::new(build);
    &TOOLS
}

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

fn tool(name: &'static str, title: &str, description: &'static str, schema: Value, read_only: bool) -> Tool {
    let annotations = ToolAnnotations::with_title(title)
        .read_only(read_only)
        .destructive(false)
        .idempotent(read_only)
        .open_world(false);
    Tool::new(name, description, object(schema)).with_title(title).with_annotations(annotations)
}

/// `{"type": "object", "properties": {key: {"type": item, "description": …}}}`
/// over the category keys, for quotas, tiers and penalties per category.
fn per_category(keys: &[&str], item: &Value, description: &str) -> Value {
    let properties: Map<String, Value> = keys
        .iter()
        .map(|k| {
            let mut node = item.clone();
            node["description"] = json!(format!("For {k}."));
            ((*k).to_owned(), node)
        })
        .collect();
    json!({ "type": "object", "properties": properties, "description": description })
}

const QUOTA_KEYS: &[&str] = &["events", "entities", "preferences", "experiences", "resources", "skills"];
const DETAIL_KEYS: &[&str] = &["events", "entities", "preferences", "experiences", "resources", "skills", "memories"];

fn quotas() -> Value {
    per_category(
        QUOTA_KEYS,
        &json!({ "type": "integer", "minimum": 0 }),
        "Entries wanted per category, e.g. {\"events\": 5, \"entities\": 3}; categories not named get none. Default: the purpose's preset.",
    )
}

fn build() -> Vec<Tool> {
    let query = json!({ "type": "string", "description": "What to look for, in natural language (any language)." });
    let session_id = json!({
        "type": "string",
        "description": "The current session's id: its recent turns refine the query and, in context mode, feed the dedup ledger."
    });
    let max_tokens = json!({
        "type": "integer", "minimum": 64, "maximum": 32000, "default": 1600,
        "description": "Token budget of the block; it never exceeds it."
    });
    let peer_scope = json!({
        "type": "string", "enum": ["actor", "all"], "default": "all",
        "description": "'all' also brings other peers' memories (with a score penalty); 'actor' only the shared ones and the acting peer's (X-OpenViking-Actor-Peer)."
    });
    let tier = json!({ "type": "string", "enum": ["abstract", "overview", "full"] });
    let find_schema = json!({
        "type": "object",
        "properties": {
            "query": query,
            "target_uri": {
                "type": "array", "items": { "type": "string" },
                "description": "Search only under these viking:// URIs (one URI as a plain string is accepted too). Default: the caller's memories, resources and skills."
            },
            "limit": { "type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": 10, "description": "Most hits to return." },
            "min_score": {
                "type": "number", "minimum": 0, "maximum": 1, "default": LIST_MIN_SCORE,
                "description": "Lowest relevance score (0 to 1) a hit may have."
            },
            "level": {
                "type": "array", "items": { "type": "integer", "enum": [0, 1, 2] },
                "description": "Only these levels: 0 directory abstracts, 1 directory overviews, 2 files. Default: all."
            },
            "context_type": {
                "type": "array", "items": { "type": "string", "enum": ["memory", "resource", "skill"] },
                "description": "Only these kinds of context (one as a plain string is accepted too). Default: all."
            },
            "read_content": { "type": "boolean", "default": false, "description": "Also return each hit's full text." },
            "events_time_decay_protection": {
                "type": "string",
                "description": "Event hits older than this window score lower: \"0\" or a number followed by m, h or d, e.g. \"30d\". Default: no decay."
            }
        },
        "required": ["query"]
    });
    let search_schema = json!({
        "type": "object",
        "properties": {
            "query": query,
            "search_type": {
                "type": "string", "enum": ["semantic", "keywords", "hybrid"],
                "description": "'semantic' (by meaning, any language; the default in list mode); 'keywords' (exact words: names, identifiers, error codes; Chinese too); 'hybrid' (meaning, lifted by exact words; the default in context mode)."
            },
            "target_uri": {
                "type": "array", "items": { "type": "string" },
                "description": "List mode: search only under these viking:// URIs (one URI as a plain string is accepted too)."
            },
            "session_id": session_id,
            "limit": { "type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": 10, "description": "Most hits (list mode; 10 when not given) or candidates (context mode, without quotas; when not given, the token budget sizes the block and a relevance cut ends it)." },
            "min_score": {
                "type": "number", "minimum": 0, "maximum": 1,
                "description": "Lowest relevance score (0 to 1). Default: 0.35 in list mode, 0.1 in context mode."
            },
            "level": {
                "type": "array", "items": { "type": "integer", "enum": [0, 1, 2] },
                "description": "List mode: only these levels (0 directory abstracts, 1 overviews, 2 files)."
            },
            "context_type": {
                "type": "array", "items": { "type": "string", "enum": ["memory", "resource", "skill"] },
                "description": "List mode: only these kinds of context (one as a plain string is accepted too)."
            },
            "mode": {
                "type": "string", "enum": ["list", "context"], "default": "list",
                "description": "'list': ranked hits with abstracts. 'context': one injection-ready block within max_tokens."
            },
            "query_expansion": {
                "type": "string", "enum": ["off", "auto"], "default": "auto",
                "description": "Context mode: with a session, let the model turn the query into up to three queries."
            },
            "max_tokens": max_tokens,
            "quotas": quotas(),
            "purpose": {
                "type": "string",
                "description": "Context mode: a quota preset, 'chat' or 'coding' (or one configured on the server)."
            },
            "detail": {
                "type": "string", "enum": ["auto", "abstract", "overview", "full"], "default": "auto",
                "description": "Context mode: 'auto' fills breadth first (abstracts, then overviews, then full texts while they fit); a tier pins every entry to it."
            },
            "detail_by_category": per_category(
                DETAIL_KEYS, &tier,
                "Context mode: a tier per category, e.g. {\"events\": \"full\", \"resources\": \"abstract\"}; others fill automatically. Not with detail."
            ),
            "dedup_turns": {
                "type": "integer", "minimum": 0, "maximum": 100, "default": 0,
                "description": "Context mode, with session_id: skip entries already served in the session's last N turns."
            },
            "exclude_uris": {
                "type": "array", "items": { "type": "string" }, "maxItems": 200,
                "description": "Context mode: leave out these viking:// URIs and everything under them."
            },
            "peer_scope": peer_scope,
            "other_peer_penalty": {
                "type": "number", "minimum": 0, "maximum": 1,
                "description": "Context mode: score subtracted from other peers' memories, every category. Not with other_peer_penalties."
            },
            "other_peer_penalties": per_category(
                DETAIL_KEYS, &json!({ "type": "number", "minimum": 0, "maximum": 1 }),
                "Context mode: the penalty per category, e.g. {\"events\": 0.2}; others keep their default. Not with other_peer_penalty."
            ),
            "rewrite": {
                "type": "string", "enum": ["off", "auto"], "default": "off",
                "description": "Context mode: 'auto' condenses the block into a short digest of cited bullets (a model call)."
            },
            "rewrite_max_bullets": {
                "type": "integer", "minimum": 1, "maximum": 20, "default": 6,
                "description": "Context mode: most bullets in the digest."
            },
            "read_content": { "type": "boolean", "default": false, "description": "List mode: also return each hit's full text." },
            "events_time_decay_protection": {
                "type": "string",
                "description": "List mode: event hits older than this window score lower: \"0\" or a number followed by m, h or d."
            }
        },
        "required": ["query"]
    });
    let recall_schema = json!({
        "type": "object",
        "properties": {
            "query": query,
            "quotas": quotas(),
            "max_chars": {
                "type": "integer", "minimum": 1,
                "description": "Budget in characters (about 4 per token) when max_tokens is not given."
            },
            "min_score": {
                "type": "number", "minimum": 0, "maximum": 1, "default": 0.35,
                "description": "Lowest relevance score (0 to 1) a memory may have."
            },
            "peer_scope": peer_scope,
            "other_peer_penalty": {
                "type": "number", "minimum": 0, "maximum": 1,
                "description": "Score subtracted from other peers' memories."
            },
            "session_id": session_id,
            "detail": {
                "type": "string", "enum": ["auto", "abstract", "overview", "full"], "default": "auto",
                "description": "'auto' fills breadth first; a tier pins every entry to it."
            },
            "max_tokens": max_tokens,
            "rewrite": {
                "type": "boolean", "default": false,
                "description": "true condenses the block into a short digest of cited bullets (a model call); the string 'auto' does so only when a dedicated query-planner model is configured."
            }
        },
        "required": ["query"]
    });
    let bootstrap_schema = json!({
        "type": "object",
        "properties": {
            "session_id": {
                "type": "string",
                "description": "The current session's id: adds where it stopped (its latest archive and recent abstracts)."
            },
            "max_tokens": max_tokens,
            "since": {
                "type": "string",
                "description": "Recent work starts here: a duration such as \"7d\" or \"24h\", or a date. Default: 7 days."
            },
            "query": { "type": "string", "description": "Accepted and unused: the block does not depend on a query." }
        }
    });
    let read_schema = json!({
        "type": "object",
        "properties": {
            "uris": {
                "type": "array", "items": { "type": "string" }, "minItems": 1, "maxItems": MAX_READ_URIS,
                "description": "viking:// URIs to read, at most 10 (one URI as a plain string is accepted too); viking://~/ is the caller's own tree."
            }
        },
        "required": ["uris"]
    });
    let list_schema = json!({
        "type": "object",
        "properties": {
            "uri": { "type": "string", "description": "The viking:// directory to list, e.g. viking://resources or viking://~/memories." },
            "recursive": { "type": "boolean", "default": false, "description": "List the whole subtree, not only the direct entries." }
        },
        "required": ["uri"]
    });
    let tree_schema = json!({
        "type": "object",
        "properties": {
            "uri": { "type": "string", "default": "viking://", "description": "The viking:// directory whose subtree to show; default everything the caller may see." },
            "level_limit": { "type": "integer", "minimum": 1, "maximum": 20, "default": 3, "description": "Levels below uri to show." },
            "node_limit": { "type": "integer", "minimum": 1, "maximum": 10000, "default": 1000, "description": "Most entries to show." },
            "include_abstract": { "type": "boolean", "default": true, "description": "Show each entry's abstract." }
        }
    });
    let health_schema = json!({ "type": "object", "properties": {} });
    let remember_schema = json!({
        "type": "object",
        "properties": {
            "messages": {
                "type": "array", "minItems": 1, "maxItems": MAX_REMEMBER,
                "description": "The messages to keep, oldest first.",
                "items": {
                    "type": "object",
                    "properties": {
                        "role": { "type": "string", "enum": ["user", "assistant"], "description": "Who said it." },
                        "content": { "type": "string", "description": "What was said." }
                    },
                    "required": ["role", "content"]
                }
            }
        },
        "required": ["messages"]
    });
    let file_uri = json!({
        "type": "string",
        "description": "The viking:// file, e.g. viking://~/resources/notes/todo.md or a memory under viking://~/memories/ (viking://~/ is the caller's own tree, whose memories, resources and skills find searches; viking://resources/… needs an admin key)."
    });
    let wait = json!({ "type": "boolean", "default": false, "description": "Accepted; a local server indexes before it answers." });
    let timeout = json!({ "type": "number", "description": "Accepted; the request's deadline bounds the work." });
    let write_schema = json!({
        "type": "object",
        "properties": {
            "uri": file_uri,
            "content": { "type": "string", "description": "The text to write." },
            "mode": {
                "type": "string", "enum": ["replace", "append", "create"], "default": "replace",
                "description": "replace the file (creating it), append to it, or create it (an error when it exists)."
            },
            "wait": wait,
            "timeout": timeout
        },
        "required": ["uri", "content"]
    });
    let edit_schema = json!({
        "type": "object",
        "properties": {
            "uri": file_uri,
            "old_string": { "type": "string", "description": "The text to replace; it must occur exactly once unless replace_all." },
            "new_string": { "type": "string", "description": "What replaces it." },
            "replace_all": { "type": "boolean", "default": false, "description": "Replace every occurrence." },
            "wait": wait,
            "timeout": timeout
        },
        "required": ["uri", "old_string", "new_string"]
    });
    let forget_schema = json!({
        "type": "object",
        "properties": {
            "uri": { "type": "string", "description": "The viking:// file or directory to remove, e.g. a memory find returned." },
            "recursive": { "type": "boolean", "default": false, "description": "Remove a directory with everything below it." }
        },
        "required": ["uri"]
    });
    let add_resource_schema = json!({
        "type": "object",
        "properties": {
            "temp_file_id": { "type": "string", "description": "A file uploaded with POST /api/v1/resources/temp_upload (text, Markdown, code, HTML, a PDF with text, or a zip of them)." },
            "path": { "type": "string", "description": "A URL or a path on the server: refused, this server fetches no URL and reads no server file; upload the file and pass temp_file_id." },
            "to": { "type": "string", "description": "The directory that receives it (or, ending in .md, the file itself), e.g. viking://resources/guides." },
            "parent": { "type": "string", "description": "The directory it goes into under its own name. Default viking://resources (admin keys and dev mode) or viking://~/resources." },
            "description": { "type": "string", "description": "What a zip's directory holds: written as its abstract." },
            "add_type": { "type": "string", "description": "Accepted for OpenViking's clients; the type is taken from the file." },
            "tags": { "type": "array", "items": { "type": "string" }, "description": "Accepted for OpenViking's clients." },
            "tag_mode": { "type": "string", "description": "Accepted for OpenViking's clients." },
            "args": { "type": "object", "description": "Accepted for OpenViking's clients." }
        }
    });
    let cancel_watch_schema = json!({
        "type": "object",
        "properties": {
            "to_uri": { "type": "string", "description": "The watched resource's URI." }
        },
        "required": ["to_uri"]
    });
    let grep_schema = json!({
        "type": "object",
        "properties": {
            "uri": { "type": "string", "description": "Where to search: a viking:// file or directory, e.g. viking://~/memories or viking://resources." },
            "pattern": {
                "type": "array", "items": { "type": "string" },
                "description": "Regular expressions (any one matches; one as a plain string is accepted too)."
            },
            "case_insensitive": { "type": "boolean", "default": false, "description": "Ignore ASCII case." },
            "node_limit": { "type": "integer", "minimum": 1, "maximum": 10000, "default": 10, "description": "Most matching lines to return." }
        },
        "required": ["uri", "pattern"]
    });
    let glob_schema = json!({
        "type": "object",
        "properties": {
            "pattern": { "type": "string", "description": "A glob over paths below uri, e.g. **/*.md or memories/preferences/*." },
            "uri": { "type": "string", "default": "viking://", "description": "Where to look; default everything the caller may see." },
            "node_limit": { "type": "integer", "minimum": 1, "maximum": 10000, "default": 100, "description": "Most URIs to return." }
        },
        "required": ["pattern"]
    });
    vec![
        tool(
            "find",
            "Find",
            "Semantic search over the caller's memories, resources and skills: a ranked list of URIs with their scores and abstracts. Expand a URI with read.",
            find_schema,
            true,
        ),
        tool(
            "search",
            "Search",
            "Search with the session's context. mode='list' (default): ranked hits as find, the query refined by the session's recent turns. mode='context': one injection-ready block of memory within max_tokens (abstracts, overviews and full texts by relevance), or its digest with rewrite='auto'.",
            search_schema,
            false,
        ),
        tool(
            "recall",
            "Recall memories",
            "Memory recall: context mode with the recall preset (coding quotas, query expansion, dedup over the session's last turns). Returns one bounded block of the memories relevant to the query.",
            recall_schema,
            false,
        ),
        tool(
            "bootstrap",
            "Session start",
            "The session-start block in one call: how to use this memory, who the user is, what they are working on, where the last session stopped and what else is stored, within max_tokens. No search; call it once when a session starts.",
            bootstrap_schema,
            true,
        ),
        tool(
            "read",
            "Read",
            "Read the full text of viking:// URIs (at most 10 per call), e.g. those find, search and recall return. Each URI gets a '=== uri ===' section.",
            read_schema,
            true,
        ),
        tool("list", "List", "List a viking:// directory: one line per entry with its abstract.", list_schema, true),
        tool(
            "tree",
            "Tree",
            "Show a viking:// directory's subtree, level by level: one line per entry with its abstract.",
            tree_schema,
            true,
        ),
        tool("health", "Health", "Check the server: status, version and authentication mode.", health_schema, true),
        tool(
            "remember",
            "Remember",
            "Keep messages as long-term memory: they are stored in a new session and committed, and the conversation becomes event memories (verbatim, dated, attributed) that find, search and recall return in later sessions; with a model configured, also extracted profile, preferences, entities and events. Returns what was stored and the commit's task id.",
            remember_schema,
            false,
        ),
        tool(
            "write",
            "Write",
            "Write a file in the memory tree (replace, append or create): a memory to correct or add, or a note. It is searchable at once on a local server, within seconds deployed.",
            write_schema,
            false,
        ),
        tool(
            "edit",
            "Edit",
            "Replace a string in a file of the memory tree (once, unless replace_all), e.g. to correct a wrong fact in a memory.",
            edit_schema,
            false,
        ),
        tool(
            "grep",
            "Grep",
            "Search the text of the files below a viking:// URI for lines matching a regular expression: one 'uri:line: text' per match. For exact words, names and identifiers; use find for meaning.",
            grep_schema,
            true,
        ),
        tool(
            "glob",
            "Glob",
            "List the files below a viking:// URI whose path matches a glob (e.g. **/*.md): one URI per line.",
            glob_schema,
            true,
        ),
        destructive(tool(
            "forget",
            "Forget",
            "Remove a memory, or a directory of them with recursive: find and search no longer return it.",
            forget_schema,
            false,
        )),
        tool(
            "add_resource",
            "Add resource",
            "Add an uploaded file (temp_file_id) to the resources: Markdown as is, HTML, PDF and code as Markdown, a zip as a directory of them. Find and search return it at once on a local server, within seconds deployed.",
            add_resource_schema,
            false,
        ),
        tool(
            "list_watches",
            "List watches",
            "List the resources re-fetched on a schedule. This server fetches no URL, so there are none.",
            json!({ "type": "object", "properties": {} }),
            true,
        ),
        tool(
            "cancel_watch",
            "Cancel watch",
            "Stop re-fetching a watched resource. This server fetches no URL, so it watches none.",
            cancel_watch_schema,
            false,
        ),
    ]
}

/// `tool` marked destructive: it removes what it names.
fn destructive(mut tool: Tool) -> Tool {
    if let Some(annotations) = tool.annotations.take() {
        tool.annotations = Some(annotations.destructive(true));
    }
    tool
}

/// The request a tool serves: the app, and the MCP request's parts that
/// every REST call it makes copies.
struct Ctx<'a> {
    app: &'a App,
    parts: &'a http::request::Parts,
}

impl Ctx<'_> {
    async fn post(&self, route: Route, body: &Map<String, Value>, renames: Renames<'_>) -> Result<Answer, String> {
        rest::call(self.app, self.parts, route, Some(body), &[], renames).await
    }

    async fn get(&self, route: Route, query: &[(&str, &str)], renames: Renames<'_>) -> Result<Answer, String> {
        rest::call(self.app, self.parts, route, None, query, renames).await
    }
}

/// Calls tool `name`: the text of its answer, or an `isError` result with
/// the message of what failed, all within the MCP request's `deadline`.
///
/// # Errors
/// A JSON-RPC error (invalid params) for a tool that does not exist.
pub(crate) async fn call(
    app: &App,
    parts: &http::request::Parts,
    deadline: Option<&Deadline>,
    name: &str,
    arguments: Option<JsonObject>,
) -> Result<CallToolResult, ErrorData> {
    let (Some(tool), Some(which)) = (list().iter().find(|t| t.name == name), ToolName::parse(name)) else {
        let names: Vec<&str> = list().iter().map(|t| t.name.as_ref()).collect();
        return Err(ErrorData::invalid_params(format!("Unknown tool: {name}"), Some(json!({ "tools": names }))));
    };
    let ctx = Ctx { app, parts };
    // Boxed: the REST handlers' futures are large.
    let run = Box::pin(async {
        let args = Args::parse(arguments, &tool.input_schema)?;
        match which {
            ToolName::Find => find(&ctx, args).await,
            ToolName::Search => search(&ctx, &tool.input_schema, args).await,
            ToolName::Recall => recall(&ctx, args).await,
            ToolName::Bootstrap => bootstrap(&ctx, args).await,
            ToolName::Read => read(&ctx, args).await,
            ToolName::List => list_dir(&ctx, args).await,
            ToolName::Tree => tree(&ctx, args).await,
            ToolName::Remember => remember(&ctx, args).await,
            ToolName::Health => health(&ctx).await,
            ToolName::Write => write(&ctx, args).await,
            ToolName::Edit => edit(&ctx, args).await,
            ToolName::Forget => forget(&ctx, args).await,
            ToolName::Grep => grep(&ctx, args).await,
            ToolName::Glob => glob(&ctx, args).await,
            ToolName::AddResource => add_resource(&ctx, args).await,
            ToolName::ListWatches => list_watches(&ctx).await,
            ToolName::CancelWatch => cancel_watch(&ctx, args).await,
        }
    });
    let outcome = match deadline {
        Some(deadline) => skald::api::within_deadline(deadline, async { Ok(run.await) })
            .await
            .unwrap_or_else(|e| Err(format!("{}: {e}", e.code()))),
        None => run.await,
    };
    Ok(match outcome {
        Ok(text) => CallToolResult::success(vec![ContentBlock::text(text)]),
        Err(text) => CallToolResult::error(vec![ContentBlock::text(text)]),
    })
}

async fn find(ctx: &Ctx<'_>, mut args: Args) -> Result<String, String> {
    let mut body = Map::new();
    args.pass(
        &mut body,
        &["query", "target_uri", "limit", "level", "context_type", "read_content", "events_time_decay_protection"],
    );
    body.insert("score_threshold".into(), args.take("min_score").unwrap_or(json!(LIST_MIN_SCORE)));
    let answer = ctx.post(Route::Find, &body, &[("score_threshold", "min_score")]).await?;
    Ok(render::find_result(&answer.result))
}

/// Whether `value` is `name`'s documented default (or empty), so that list
/// mode may drop it: a host that fills in every default must not get a 400.
fn is_default(schema: &JsonObject, name: &str, value: &Value) -> bool {
    let default = schema.get("properties").and_then(|p| p.get(name)).and_then(|p| p.get("default"));
    default == Some(value)
        || value.as_array().is_some_and(Vec::is_empty)
        || value.as_object().is_some_and(Map::is_empty)
        || (name == "rewrite" && *value == Value::Bool(false))
}

async fn search(ctx: &Ctx<'_>, schema: &JsonObject, mut args: Args) -> Result<String, String> {
    let mode = args.string("mode")?.unwrap_or_else(|| "list".to_owned());
    let context = match mode.as_str() {
        "list" => false,
        "context" => true,
        _ => return Err(invalid("mode: Input should be 'list' or 'context'")),
    };
    if !context {
        // Any other value stays: REST names it in its 400.
        for name in CONTEXT_ONLY {
            args.drop_if(name, |value| is_default(schema, name, value));
        }
    }
    let mut body = Map::new();
    body.insert("mode".into(), json!(mode));
    args.pass(
        &mut body,
        &[
            "query",
            "search_type",
            "target_uri",
            "session_id",
            "limit",
            "level",
            "context_type",
            "query_expansion",
            "max_tokens",
            "quotas",
            "purpose",
            "dedup_turns",
            "exclude_uris",
            "peer_scope",
            "rewrite_max_bullets",
            "read_content",
            "events_time_decay_protection",
        ],
    );
    let mut renames = vec![("score_threshold", "min_score")];
    match args.take("min_score") {
        Some(score) => {
            body.insert("score_threshold".into(), score);
        }
        None if !context => {
            body.insert("score_threshold".into(), json!(LIST_MIN_SCORE));
        }
        None => {}
    }
    match (args.take("detail"), args.take("detail_by_category")) {
        (Some(detail), Some(_)) if detail != json!("auto") => {
            return Err(invalid(
                "detail_by_category: send detail (one tier for every entry) or detail_by_category (a tier per category), not both",
            ));
        }
        (_, Some(by_category)) => {
            body.insert("detail".into(), by_category);
            renames.push(("detail", "detail_by_category"));
        }
        (Some(detail), None) => {
            body.insert("detail".into(), detail);
        }
        (None, None) => {}
    }
    match (args.take("other_peer_penalty"), args.take("other_peer_penalties")) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                "other_peer_penalties: send other_peer_penalty (every category) or other_peer_penalties (per category), not both",
            ));
        }
        (Some(penalty), None) => {
            body.insert("other_peer_penalty".into(), penalty);
        }
        (None, Some(penalties)) => {
            body.insert("other_peer_penalty".into(), penalties);
            renames.push(("other_peer_penalty", "other_peer_penalties"));
        }
        (None, None) => {}
    }
    if let Some(rewrite) = args.take("rewrite") {
        // As the reference's tool: "auto" forces the digest (REST's `true`).
        let flag = match &rewrite {
            Value::String(s) if s == "off" => false,
            Value::String(s) if s == "auto" => true,
            Value::Bool(b) => *b,
            _ => return Err(invalid("rewrite: Input should be 'off' or 'auto'")),
        };
        body.insert("rewrite".into(), json!(flag));
    }
    let answer = ctx.post(Route::Search, &body, &renames).await?;
    Ok(if context { render::block(&answer.result, NO_MATCH) } else { render::find_result(&answer.result) })
}

async fn recall(ctx: &Ctx<'_>, mut args: Args) -> Result<String, String> {
    let mut body = Map::new();
    args.pass(
        &mut body,
        &[
            "query",
            "quotas",
            "max_chars",
            "min_score",
            "peer_scope",
            "other_peer_penalty",
            "session_id",
            "detail",
            "max_tokens",
        ],
    );
    if let Some(rewrite) = args.take("rewrite") {
        let value = match &rewrite {
            Value::Bool(_) => rewrite,
            Value::String(s) if s == "off" => json!(false),
            Value::String(s) if s == "on" => json!(true),
            Value::String(s) if s == "auto" => rewrite,
            _ => return Err(invalid("rewrite: Input should be a valid boolean or 'auto'")),
        };
        body.insert("rewrite".into(), value);
    }
    let answer = ctx.post(Route::Recall, &body, &[]).await?;
    Ok(render::block(&answer.result, NO_MEMORIES))
}

async fn bootstrap(ctx: &Ctx<'_>, mut args: Args) -> Result<String, String> {
    let mut body = Map::new();
    args.pass(&mut body, &["session_id", "max_tokens", "since", "query"]);
    let answer = ctx.post(Route::Bootstrap, &body, &[]).await?;
    Ok(render::block(&answer.result, NO_BOOTSTRAP))
}

async fn read(ctx: &Ctx<'_>, mut args: Args) -> Result<String, String> {
    let uris: Vec<String> = args
        .string_or_list("uris")?
        .unwrap_or_default()
        .into_iter()
        .map(|u| u.trim().to_owned())
        .filter(|u| !u.is_empty())
        .collect();
    if uris.is_empty() {
        return Err(invalid("uris: at least one URI is required"));
    }
    if uris.len() > MAX_READ_URIS {
        return Err(invalid(&format!("uris: at most {MAX_READ_URIS} URIs per call, not {}", uris.len())));
    }
    let reads =
        uris.iter().map(|uri| async move { ctx.get(Route::Read, &[("uri", uri.as_str())], &[("uri", "uris")]).await });
    let results = futures_util::future::join_all(reads).await;
    let failed = results.iter().filter(|r| r.is_err()).count();
    let sections: Vec<String> = uris
        .iter()
        .zip(&results)
        .map(|(uri, result)| match result {
            Ok(answer) => render::section(uri, answer.result.as_str().unwrap_or_default()),
            Err(error) => render::section(uri, &format!("Error: {error}")),
        })
        .collect();
    let text = fit_response(ctx.app, sections.join("\n\n"));
    if failed == uris.len() { Err(text) } else { Ok(text) }
}

/// The line that ends a `read` answer cut to fit the response limit.
const READ_CUT: &str = "\n[truncated: the answer reached the response size limit; read fewer URIs per call]";

/// `text` cut, at a character boundary and marked, to what a tool result
/// may take under `limits.max_response_bytes` (Lambda's 6 MB): ten reads
/// of 256 KiB each, escaped once in the JSON-RPC body and again in the
/// invocation response, can pass it.
fn fit_response(app: &App, text: String) -> String {
    use skald::api::payload::{Budget, fit_text, text_len};
    let budget = Budget::new(app.config.limits.max_response_bytes).bytes();
    if text_len(&text) <= budget {
        return text;
    }
    let kept = fit_text(&text, budget.saturating_sub(text_len(READ_CUT)));
    format!("{kept}{READ_CUT}")
}

async fn list_dir(ctx: &Ctx<'_>, mut args: Args) -> Result<String, String> {
    let uri = args.string("uri")?.unwrap_or_default();
    let recursive = args.boolean("recursive")?.unwrap_or(false);
    let query = [("uri", uri.as_str()), ("recursive", if recursive { "true" } else { "false" }), ("output", "agent")];
    let answer = ctx.get(Route::List, &query, &[]).await?;
    let entries = answer.result.as_array().map(Vec::as_slice).unwrap_or_default();
    Ok(render::listing(uri.trim(), entries, answer.truncated))
}

async fn tree(ctx: &Ctx<'_>, mut args: Args) -> Result<String, String> {
    let uri = args.string("uri")?.unwrap_or_else(|| "viking://".to_owned());
    let level = args.take("level_limit").map_or_else(|| "3".to_owned(), |v| query_value(&v));
    let nodes = args.take("node_limit").map_or_else(|| "1000".to_owned(), |v| query_value(&v));
    let output = if args.boolean("include_abstract")?.unwrap_or(true) { "agent" } else { "original" };
    let query = [("uri", uri.as_str()), ("level_limit", &level), ("node_limit", &nodes), ("output", output)];
    let answer = ctx.get(Route::Tree, &query, &[]).await?;
    let entries = answer.result.as_array().map(Vec::as_slice).unwrap_or_default();
    Ok(render::listing(uri.trim(), entries, answer.truncated))
}

/// An argument as a query parameter's text (a string as it is; a number
/// or a boolean as JSON writes it), so REST validates it and names it.
fn query_value(value: &Value) -> String {
    value.as_str().map_or_else(|| value.to_string(), str::to_owned)
}

async fn health(ctx: &Ctx<'_>) -> Result<String, String> {
    Ok(ctx.get(Route::Health, &[], &[]).await?.result.to_string())
}

/// `remember`: the messages go to a new session, `mcp-store-<12 hex>`, in
/// batches of [`skald::api::sessions::MAX_BATCH`], and the session is
/// committed (which keeps them as event memories).
async fn remember(ctx: &Ctx<'_>, mut args: Args) -> Result<String, String> {
    let Some(Value::Array(messages)) = args.take("messages") else {
        return Err(invalid("messages: Input should be a valid list"));
    };
    if messages.is_empty() || messages.len() > MAX_REMEMBER {
        return Err(invalid(&format!("messages: between 1 and {MAX_REMEMBER} messages")));
    }
    for (i, message) in messages.iter().enumerate() {
        let role = message.get("role").and_then(Value::as_str);
        let content = message.get("content").and_then(Value::as_str);
        if !matches!(role, Some("user" | "assistant")) || content.is_none() {
            return Err(invalid(&format!("messages.{i}: needs role 'user' or 'assistant' and content, a string")));
        }
    }
    let session = format!("mcp-store-{:012x}", skald::index::unique() & 0xffff_ffff_ffff);
    for chunk in messages.chunks(skald::api::sessions::MAX_BATCH) {
        let mut body = Map::new();
        body.insert("messages".to_owned(), Value::Array(chunk.to_vec()));
        let path = format!("/api/v1/sessions/{session}/messages/batch");
        let answer = rest::call_at(ctx.app, ctx.parts, Route::Sessions, &path, Some(&body), &[], &[]).await?;
        if answer.result["truncated"].as_bool().unwrap_or(false) {
            let applied = answer.result["applied"].as_u64().unwrap_or(0);
            return Err(format!(
                "UNAVAILABLE: session {session} took {applied} of a batch of {} messages before its deadline; nothing was committed",
                chunk.len()
            ));
        }
    }
    let path = format!("/api/v1/sessions/{session}/commit");
    let committed = rest::call_at(ctx.app, ctx.parts, Route::Sessions, &path, Some(&Map::new()), &[], &[]).await?;
    let task = committed.result["task_id"].as_str().unwrap_or_default();
    let kept = committed.result["memory_extraction"].as_str().unwrap_or_default();
    Ok(format!(
        "Stored {} message(s) in session {session} and committed for memory extraction (task {task}). {kept}",
        messages.len()
    ))
}

async fn write(ctx: &Ctx<'_>, mut args: Args) -> Result<String, String> {
    let mut body = Map::new();
    args.pass(&mut body, &["uri", "content", "mode", "wait", "timeout"]);
    let r = ctx.post(Route::Write, &body, &[]).await?.result;
    let done = if r["created"] == true { "created" } else { "updated" };
    Ok(format!(
        "Wrote {} ({done}, {} bytes, mode {}; index: {}).",
        text(&r["uri"]),
        r["size"],
        text(&r["mode"]),
        text(&r["status"])
    ))
}

async fn edit(ctx: &Ctx<'_>, mut args: Args) -> Result<String, String> {
    let mut body = Map::new();
    args.pass(&mut body, &["uri", "old_string", "new_string", "replace_all", "wait", "timeout"]);
    let r = ctx.post(Route::Edit, &body, &[]).await?.result;
    Ok(format!("Edited {} ({} bytes; index: {}).", text(&r["uri"]), r["size"], text(&r["status"])))
}

async fn forget(ctx: &Ctx<'_>, mut args: Args) -> Result<String, String> {
    let uri = args.string("uri")?.unwrap_or_default();
    let recursive = args.boolean("recursive")?.unwrap_or(false);
    let query = [("uri", uri.as_str()), ("recursive", if recursive { "true" } else { "false" })];
    let r = ctx.get(Route::Remove, &query, &[]).await?.result;
    Ok(format!("Removed {} file(s) at {} (index: {}).", r["deleted"], text(&r["uri"]), text(&r["status"])))
}

async fn grep(ctx: &Ctx<'_>, mut args: Args) -> Result<String, String> {
    let mut body = Map::new();
    args.pass(&mut body, &["uri", "pattern", "case_insensitive"]);
    body.insert("node_limit".into(), args.take("node_limit").unwrap_or(json!(10)));
    let answer = ctx.post(Route::Grep, &body, &[]).await?;
    let r = &answer.result;
    let matches = r["matches"].as_array().map(Vec::as_slice).unwrap_or_default();
    if matches.is_empty() {
        return Ok(format!("No matches ({} file(s) searched).", r["files_scanned"]));
    }
    let mut lines: Vec<String> =
        matches.iter().map(|m| format!("{}:{}: {}", text(&m["uri"]), m["line"], text(&m["content"]))).collect();
    let (shown, total) = (r["count"].as_u64().unwrap_or(0), r["match_count"].as_u64().unwrap_or(0));
    if shown < total || answer.truncated {
        lines.push(format!("[{shown} of {total} matching lines shown; narrow uri or pattern, or raise node_limit]"));
    }
    Ok(lines.join("\n"))
}

async fn glob(ctx: &Ctx<'_>, mut args: Args) -> Result<String, String> {
    let mut body = Map::new();
    args.pass(&mut body, &["pattern", "uri"]);
    body.insert("node_limit".into(), args.take("node_limit").unwrap_or(json!(100)));
    let answer = ctx.post(Route::Glob, &body, &[]).await?;
    let matches = answer.result["matches"].as_array().map(Vec::as_slice).unwrap_or_default();
    if matches.is_empty() {
        return Ok("No files match.".to_owned());
    }
    let mut lines: Vec<&str> = matches.iter().map(text).collect();
    let more = "[more files match; narrow uri or pattern, or raise node_limit]";
    if answer.truncated {
        lines.push(more);
    }
    Ok(lines.join("\n"))
}

async fn add_resource(ctx: &Ctx<'_>, mut args: Args) -> Result<String, String> {
    let mut body = Map::new();
    args.pass(
        &mut body,
        &["temp_file_id", "path", "to", "parent", "description", "add_type", "tags", "tag_mode", "args"],
    );
    let r = ctx.post(Route::AddResource, &body, &[]).await?.result;
    let mut text_out =
        format!("Added {} ({} file(s); index: {}).", text(&r["root_uri"]), r["files"], text(&r["queue_status"]));
    for warning in r["warnings"].as_array().into_iter().flatten().chain(r["errors"].as_array().into_iter().flatten()) {
        text_out.push_str(&format!("\n- {}", text(warning)));
    }
    Ok(text_out)
}

async fn list_watches(ctx: &Ctx<'_>) -> Result<String, String> {
    let r = ctx.get(Route::Watches, &[], &[]).await?.result;
    let watches = r.as_array().map(Vec::as_slice).unwrap_or_default();
    if watches.is_empty() {
        return Ok("No watches: this server fetches no URL, so it watches none.".to_owned());
    }
    Ok(watches.iter().map(|w| format!("- {}", text(&w["to_uri"]))).collect::<Vec<_>>().join("\n"))
}

async fn cancel_watch(ctx: &Ctx<'_>, mut args: Args) -> Result<String, String> {
    let to_uri = args.string("to_uri")?.unwrap_or_default();
    ctx.get(Route::CancelWatch, &[("to_uri", to_uri.as_str())], &[]).await?;
    Ok(format!("Cancelled the watch on {to_uri}."))
}

/// A JSON string's text (empty for anything else).
fn text(value: &Value) -> &str {
    value.as_str().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_tool_has_its_own_handler_and_every_handler_is_listed() {
        let listed: Vec<&str> = list().iter().map(|t| t.name.as_ref()).collect();
        let handled: Vec<&str> = ToolName::ALL.iter().map(|t| t.as_str()).collect();
        assert_eq!(listed, handled, "list() and the handlers name the same tools, in order");
        for name in listed {
            assert_eq!(ToolName::parse(name).map(ToolName::as_str), Some(name));
        }
        assert_eq!(ToolName::parse("unlink"), None);
    }
}
