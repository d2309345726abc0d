//! Uploaded files as tree files: the pure part of `POST /api/v1/resources`
//! and `POST /api/v1/skills`. No I/O, no clock.
//!
//! A resource becomes Markdown, the tree's one format (the store's
//! notifications index `.md` files): Markdown stays as sent, HTML becomes
//! Markdown ([`html_to_markdown`]), a PDF its text layer, page by page,
//! other UTF-8 text becomes `{name}.md` (code fenced with its language,
//! prose as is). A zip archive (what
//! OpenViking's clients upload for a directory) is unpacked entry by entry,
//! with every name checked ([`unpack`]); an entry that is not text is
//! skipped and named in the warnings. Anything else (images, scanned or
//! encrypted PDFs, executables) is refused with the file's name.
//!
//! A skill is a `SKILL.md` with `name` and `description` in its
//! frontmatter ([`parse_skill`]), optionally with files beside it.

use std::io::Read as _;

use crate::index::extract::split_frontmatter;

/// The largest file an upload may carry, in bytes (4 MiB; a Lambda request
/// carries at most 6 MB, base64-encoded).
pub const MAX_UPLOAD_BYTES: usize = 4 * 1024 * 1024;
/// The most files one archive may unpack to.
pub const MAX_ARCHIVE_FILES: usize = 500;
/// The most bytes one archive may unpack to (16 MiB): a zip bomb is
/// refused once it passes this, not after.
pub const MAX_ARCHIVE_BYTES: usize = 16 * 1024 * 1024;
/// The longest skill name, in bytes.
pub const MAX_SKILL_NAME: usize = 64;

/// Why an upload cannot become tree files. Messages name the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DocumentError {
    /// Not text, Markdown, HTML or an archive of them.
    #[error("{name}: {reason}")]
    Unsupported {
        /// The file (or archive entry).
        name: String,
        /// What it is and what is accepted.
        reason: String,
    },
    /// A zip archive that cannot be read, or one with an unsafe entry.
    #[error("{name}: {reason}")]
    Archive {
        /// The archive.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// An archive that unpacks to more than [`MAX_ARCHIVE_BYTES`] or
    /// more than [`MAX_ARCHIVE_FILES`] files.
    #[error("{name} unpacks to more than {limit} {unit}")]
    TooLarge {
        /// The archive.
        name: String,
        /// The limit passed.
        limit: usize,
        /// `bytes` or `files`.
        unit: &'static str,
    },
    /// A SKILL.md without a valid `name` or `description`.
    #[error("{0}")]
    Skill(String),
}

/// One file an upload becomes: its path relative to the target
/// (`/`-separated, ending in `.md` for resources) and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    /// The path below the target.
    pub path: String,
    /// The file's text.
    pub text: String,
}

/// What [`resource_documents`] made of an upload.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Converted {
    /// The files, in the archive's order.
    pub documents: Vec<Document>,
    /// Entries left out, each with why (binary entries of an archive,
    /// hidden files).
    pub warnings: Vec<String>,
    /// Whether the upload was an archive (its files go below the target
    /// rather than being it).
    pub archive: bool,
}

/// Whether `bytes` (named `name`) is a zip archive.
#[must_use]
pub fn is_archive(name: &str, bytes: &[u8]) -> bool {
    bytes.starts_with(b"PK\x03\x04") || (bytes.starts_with(b"PK\x05\x06") && extension(name) == "zip")
}

/// The files of a zip archive ([`unpack`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unpacked {
    /// Each file as (path relative to the archive, `/`-separated; bytes).
    pub files: Vec<(String, Vec<u8>)>,
    /// Entries left out, each with why.
    pub warnings: Vec<String>,
}

