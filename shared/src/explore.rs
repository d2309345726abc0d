//! Exploring the tree by pattern, as agents do with `grep` and `glob`:
//! the files below a URI that the caller may see, matched by name
//! ([`glob`]) or by their lines ([`grep`]). The tenancy is `find`'s
//! ([`Content::authorize`]): `viking://` and the other ancestors of the
//! visible roots search only what the caller may see.
//!
//! Everything is bounded: at most [`MAX_SCAN_KEYS`] names are listed and
//! [`MAX_GREP_FILES`] files (or [`MAX_GREP_BYTES`]) read per request, and a
//! result that stopped early says so (`truncated`). Patterns are compiled
//! by `regex-lite`, which matches in time linear in the text (no
//! catastrophic backtracking) and folds case for ASCII only.

use futures_util::{StreamExt as _, stream};
use regex_lite::{Regex, RegexBuilder};

use crate::content::{Content, ContentError};
use crate::uri::VikingUri;

/// The most object names one request lists.
pub const MAX_SCAN_KEYS: usize = 20_000;
/// The most files one `grep` reads.
pub const MAX_GREP_FILES: usize = 2_000;
/// The most bytes one `grep` reads (32 MiB).
pub const MAX_GREP_BYTES: usize = 32 * 1024 * 1024;
/// The most characters a matched line shows (longer lines end in `…`).
pub const MAX_LINE_CHARS: usize = 500;
/// The longest pattern accepted, in bytes.
pub const MAX_PATTERN_BYTES: usize = 1_000;
/// Files `grep` reads at a time.
pub const GREP_CONCURRENCY: usize = 8;

/// What exploring failed to do.
#[derive(Debug, thiserror::Error)]
pub enum ExploreError {
    /// The pattern does not compile (names the field).
    #[error("pattern: {0}")]
    Pattern(String),
    /// Reading or listing failed (forbidden, missing, the store).
    #[error(transparent)]
    Content(#[from] ContentError),
}

/// One matching line.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GrepMatch {
    /// The file.
    pub uri: VikingUri,
    /// The line's number, from 1.
    pub line: usize,
    /// The line (at most [`MAX_LINE_CHARS`] characters).
    pub content: String,
}

/// What [`grep`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct GrepResult {
    /// The matching lines, file by file in name order.
    pub matches: Vec<GrepMatch>,
    /// How many are returned.
    pub count: usize,
    /// How many matched in the files read (more than `count` when the
    /// node limit stopped the list).
    pub match_count: usize,
    /// How many files were read.
    pub files_scanned: usize,
    /// Whether the search stopped before every file below the URI was
    /// read, or more lines matched than were returned.
    pub truncated: bool,
}

/// What [`glob`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct GlobResult {
    /// The matching files' URIs, in name order.
    pub matches: Vec<VikingUri>,
    /// How many are returned.
    pub count: usize,
    /// Whether more matched than were returned, or the listing stopped at
    /// [`MAX_SCAN_KEYS`].
    pub truncated: bool,
}

/// How [`grep`] searches.
#[derive(Debug, Clone)]
pub struct GrepOptions {
    /// The pattern (a regular expression; several are tried as
    /// alternatives).
    pub patterns: Vec<String>,
    /// Fold ASCII case. Default false.
    pub case_insensitive: bool,
    /// The most matching lines returned. Default 256.
    pub node_limit: usize,
    /// How many levels below the URI are searched. Default 10.
    pub level_limit: usize,
    /// A subtree left out.
    pub exclude: Option<VikingUri>,
}

/// The regular expression of `patterns` (alternatives), or why not.
fn compile(patterns: &[String], case_insensitive: bool) -> Result<Regex, ExploreError> {
    if patterns.is_empty() || patterns.iter().any(String::is_empty) {
        return Err(ExploreError::Pattern("must not be empty".into()));
    }
    let joined = patterns.iter().map(|p| format!("(?:{p})")).collect::<Vec<_>>().join("|");
    if joined.len() > MAX_PATTERN_BYTES {
        return Err(ExploreError::Pattern(format!("longer than {MAX_PATTERN_BYTES} bytes")));
    }
    RegexBuilder::new(&joined)
        .case_insensitive(case_insensitive)
        .build()
        .map_err(|e| ExploreError::Pattern(e.to_string().lines().last().unwrap_or("invalid").trim().to_owned()))
}

