//! Text extraction for index records: the abstract of a file (its
//! `# Summary` section, else its first paragraph), frontmatter tags, and
//! the byte cut. Pure functions over text.

/// The default abstract size, in bytes.
pub const DEFAULT_ABSTRACT_MAX_BYTES: usize = 400;

/// A markdown document split into its optional YAML frontmatter and body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Document<'a> {
    /// The lines between the opening and closing `---`, if any.
    pub frontmatter: Option<&'a str>,
    /// Everything after the frontmatter.
    pub body: &'a str,
}

/// Splits `text` into frontmatter and body. Frontmatter must open on the
/// first line with `---` and close with a line `---`; otherwise the whole
/// text is the body.
#[must_use]
pub fn split_frontmatter(text: &str) -> Document<'_> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let Some(rest) = text.strip_prefix("---\n").or_else(|| text.strip_prefix("---\r\n")) else {
        return Document { frontmatter: None, body: text };
    };
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        if line.trim_end() == "---" {
            return Document { frontmatter: Some(&rest[..offset]), body: &rest[offset + line.len()..] };
        }
        offset += line.len();
    }
    Document { frontmatter: None, body: text }
}

/// The valid `k=v` tags in a frontmatter `tags:` entry, as a flow list
/// (`tags: [a=b, c=d]`) or a block list (`tags:` then `- a=b` lines).
/// Entries not of the form `k=v` (both sides non-empty) are dropped.
#[must_use]
pub fn frontmatter_tags(frontmatter: &str) -> Vec<String> {
    let mut tags = Vec::new();
    let mut in_block = false;
    for line in frontmatter.lines() {
        let trimmed = line.trim();
        if let Some(value) = trimmed.strip_prefix("tags:") {
            let value = value.trim();
            in_block = value.is_empty();
            let inner = value.trim_start_matches('[').trim_end_matches(']');
            tags.extend(inner.split(',').map(clean_tag));
        } else if in_block && trimmed.starts_with('-') {
            tags.push(clean_tag(trimmed.trim_start_matches('-')));
        } else if !trimmed.is_empty() {
            in_block = false;
        }
    }
    tags.retain(|t| is_valid_tag(t));
    tags
}

fn clean_tag(raw: &str) -> String {
    raw.trim().trim_matches(|c| c == '"' || c == '\'').trim().to_owned()
}

/// Whether `tag` is strict `k=v`: one `=`, both sides non-empty, no spaces
/// around it.
#[must_use]
pub fn is_valid_tag(tag: &str) -> bool {
    match tag.split_once('=') {
        Some((k, v)) => !k.is_empty() && !v.is_empty() && !v.contains('=') && k.trim() == k && v.trim() == v,
        None => false,
    }
}

/// The text of the `# Summary` section (heading level 1-3, any case) up to
/// the next heading of level 1-3, trimmed; else the legacy `Summary:` line
/// block; else `None`.
#[must_use]
pub fn summary_section(body: &str) -> Option<&str> {
    let mut start = None;
    let mut offset = 0;
    for line in body.split_inclusive('\n') {
        let is_heading = heading_level(line).is_some_and(|l| l <= 3);
        if let Some(from) = start {
            if is_heading {
                return non_empty(body[from..offset].trim());
            }
        } else if is_heading && heading_text(line).eq_ignore_ascii_case("summary") {
            start = Some(offset + line.len());
        }
        offset += line.len();
    }
    if let Some(from) = start {
        return non_empty(body[from..].trim());
    }
    let trimmed = body.trim_start();
    if trimmed.get(..8).is_some_and(|head| head.eq_ignore_ascii_case("summary:")) {
        let rest = &trimmed[8..];
        let end = rest.find("\n\n").unwrap_or(rest.len());
        return non_empty(rest[..end].trim());
    }
    None
}

fn non_empty(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}

/// The ATX heading level of `line` (1-6), or `None`.
#[must_use]
pub fn heading_level(line: &str) -> Option<usize> {
    let hashes = line.bytes().take_while(|&b| b == b'#').count();
    let after = line.as_bytes().get(hashes).copied();
    ((1..=6).contains(&hashes) && matches!(after, Some(b' ' | b'\t' | b'\n' | b'\r') | None)).then_some(hashes)
}