/// The files of the zip archive `bytes` (named `name`), directories and
/// symbolic links left out, and the entries left out with why (hidden
/// names, macOS resource forks).
///
/// # Errors
/// [`DocumentError::Archive`] for an unreadable archive or an entry whose
/// name leaves the archive (`..`, an absolute path);
/// [`DocumentError::TooLarge`] past [`MAX_ARCHIVE_FILES`] or
/// [`MAX_ARCHIVE_BYTES`].
pub fn unpack(name: &str, bytes: &[u8]) -> Result<Unpacked, DocumentError> {
    let archive_error = |reason: String| DocumentError::Archive { name: name.to_owned(), reason };
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(bytes))
        .map_err(|e| archive_error(format!("not a zip archive: {e}")))?;
    let mut files = Vec::new();
    let mut warnings = Vec::new();
    let mut total = 0usize;
    for i in 0..archive.len() {
        let mut entry = archive.by_index(i).map_err(|e| archive_error(format!("entry {i}: {e}")))?;
        if entry.is_dir() {
            continue;
        }
        let raw_name = entry.name().map_or_else(|_| format!("entry {i}"), |n| n.into_owned());
        let Some(path) = entry.enclosed_name() else {
            return Err(archive_error(format!("entry {raw_name:?} leaves the archive")));
        };
        let path: Vec<String> = path
            .components()
            .filter_map(|c| match c {
                std::path::Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
                _ => None,
            })
            .collect();
        if entry.is_symlink() {
            warnings.push(format!("{raw_name}: a symbolic link, left out"));
            continue;
        }
        if path.is_empty() || path.iter().any(|s| s.starts_with('.') || s == "__MACOSX") {
            warnings.push(format!("{raw_name}: a hidden file, left out"));
            continue;
        }
        if files.len() == MAX_ARCHIVE_FILES {
            return Err(DocumentError::TooLarge { name: name.to_owned(), limit: MAX_ARCHIVE_FILES, unit: "files" });
        }
        // Read at most one byte past what is left, whatever the entry's
        // header claims: the header of a bomb lies.
        let left = MAX_ARCHIVE_BYTES - total;
        let mut body = Vec::new();
        (&mut entry)
            .take(left as u64 + 1)
            .read_to_end(&mut body)
            .map_err(|e| archive_error(format!("entry {raw_name:?}: {e}")))?;
        if body.len() > left {
            return Err(DocumentError::TooLarge { name: name.to_owned(), limit: MAX_ARCHIVE_BYTES, unit: "bytes" });
        }
        total += body.len();
        files.push((path.join("/"), body));
    }
    Ok(Unpacked { files, warnings })
}

/// What the upload `bytes` (named `name`) becomes as a resource: one
/// Markdown document named after it, or, for a zip archive, one per
/// text entry (binary entries are skipped with a warning).
///
/// # Errors
/// [`DocumentError::Unsupported`] for a single file that is not text,
/// Markdown or HTML, or an archive with no such entry; [`unpack`]'s errors.
pub fn resource_documents(name: &str, bytes: &[u8]) -> Result<Converted, DocumentError> {
    if is_archive(name, bytes) {
        let Unpacked { files, mut warnings } = unpack(name, bytes)?;
        let mut documents = Vec::with_capacity(files.len());
        for (path, body) in files {
            match to_markdown(&path, &body) {
                Ok(document) => documents.push(document),
                Err(e) => warnings.push(format!("{e}, left out")),
            }
        }
        if documents.is_empty() {
            return Err(DocumentError::Unsupported {
                name: name.to_owned(),
                reason: "the archive holds no text, Markdown or HTML file".into(),
            });
        }
        return Ok(Converted { documents, warnings, archive: true });
    }
    Ok(Converted { documents: vec![to_markdown(name, bytes)?], warnings: Vec::new(), archive: false })
}

