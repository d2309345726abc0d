//! The tools' text outputs, in the reference's formats where it has one.

use serde_json::Value;

/// What `find` and list-mode `search` say when nothing matched.
pub(crate) const NO_MATCH: &str = "No matching context found.";
/// What `recall` says when nothing was assembled.
pub(crate) const NO_MEMORIES: &str = "No relevant memories found.";
/// What `bootstrap` says when the block is empty.
pub(crate) const NO_BOOTSTRAP: &str = "No session-start context found.";

/// A find result (`{memories, resources, skills, …}`) as the reference's
/// list: `Found N item(s):`, then per hit `- [type NN%] uri` (with
/// ` (lines A-B)` when a passage of the file matched) and its
/// abstract (else overview, else `(no abstract)`) indented — plus its body
/// when `read_content` asked for it — and a pointer to `read`.
pub(crate) fn find_result(result: &Value) -> String {
    let mut lines = Vec::new();
    for (bucket, kind) in [("memories", "memory"), ("resources", "resource"), ("skills", "skill")] {
        for item in result[bucket].as_array().map(Vec::as_slice).unwrap_or_default() {
            let kind = item["context_type"].as_str().unwrap_or(kind);
            let score = item["score"].as_f64().unwrap_or(0.0) * 100.0;
            let uri = item["uri"].as_str().unwrap_or_default();
            let summary = ["abstract", "overview"]
                .iter()
                .filter_map(|k| item[*k].as_str())
                .find(|s| !s.trim().is_empty())
                .unwrap_or("(no abstract)");
            // Where in the file the passage that matched is.
            let range = match item["lines"].as_array().map(Vec::as_slice) {
                Some([first, last]) => format!(" (lines {first}-{last})"),
                _ => String::new(),
            };
            let mut line = format!("- [{kind} {score:.0}%] {uri}{range}\n    {summary}");
            if let Some(content) = item["content"].as_str().filter(|c| !c.trim().is_empty()) {
                line.push_str("\n    content:");
                for text in content.trim_end().lines() {
                    line.push_str("\n      ");
                    line.push_str(text);
                }
            }
            lines.push(line);
        }
    }
    if lines.is_empty() {
        return NO_MATCH.to_owned();
    }
    format!("Found {} item(s):\n\n{}\n\nUse the read tool to expand a URI.", lines.len(), lines.join("\n"))
}

/// A context-mode result: the digest, else the rendered block, else
/// `empty`.
pub(crate) fn block(result: &Value, empty: &str) -> String {
    ["digest", "rendered"]
        .iter()
        .filter_map(|k| result[*k].as_str())
        .find(|s| !s.trim().is_empty())
        .unwrap_or(empty)
        .to_owned()
}

/// An `fs/ls` agent listing: one line per entry, `- [dir] uri — abstract`
/// or `- [file] uri — abstract` (the abstract on one line), and a note when
/// the listing was cut.
pub(crate) fn listing(uri: &str, entries: &[Value], truncated: bool) -> String {
    if entries.is_empty() {
        return format!("No entries under {uri}.");
    }
    let mut lines: Vec<String> = entries
        .iter()
        .map(|entry| {
            let kind = if entry["isDir"].as_bool().unwrap_or(false) { "dir" } else { "file" };
            let uri = entry["uri"].as_str().unwrap_or_default();
            let summary =
                entry["abstract"].as_str().unwrap_or_default().split_whitespace().collect::<Vec<_>>().join(" ");
            if summary.is_empty() { format!("- [{kind}] {uri}") } else { format!("- [{kind}] {uri} — {summary}") }
        })
        .collect();
    if truncated {
        lines.push(format!(
            "\n[truncated: the listing stops after {} entries; list a deeper URI to see the rest]",
            entries.len()
        ));
    }
    lines.join("\n")
}

/// One `read` section: `=== uri ===` and the text (or the error).
pub(crate) fn section(uri: &str, text: &str) -> String {
    format!("=== {uri} ===\n{text}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn find_results_read_as_the_reference_lists_them() {
        let result = json!({
            "memories": [{"context_type": "memory", "uri": "viking://user/u/memories/a.md", "score": 0.875, "abstract": "A."}],
            "resources": [
                {"context_type": "resource", "uri": "viking://resources/r/.abstract.md", "score": 0.5, "abstract": "", "overview": "R."},
                {"context_type": "resource", "uri": "viking://resources/r/guide.md", "level": 2, "lines": [40, 46], "score": 0.5, "abstract": "Backups."}
            ],
            "skills": [{"uri": "viking://agent/skills/s", "score": 0.1234, "abstract": "", "content": "line 1\nline 2\n"}],
            "total": 3,
        });
        assert_eq!(
            find_result(&result),
            "Found 4 item(s):\n\n- [memory 88%] viking://user/u/memories/a.md\n    A.\n- [resource 50%] viking://resources/r/.abstract.md\n    R.\n- [resource 50%] viking://resources/r/guide.md (lines 40-46)\n    Backups.\n- [skill 12%] viking://agent/skills/s\n    (no abstract)\n    content:\n      line 1\n      line 2\n\nUse the read tool to expand a URI."
        );
        assert_eq!(find_result(&json!({"memories": [], "resources": [], "skills": [], "total": 0})), NO_MATCH);
    }

    #[test]
    fn blocks_prefer_the_digest() {
        assert_eq!(block(&json!({"digest": "- d", "rendered": "<r/>"}), NO_MATCH), "- d");
        assert_eq!(block(&json!({"digest": "", "rendered": "<r/>"}), NO_MATCH), "<r/>");
        assert_eq!(block(&json!({"digest": "", "rendered": ""}), NO_MEMORIES), NO_MEMORIES);
    }

    #[test]
    fn listings_are_one_line_per_entry() {
        let entries = [
            json!({"uri": "viking://resources/a", "isDir": true, "abstract": "Two\nlines."}),
            json!({"uri": "viking://resources/b.md", "isDir": false, "abstract": ""}),
        ];
        assert_eq!(
            listing("viking://resources", &entries, true),
            "- [dir] viking://resources/a — Two lines.\n- [file] viking://resources/b.md\n\n[truncated: the listing stops after 2 entries; list a deeper URI to see the rest]"
        );
        assert_eq!(listing("viking://resources/x", &[], false), "No entries under viking://resources/x.");
    }
}