/// The text of a heading line without its `#`s.
#[must_use]
pub fn heading_text(line: &str) -> &str {
    line.trim_start_matches('#').trim()
}

/// The first paragraph that is not a heading (lines up to a blank line or a
/// heading), trimmed; the first heading's text when there is no paragraph.
#[must_use]
pub fn first_paragraph(body: &str) -> Option<&str> {
    first_paragraph_only(body)
        .or_else(|| body.lines().filter(|l| heading_level(l).is_some()).find_map(|l| non_empty(heading_text(l))))
}

/// A file's abstract: its summary section, else its first paragraph, from
/// the body after any frontmatter, cut to `max_bytes`.
#[must_use]
pub fn file_abstract(text: &str, max_bytes: usize) -> String {
    let body = split_frontmatter(text).body;
    let picked = summary_section(body).or_else(|| first_paragraph(body)).unwrap_or("");
    cut_to_bytes(picked, max_bytes).to_owned()
}

/// The start of the machine-written metadata block memory files may end with.
pub const MEMORY_FIELDS_MARKER: &str = "<!-- MEMORY_FIELDS";

/// Headings kept in a document outline.
pub const OUTLINE_MAX_HEADINGS: usize = 24;
/// Characters of the first paragraph kept in a document overview.
pub const OVERVIEW_PARAGRAPH_CHARS: usize = 400;

/// A file's `full` tier text: the body after any frontmatter, without a
/// trailing `<!-- MEMORY_FIELDS … -->` block, trimmed.
#[must_use]
pub fn full_text(text: &str) -> &str {
    let body = split_frontmatter(text).body;
    let body = body.find(MEMORY_FIELDS_MARKER).map_or(body, |at| &body[..at]);
    body.trim()
}

/// A file's `overview` tier text, or `None` when it has none: a memory's
/// `# Summary` section; any other document's heading outline (up to
/// [`OUTLINE_MAX_HEADINGS`] headings of level 1-3, indented two spaces per
/// level below 1) and its first paragraph (up to
/// [`OVERVIEW_PARAGRAPH_CHARS`] characters), joined by a blank line.
#[must_use]
pub fn file_overview(is_memory: bool, text: &str) -> Option<String> {
    let body = full_text(text);
    if is_memory {
        return summary_section(body).map(str::to_owned);
    }
    if let Some(summary) = summary_section(body) {
        return Some(summary.to_owned());
    }
    let outline: Vec<String> = body
        .lines()
        .filter_map(|line| {
            let level = heading_level(line).filter(|l| *l <= 3)?;
            let text = heading_text(line);
            (!text.is_empty()).then(|| format!("{}{text}", "  ".repeat(level - 1)))
        })
        .take(OUTLINE_MAX_HEADINGS)
        .collect();
    let paragraph = first_paragraph_only(body).map(|p| {
        let end = p.char_indices().nth(OVERVIEW_PARAGRAPH_CHARS).map_or(p.len(), |(at, _)| at);
        p[..end].trim_end()
    });
    let outline = outline.join("\n");
    let parts: Vec<&str> = std::iter::once(outline.as_str()).filter(|s| !s.is_empty()).chain(paragraph).collect();
    let joined = parts.join("\n\n");
    (!joined.is_empty()).then_some(joined)
}

/// The first non-heading paragraph, without falling back to a heading.
fn first_paragraph_only(body: &str) -> Option<&str> {
    let mut start = None;
    let mut offset = 0;
    for line in body.split_inclusive('\n') {
        let blank = line.trim().is_empty();
        let heading = heading_level(line).is_some();
        match start {
            None if !blank && !heading => start = Some(offset),
            Some(from) if blank || heading => return non_empty(body[from..offset].trim()),
            _ => {}
        }
        offset += line.len();
    }
    start.and_then(|from| non_empty(body[from..].trim()))
}

/// A directory's `overview` tier text: its `.overview.md` without
/// frontmatter, trimmed.
#[must_use]
pub fn directory_overview(text: &str) -> &str {
    split_frontmatter(text).body.trim()
}