/// One file as Markdown: `path` with its Markdown name (`a.html` →
/// `a.md`, `main.rs` → `main.rs.md`, `notes.md` unchanged).
///
/// # Errors
/// [`DocumentError::Unsupported`] when the file is not UTF-8 text (a NUL
/// byte or invalid UTF-8) nor a PDF with a text layer, naming it.
pub fn to_markdown(path: &str, bytes: &[u8]) -> Result<Document, DocumentError> {
    let unsupported = |reason: &str| DocumentError::Unsupported {
        name: path.to_owned(),
        reason: format!("{reason}; a resource is text, Markdown, HTML or a PDF with text (or a zip archive of them)"),
    };
    if bytes.starts_with(b"%PDF-") || extension(path) == "pdf" {
        let (dir, file) = path.rsplit_once('/').map_or(("", path), |(d, f)| (d, f));
        let stem = file.rsplit_once('.').map_or(file, |(s, _)| s);
        let text = pdf_to_markdown(stem, bytes).map_err(|reason| unsupported(&reason))?;
        let name = format!("{stem}.md");
        return Ok(Document { path: if dir.is_empty() { name } else { format!("{dir}/{name}") }, text });
    }
    let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    if bytes.contains(&0) {
        return Err(unsupported("a binary file"));
    }
    let Ok(text) = std::str::from_utf8(bytes) else {
        return Err(unsupported("not UTF-8 text"));
    };
    let text = text.replace("\r\n", "\n");
    let (dir, file) = path.rsplit_once('/').map_or(("", path), |(d, f)| (d, f));
    let stem = file.rsplit_once('.').map_or(file, |(s, _)| s);
    let in_dir = |name: String| if dir.is_empty() { name } else { format!("{dir}/{name}") };
    let ext = extension(path);
    let looks_html = {
        let head = text.trim_start().get(..64).unwrap_or(text.trim_start()).to_ascii_lowercase();
        head.starts_with("<!doctype html") || head.starts_with("<html")
    };
    Ok(match ext.as_str() {
        "md" | "markdown" => Document { path: in_dir(format!("{stem}.md")), text },
        "html" | "htm" | "xhtml" => Document { path: in_dir(format!("{stem}.md")), text: html_to_markdown(&text) },
        _ if looks_html && ext.is_empty() => {
            Document { path: in_dir(format!("{file}.md")), text: html_to_markdown(&text) }
        }
        _ => match code_language(&ext) {
            Some(language) => {
                let fence = fence_for(&text);
                let body = format!("# {file}\n\n{fence}{language}\n{}\n{fence}\n", text.trim_end_matches('\n'));
                Document { path: in_dir(format!("{file}.md")), text: body }
            }
            None => Document { path: in_dir(format!("{file}.md")), text },
        },
    })
}

/// The most pages of a PDF read.
pub const MAX_PDF_PAGES: usize = 2_000;

/// A PDF's text layer as Markdown: `# {title}`, then each page's text, pages
/// separated by a blank line. Each page's decompressed content is bounded
/// ([`MAX_ARCHIVE_BYTES`]), and so is the whole text.
///
/// # Errors
/// Why it cannot be read (not a PDF, encrypted, no text layer), as a reason.
fn pdf_to_markdown(title: &str, bytes: &[u8]) -> Result<String, String> {
    let document = lopdf::Document::load_mem(bytes).map_err(|e| format!("not a readable PDF ({e})"))?;
    if document.is_encrypted() {
        return Err("an encrypted PDF".into());
    }
    let mut pages = Vec::new();
    let mut total = 0usize;
    for number in document.get_pages().into_keys().take(MAX_PDF_PAGES) {
        let text = document
            .extract_text_with_limit(&[number], MAX_ARCHIVE_BYTES)
            .map_err(|e| format!("page {number} cannot be read ({e})"))?;
        let text: Vec<&str> = text.lines().map(str::trim_end).collect();
        let text = text.join("\n").trim().to_owned();
        total += text.len();
        if total > MAX_ARCHIVE_BYTES {
            return Err(format!("a PDF whose text passes {MAX_ARCHIVE_BYTES} bytes"));
        }
        if !text.is_empty() {
            pages.push(text);
        }
    }
    if pages.is_empty() {
        return Err("a PDF without a text layer (a scan? run OCR first)".into());
    }
    Ok(format!("# {title}\n\n{}\n", pages.join("\n\n")))
}