/// The regular expression a glob pattern means, anchored: `**` any path
/// (a `**/` prefix also matches no directory), `*` any name part, `?` one
/// character of a name, `{a,b}` either; everything else literal.
///
/// # Errors
/// [`ExploreError::Pattern`] for an empty pattern or an unclosed brace.
pub fn glob_regex(pattern: &str) -> Result<Regex, ExploreError> {
    if pattern.is_empty() || pattern.len() > MAX_PATTERN_BYTES {
        return Err(ExploreError::Pattern(format!("must be 1 to {MAX_PATTERN_BYTES} bytes")));
    }
    let mut out = String::from("^");
    let mut chars = pattern.trim_start_matches('/').chars().peekable();
    let mut depth = 0usize;
    while let Some(c) = chars.next() {
        match c {
            '*' if chars.peek() == Some(&'*') => {
                chars.next();
                if chars.peek() == Some(&'/') {
                    chars.next();
                    out.push_str("(?:.*/)?");
                } else {
                    out.push_str(".*");
                }
            }
            '*' => out.push_str("[^/]*"),
            '?' => out.push_str("[^/]"),
            '{' => {
                depth += 1;
                out.push_str("(?:");
            }
            '}' if depth > 0 => {
                depth -= 1;
                out.push(')');
            }
            ',' if depth > 0 => out.push('|'),
            other => out.push_str(&regex_lite::escape(&other.to_string())),
        }
    }
    if depth > 0 {
        return Err(ExploreError::Pattern(format!("an unclosed '{{' in {pattern:?}")));
    }
    out.push('$');
    Regex::new(&out).map_err(|e| ExploreError::Pattern(e.to_string()))
}

/// Whether a file below the searched URI takes part: not a hidden name,
/// except the directories' summaries.
fn searchable(uri: &VikingUri) -> bool {
    uri.file_name().is_none_or(|n| !n.starts_with('.') || n == ".abstract.md" || n == ".overview.md")
}

/// The files at and below `uri` that grep and glob see, with their paths
/// relative to it and their sizes, in name order; and whether the listing
/// stopped at [`MAX_SCAN_KEYS`].
async fn files(content: &Content<'_>, uri: &VikingUri) -> Result<(Vec<(VikingUri, String, u64)>, bool), ExploreError> {
    let (found, truncated) = content.files_below(uri, MAX_SCAN_KEYS).await?;
    let files = found
        .into_iter()
        .filter(|(file, _)| searchable(file))
        .map(|(file, size)| {
            let rel = file.path().strip_prefix(uri.path()).unwrap_or(file.path()).trim_start_matches('/').to_owned();
            (file, rel, size)
        })
        .collect();
    Ok((files, truncated))
}

/// The files below `uri` (authorised first) whose path relative to it
/// matches the glob `pattern`, at most `node_limit` of them.
///
/// Cost: the listing of everything below `uri` (one LIST per 1,000
/// names); no read.
///
/// # Errors
/// [`ExploreError::Pattern`]; forbidden or store errors.
pub async fn glob(
    content: &Content<'_>,
    uri: &VikingUri,
    pattern: &str,
    node_limit: usize,
) -> Result<GlobResult, ExploreError> {
    let matcher = glob_regex(pattern)?;
    let uri = content.authorize(uri)?;
    let (files, mut truncated) = files(content, &uri).await?;
    let mut matches: Vec<VikingUri> =
        files.into_iter().filter(|(_, rel, _)| matcher.is_match(rel)).map(|f| f.0).collect();
    if matches.len() > node_limit {
        matches.truncate(node_limit);
        truncated = true;
    }
    Ok(GlobResult { count: matches.len(), matches, truncated })
}