/// A directory's abstract: its `.abstract.md` text without frontmatter,
/// trimmed and cut to `max_bytes`.
#[must_use]
pub fn sidecar_text(text: &str, max_bytes: usize) -> String {
    cut_to_bytes(split_frontmatter(text).body.trim(), max_bytes).to_owned()
}

/// The longest prefix of `text` of at most `max_bytes` bytes ending on a
/// char boundary, with trailing whitespace removed.
#[must_use]
pub fn cut_to_bytes(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].trim_end()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_section_wins_and_stops_at_the_next_heading() {
        let text = "# Summary\nShipped the S3 ledger.\nIt uses CAS.\n# 2026-11-20 ChatLog:\nlots of chat";
        assert_eq!(file_abstract(text, 400), "Shipped the S3 ledger.\nIt uses CAS.");
        assert_eq!(summary_section("## summary\n\nx\n### Next\ny"), Some("x"));
        assert_eq!(summary_section("# Summary\n   \n# Next"), None);
        assert_eq!(summary_section("Summary: legacy text\nmore\n\nrest"), Some("legacy text\nmore"));
        assert_eq!(summary_section("# Summaries\nnot it"), None);
    }

    #[test]
    fn first_paragraph_skips_headings_and_frontmatter() {
        let text = "---\ntags: [team=search]\n---\n# Title\n\nFirst para\nline two.\n\nSecond.";
        assert_eq!(file_abstract(text, 400), "First para\nline two.");
        assert_eq!(first_paragraph("# Only a title\n"), Some("Only a title"));
        assert_eq!(first_paragraph(""), None);
        assert_eq!(first_paragraph("#hashtag line\nnext"), Some("#hashtag line\nnext"));
    }

    #[test]
    fn abstracts_are_cut_on_char_boundaries() {
        let zh = "记忆".repeat(100); // 600 bytes
        let cut = file_abstract(&zh, 400);
        assert!(cut.len() <= 400 && cut.len() > 390);
        assert!(zh.starts_with(&cut));
        assert_eq!(cut_to_bytes("abc def", 4), "abc");
    }

    #[test]
    fn full_text_drops_frontmatter_and_memory_fields() {
        let text = "---\ntags: [a=b]\n---\n# Summary\nx\n\nbody\n\n<!-- MEMORY_FIELDS\n{\"k\": 1}\n-->\n";
        assert_eq!(full_text(text), "# Summary\nx\n\nbody");
        assert_eq!(full_text("  plain  "), "plain");
    }

    #[test]
    fn overviews_are_the_summary_or_the_outline_and_first_paragraph() {
        assert_eq!(
            file_overview(true, "# Summary\nA thing happened.\n# Log\nlots").as_deref(),
            Some("A thing happened.")
        );
        assert_eq!(file_overview(true, "no summary here"), None);
        let doc = "# Guide\n\nIntro para.\n\n## Setup\ntext\n### Detail\n#### Too deep\n";
        assert_eq!(file_overview(false, doc).as_deref(), Some("Guide\n  Setup\n    Detail\n\nIntro para."));
        assert_eq!(file_overview(false, "just text").as_deref(), Some("just text"));
        assert_eq!(file_overview(false, "   "), None);
        let long = format!("# T\n\n{}", "é".repeat(500));
        let overview = file_overview(false, &long).expect("overview");
        assert_eq!(overview.chars().count(), "T\n\n".chars().count() + OVERVIEW_PARAGRAPH_CHARS);
    }

    #[test]
    fn frontmatter_tags_keep_only_k_equals_v() {
        let doc = split_frontmatter("---\ntags: [team=search, env=prod, bad=, =x, plain, 'q=1']\ntitle: x\n---\nbody");
        assert_eq!(doc.body, "body");
        assert_eq!(frontmatter_tags(doc.frontmatter.unwrap_or("")), ["team=search", "env=prod", "q=1"]);
        let block = split_frontmatter("---\ntags:\n  - a=b\n  - c=d\nother: 1\n- x=y\n---\n");
        assert_eq!(frontmatter_tags(block.frontmatter.unwrap_or("")), ["a=b", "c=d"]);
        assert_eq!(split_frontmatter("---\nunclosed\nbody").frontmatter, None);
    }
}