/// `name`'s extension, lowercase (`""` when none).
fn extension(name: &str) -> String {
    let file = name.rsplit('/').next().unwrap_or(name);
    file.rsplit_once('.').filter(|(stem, _)| !stem.is_empty()).map_or_else(String::new, |(_, e)| e.to_ascii_lowercase())
}

/// The fence language of a source file's extension (`None`: prose).
fn code_language(ext: &str) -> Option<&str> {
    const CODE: &[(&str, &str)] = &[
        ("rs", "rust"),
        ("py", "python"),
        ("js", "javascript"),
        ("mjs", "javascript"),
        ("ts", "typescript"),
        ("tsx", "tsx"),
        ("jsx", "jsx"),
        ("go", "go"),
        ("java", "java"),
        ("kt", "kotlin"),
        ("c", "c"),
        ("h", "c"),
        ("cc", "cpp"),
        ("cpp", "cpp"),
        ("hpp", "cpp"),
        ("cs", "csharp"),
        ("rb", "ruby"),
        ("php", "php"),
        ("swift", "swift"),
        ("scala", "scala"),
        ("sh", "sh"),
        ("bash", "bash"),
        ("sql", "sql"),
        ("json", "json"),
        ("yaml", "yaml"),
        ("yml", "yaml"),
        ("toml", "toml"),
        ("xml", "xml"),
        ("css", "css"),
        ("lua", "lua"),
        ("r", "r"),
    ];
    CODE.iter().find(|(e, _)| *e == ext).map(|(_, language)| *language)
}

/// A backtick fence longer than any run of backticks in `text`.
fn fence_for(text: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    "`".repeat((longest + 1).max(3))
}

/// The readable text of an HTML page as Markdown: headings as `#` lines,
/// paragraphs, list items and table rows on their own lines, links as
/// `[text](href)`, `pre` as fenced code; scripts, styles, navigation and
/// forms left out; the common entities decoded. The page's `<title>`
/// heads the text when it has no `h1`.
#[must_use]
pub fn html_to_markdown(html: &str) -> String {
    let Ok(dom) = tl::parse(html, tl::ParserOptions::default()) else {
        return html.to_owned();
    };
    let parser = dom.parser();
    let mut out = Markdown::default();
    for handle in dom.children() {
        walk(*handle, parser, &mut out);
    }
    let has_h1 = dom.query_selector("h1").is_some_and(|mut q| q.next().is_some());
    let title = dom
        .query_selector("title")
        .and_then(|mut q| q.next())
        .and_then(|h| h.get(parser))
        .map(|n| decode_entities(&n.inner_text(parser)).trim().to_owned())
        .filter(|t| !t.is_empty());
    let body = out.finish();
    match title {
        Some(title) if !has_h1 => format!("# {title}\n\n{body}"),
        _ => body,
    }
}

/// Markdown being built: blocks separated by blank lines, whitespace in
/// text collapsed.
#[derive(Default)]
struct Markdown {
    text: String,
}

impl Markdown {
    fn block(&mut self) {
        let trimmed = self.text.trim_end_matches([' ', '\n']).len();
        self.text.truncate(trimmed);
        if !self.text.is_empty() {
            self.text.push_str("\n\n");
        }
    }

    fn line(&mut self) {
        let trimmed = self.text.trim_end_matches(' ').len();
        self.text.truncate(trimmed);
        if !self.text.is_empty() && !self.text.ends_with('\n') {
            self.text.push('\n');
        }
    }

    /// Raw HTML text: entities decoded, then as [`Markdown::push_words`].
    fn push_text(&mut self, raw: &str) {
        self.push_words(&decode_entities(raw));
    }