/// The lines of the files below `uri` (authorised first; a file itself
/// too) that match `options.patterns`, at most `options.node_limit`.
///
/// Cost: the listing of everything below `uri`, then one GET per file up
/// to [`MAX_GREP_FILES`] and [`MAX_GREP_BYTES`], [`GREP_CONCURRENCY`] at
/// a time.
///
/// # Errors
/// [`ExploreError::Pattern`]; forbidden, missing or store errors.
pub async fn grep(content: &Content<'_>, uri: &VikingUri, options: &GrepOptions) -> Result<GrepResult, ExploreError> {
    let matcher = compile(&options.patterns, options.case_insensitive)?;
    let uri = content.authorize(uri)?;
    let exclude = options.exclude.as_ref().map(|e| content.authorize(e)).transpose()?;
    let (files, listing_cut) = files(content, &uri).await?;
    let mut budget = MAX_GREP_BYTES;
    let mut chosen = Vec::new();
    let mut truncated = listing_cut;
    for (file, rel, size) in files {
        let depth = rel.matches('/').count();
        if depth >= options.level_limit.max(1) || exclude.as_ref().is_some_and(|e| file.is_under(e)) {
            continue;
        }
        let size = usize::try_from(size).unwrap_or(usize::MAX);
        if chosen.len() >= MAX_GREP_FILES || size > budget {
            truncated = true;
            break;
        }
        budget -= size;
        chosen.push(file);
    }
    let texts: Vec<(VikingUri, Result<String, ContentError>)> = stream::iter(chosen)
        .map(|file| async move {
            // As `read` shows it (a memory's fields block left out).
            let text = content.read_text(&file, false).await;
            (file, text)
        })
        .buffered(GREP_CONCURRENCY)
        .collect()
        .await;
    let mut result = GrepResult { truncated, ..GrepResult::default() };
    for (file, text) in texts {
        // A file removed since the listing is skipped.
        let text = match text {
            Ok(text) => text,
            Err(ContentError::NotFound { .. } | ContentError::IsDirectory(_)) => continue,
            Err(e) => return Err(e.into()),
        };
        result.files_scanned += 1;
        for (n, line) in text.lines().enumerate() {
            if !matcher.is_match(line) {
                continue;
            }
            result.match_count += 1;
            if result.matches.len() < options.node_limit {
                let content = match line.char_indices().nth(MAX_LINE_CHARS) {
                    Some((at, _)) => format!("{}…", &line[..at]),
                    None => line.to_owned(),
                };
                result.matches.push(GrepMatch { uri: file.clone(), line: n + 1, content });
            } else {
                result.truncated = true;
            }
        }
    }
    result.count = result.matches.len();
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_mean_what_shells_mean() {
        // (pattern, path, matches)
        let cases: &[(&str, &str, bool)] = &[
            ("**/*.md", "a.md", true),
            ("**/*.md", "x/y/a.md", true),
            ("**/*.md", "x/y/a.txt", false),
            ("*.md", "x/a.md", false),
            ("*.md", "a.md", true),
            ("memories/**", "memories/events/2025/a.md", true),
            ("memories/*/a.md", "memories/events/a.md", true),
            ("memories/*/a.md", "memories/events/2025/a.md", false),
            ("note?.md", "note1.md", true),
            ("note?.md", "note12.md", false),
            ("*.{md,txt}", "a.txt", true),
            ("a+b(1).md", "a+b(1).md", true),
            ("a+b(1).md", "aab1.md", false),
        ];
        for (pattern, path, want) in cases {
            let re = glob_regex(pattern).expect("compiles");
            assert_eq!(re.is_match(path), *want, "{pattern} vs {path}");
        }
        assert!(matches!(glob_regex("{a,b"), Err(ExploreError::Pattern(_))));
        assert!(matches!(glob_regex(""), Err(ExploreError::Pattern(_))));
    }

    #[test]
    fn bad_patterns_are_refused_not_run() {
        assert!(matches!(compile(&["(unclosed".into()], false), Err(ExploreError::Pattern(_))));
        assert!(matches!(compile(&[String::new()], false), Err(ExploreError::Pattern(_))));
        assert!(matches!(compile(&["x".repeat(2000)], false), Err(ExploreError::Pattern(_))));
        let re = compile(&["biscuit".into(), "salmon".into()], true).expect("compiles");
        assert!(re.is_match("BISCUIT ate") && re.is_match("salmon") && !re.is_match("chicken"));
    }
}