    /// Text with its whitespace collapsed; a space before or after it
    /// when it had one there.
    fn push_words(&mut self, text: &str) {
        let at_line_start = self.text.is_empty() || self.text.ends_with(['\n', ' ']);
        if text.starts_with(char::is_whitespace) && !at_line_start {
            self.text.push(' ');
        }
        let words: Vec<&str> = text.split_whitespace().collect();
        self.text.push_str(&words.join(" "));
        if !words.is_empty() && text.ends_with(char::is_whitespace) {
            self.text.push(' ');
        }
    }

    fn finish(self) -> String {
        let mut text = self.text.trim().to_owned();
        text.push('\n');
        text
    }
}

fn walk(handle: tl::NodeHandle, parser: &tl::Parser<'_>, out: &mut Markdown) {
    let Some(node) = handle.get(parser) else { return };
    match node {
        tl::Node::Raw(bytes) => out.push_text(&bytes.as_utf8_str()),
        tl::Node::Comment(_) => {}
        tl::Node::Tag(tag) => {
            let name = tag.name().as_utf8_str().to_ascii_lowercase();
            let children = |out: &mut Markdown| {
                for child in tag.children().top().iter() {
                    walk(*child, parser, out);
                }
            };
            match name.as_str() {
                "script" | "style" | "noscript" | "template" | "nav" | "form" | "svg" | "head" | "iframe"
                | "button" | "select" => {}
                "h1" | "h2" | "h3" | "h4" | "h5" | "h6" => {
                    out.block();
                    let level = usize::from(name.as_bytes()[1] - b'0');
                    out.text.push_str(&"#".repeat(level));
                    out.text.push(' ');
                    children(out);
                    out.block();
                }
                "p" | "div" | "section" | "article" | "main" | "header" | "footer" | "blockquote" | "table" | "ul"
                | "ol" | "dl" | "figure" => {
                    out.block();
                    children(out);
                    out.block();
                }
                "li" => {
                    out.line();
                    out.text.push_str("- ");
                    children(out);
                    out.line();
                }
                "tr" | "dt" | "dd" => {
                    out.line();
                    children(out);
                    out.line();
                }
                "td" | "th" => {
                    children(out);
                    out.text.push_str(" | ");
                }
                "br" => out.line(),
                "hr" => {
                    out.block();
                    out.text.push_str("---");
                    out.block();
                }
                "pre" => {
                    out.block();
                    let code = decode_entities(&node.inner_text(parser));
                    let fence = fence_for(&code);
                    out.text.push_str(&format!("{fence}\n{}\n{fence}", code.trim_end_matches('\n')));
                    out.block();
                }
                "a" => {
                    let href = tag.attributes().get("href").flatten().map(|h| h.as_utf8_str().into_owned());
                    let mut inner = Markdown::default();
                    for child in tag.children().top().iter() {
                        walk(*child, parser, &mut inner);
                    }
                    let text = inner.text.trim().to_owned();
                    match href.filter(|h| h.starts_with("http://") || h.starts_with("https://")) {
                        Some(href) if !text.is_empty() => out.push_words(&format!("[{text}]({href})")),
                        _ => out.push_words(&text),
                    }
                }
                "strong" | "b" => {
                    out.push_words("**");
                    let at = out.text.len();
                    children(out);
                    if out.text.len() == at {
                        out.text.truncate(at.saturating_sub(2));
                    } else {
                        out.text.push_str("**");
                    }
                }
                "code" => {
                    let code = decode_entities(&node.inner_text(parser));
                    out.push_words(&format!("`{}`", code.trim()));
                }
                _ => children(out),
            }
        }
    }
}

/// `text` with HTML's common named entities and numeric references
/// decoded (others are left as written).
fn decode_entities(text: &str) -> String {
    if !text.contains('&') {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let end = rest.find(';').filter(|&e| e <= 10);
        let decoded = end.and_then(|e| {
            let entity = &rest[1..e];
            let c = match entity {
                "amp" => '&',
                "lt" => '<',
                "gt" => '>',
                "quot" => '"',
                "apos" => '\'',
                "nbsp" => ' ',
                "mdash" => '—',
                "ndash" => '–',
                "hellip" => '…',
                "copy" => '©',
                _ => {
                    let number = entity.strip_prefix('#')?;
                    let code = match number.strip_prefix(['x', 'X']) {
                        Some(hex) => u32::from_str_radix(hex, 16).ok()?,
                        None => number.parse().ok()?,
                    };
                    char::from_u32(code).filter(|c| !c.is_control() || c.is_whitespace())?
                }
            };
            Some((c, e))
        });
        match decoded {
            Some((c, e)) => {
                out.push(c);
                rest = &rest[e + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// A skill: its name and description (from the SKILL.md frontmatter) and
/// the SKILL.md text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    /// The skill's name: its directory under the skills root.
    pub name: String,
    /// What it is for (what `find` and listings show).
    pub description: String,
    /// The whole SKILL.md.
    pub text: String,
}

/// The skill a SKILL.md text declares.
///
/// # Errors
/// [`DocumentError::Skill`] when the frontmatter has no `name` or no
/// `description`, or the name is not 1–64 letters, digits, `-`, `_` or
/// `.` (not starting with `.`).
pub fn parse_skill(text: &str) -> Result<Skill, DocumentError> {
    let text = text.replace("\r\n", "\n");
    let Some(frontmatter) = split_frontmatter(&text).frontmatter else {
        return Err(DocumentError::Skill(
            "SKILL.md has no frontmatter: it starts with a `---` block holding `name:` and `description:`".into(),
        ));
    };
    let field = |key: &str| {
        frontmatter.lines().find_map(|line| {
            let value = line.strip_prefix(key)?.strip_prefix(':')?.trim();
            Some(value.trim_matches(['"', '\'']).to_owned())
        })
    };
    let name = field("name").filter(|n| !n.is_empty());
    let description = field("description").filter(|d| !d.is_empty());
    let (Some(name), Some(description)) = (name, description) else {
        return Err(DocumentError::Skill("SKILL.md's frontmatter needs both `name:` and `description:`".into()));
    };
    check_skill_name(&name)?;
    Ok(Skill { name, description, text })
}

/// A SKILL.md for `name` and `description` with `body` below its
/// frontmatter (what a skill given as fields becomes).
///
/// # Errors
/// As [`parse_skill`].
pub fn skill_from_fields(name: &str, description: &str, body: &str) -> Result<Skill, DocumentError> {
    let one_line = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let text =
        format!("---\nname: {}\ndescription: {}\n---\n\n{}\n", one_line(name), one_line(description), body.trim());
    parse_skill(&text)
}

/// Checks a skill name: 1–[`MAX_SKILL_NAME`] bytes of ASCII letters,
/// digits, `-`, `_` and `.`, not starting with `.`.
///
/// # Errors
/// [`DocumentError::Skill`] naming the name.
pub fn check_skill_name(name: &str) -> Result<(), DocumentError> {
    let valid = !name.is_empty()
        && name.len() <= MAX_SKILL_NAME
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if valid {
        Ok(())
    } else {
        Err(DocumentError::Skill(format!(
            "skill name {name:?} must be 1-{MAX_SKILL_NAME} letters, digits, '-', '_' or '.', not starting with '.'"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
        use std::io::Write as _;
        let mut out = std::io::Cursor::new(Vec::new());
        let mut writer = zip::ZipWriter::new(&mut out);
        for (name, body) in entries {
            writer.start_file(*name, zip::write::SimpleFileOptions::default()).expect("start");
            writer.write_all(body).expect("write");
        }
        writer.finish().expect("finish");
        out.into_inner()
    }

    #[test]
    fn each_kind_of_file_becomes_markdown_under_its_name() {
        let cases: &[(&str, &str, &str, &str)] = &[
            ("notes.md", "# Notes\n\nplain", "notes.md", "# Notes\n\nplain"),
            ("guide.markdown", "# G", "guide.md", "# G"),
            ("readme.txt", "just text\r\nsecond", "readme.txt.md", "just text\nsecond"),
            ("LICENSE", "MIT", "LICENSE.md", "MIT"),
            ("lib.rs", "fn main() {}\n", "lib.rs.md", "# lib.rs\n\n```rust\nfn main() {}\n```\n"),
            ("a.py", "x = '```'", "a.py.md", "# a.py\n\n````python\nx = '```'\n````\n"),
            ("page.html", "<html><body><h1>Hi</h1><p>there</p></body></html>", "page.md", "# Hi\n\nthere\n"),
        ];
        for (name, body, path, text) in cases {
            let document = to_markdown(name, body.as_bytes()).expect(name);
            assert_eq!((document.path.as_str(), document.text.as_str()), (*path, *text), "{name}");
        }
    }

    #[test]
    fn binary_pdf_and_invalid_utf8_are_refused_by_name() {
        for (name, body) in
            [("a.png", &b"\x89PNG\r\n\x1a\n\0\0"[..]), ("b.pdf", b"%PDF-1.7\nnot really"), ("c.txt", b"caf\xe9")]
        {
            let error = to_markdown(name, body).expect_err(name);
            assert!(error.to_string().starts_with(name), "{error}");
        }
    }

    /// A PDF of `pages`, each a list of text lines (lopdf's own builder).
    fn pdf_of(pages: &[&[&str]]) -> Vec<u8> {
        use lopdf::content::{Content, Operation};
        use lopdf::{Object, Stream, dictionary};
        let mut doc = lopdf::Document::with_version("1.5");
        let pages_id = doc.new_object_id();
        let font_id = doc.add_object(dictionary! { "Type" => "Font", "Subtype" => "Type1", "BaseFont" => "Courier" });
        let resources_id = doc.add_object(dictionary! { "Font" => dictionary! { "F1" => font_id } });
        let mut kids = Vec::new();
        for lines in pages {
            let mut operations = vec![Operation::new("BT", vec![]), Operation::new("Tf", vec!["F1".into(), 12.into()])];
            for (i, line) in lines.iter().enumerate() {
                let y = 700 - 20 * i64::try_from(i).unwrap_or(0);
                operations
                    .push(Operation::new("Tm", vec![1.into(), 0.into(), 0.into(), 1.into(), 72.into(), y.into()]));
                operations.push(Operation::new("Tj", vec![Object::string_literal(*line)]));
            }
            operations.push(Operation::new("ET", vec![]));
            let content = Content { operations }.encode().expect("encode");
            let content_id = doc.add_object(Stream::new(dictionary! {}, content));
            let page_id = doc.add_object(dictionary! {
                "Type" => "Page", "Parent" => pages_id, "Contents" => content_id,
                "Resources" => resources_id, "MediaBox" => vec![0.into(), 0.into(), 595.into(), 842.into()],
            });
            kids.push(page_id.into());
        }
        let count = i64::try_from(kids.len()).unwrap_or(0);
        doc.objects
            .insert(pages_id, Object::Dictionary(dictionary! { "Type" => "Pages", "Kids" => kids, "Count" => count }));
        let catalog_id = doc.add_object(dictionary! { "Type" => "Catalog", "Pages" => pages_id });
        doc.trailer.set("Root", catalog_id);
        doc.compress();
        let mut out = Vec::new();
        doc.save_to(&mut out).expect("save");
        out
    }

    #[test]
    fn a_pdf_becomes_its_text_page_by_page() {
        let bytes = pdf_of(&[&["Tide tables for Brest"], &["High water at 06:12", "Low water at 12:31"]]);
        let document = to_markdown("docs/tides.pdf", &bytes).expect("a PDF with text");
        assert_eq!(document.path, "docs/tides.md");
        assert!(document.text.starts_with("# tides\n\n"), "{}", document.text);
        for line in ["Tide tables for Brest", "High water at 06:12", "Low water at 12:31"] {
            assert!(document.text.contains(line), "{line} not in {}", document.text);
        }
        let blank = pdf_of(&[&[]]);
        let error = to_markdown("scan.pdf", &blank).expect_err("no text layer");
        assert!(error.to_string().contains("without a text layer"), "{error}");
    }

    #[test]
    fn html_keeps_the_readable_text_and_drops_the_rest() {
        let html = r#"<!DOCTYPE html><html><head><title>Kyoto &amp; Nara</title><style>p{}</style></head>
            <body><nav><a href="/">home</a></nav><script>var x = 1;</script>
            <h2>Getting  there</h2><p>Take the <a href="https://jr.example/">JR line</a>, about 45&nbsp;minutes.</p>
            <ul><li>one</li><li><b>two</b></li></ul><pre>let x = 1;
let y = 2;</pre></body></html>"#;
        assert_eq!(
            html_to_markdown(html),
            "# Kyoto & Nara\n\n## Getting there\n\nTake the [JR line](https://jr.example/), about 45 minutes.\n\n\
             - one\n- **two**\n\n```\nlet x = 1;\nlet y = 2;\n```\n"
        );
    }

    #[test]
    fn archives_unpack_text_and_skip_the_rest_with_warnings() {
        let bytes = zip_of(&[
            ("docs/a.md", b"# A"),
            ("docs/img.png", b"\x89PNG\0"),
            (".git/config", b"x"),
            ("src/main.rs", b"fn main() {}"),
        ]);
        let converted = resource_documents("project.zip", &bytes).expect("converted");
        let paths: Vec<_> = converted.documents.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(paths, ["docs/a.md", "src/main.rs.md"]);
        assert!(converted.archive);
        assert_eq!(converted.warnings.len(), 2, "{:?}", converted.warnings);
    }

    #[test]
    fn archives_past_their_limits_or_leaving_the_tree_are_refused() {
        let traversal = zip_of(&[("../evil.md", b"x")]);
        assert!(matches!(unpack("t.zip", &traversal), Err(DocumentError::Archive { .. })));
        let many: Vec<(String, Vec<u8>)> = (0..=MAX_ARCHIVE_FILES).map(|i| (format!("f{i}.md"), vec![b'a'])).collect();
        let refs: Vec<(&str, &[u8])> = many.iter().map(|(n, b)| (n.as_str(), b.as_slice())).collect();
        assert!(matches!(unpack("m.zip", &zip_of(&refs)), Err(DocumentError::TooLarge { unit: "files", .. })));
        let big = vec![b'a'; MAX_ARCHIVE_BYTES / 2 + 1];
        let bomb = zip_of(&[("a.md", &big), ("b.md", &big)]);
        assert!(matches!(unpack("b.zip", &bomb), Err(DocumentError::TooLarge { unit: "bytes", .. })));
        assert!(matches!(unpack("n.zip", b"PK\x03\x04garbage"), Err(DocumentError::Archive { .. })));
    }

    #[test]
    fn skills_need_a_valid_name_and_a_description() {
        let skill = parse_skill("---\nname: pdf-tools\ndescription: \"Work with PDFs\"\n---\n# Use\n").expect("valid");
        assert_eq!((skill.name.as_str(), skill.description.as_str()), ("pdf-tools", "Work with PDFs"));
        for bad in [
            "# no frontmatter",
            "---\nname: x\n---\n",
            "---\ndescription: d\n---\n",
            "---\nname: ../up\ndescription: d\n---\n",
            "---\nname: .hidden\ndescription: d\n---\n",
        ] {
            assert!(parse_skill(bad).is_err(), "{bad}");
        }
        let built = skill_from_fields("deploy", "Ships it\nsafely", "Run the script.").expect("valid");
        assert_eq!(built.text, "---\nname: deploy\ndescription: Ships it safely\n---\n\nRun the script.\n");
    }
}
