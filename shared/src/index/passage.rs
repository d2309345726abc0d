//! Passages: how a long file is cut into short, contiguous pieces that are
//! indexed beside the file's own record, so that a question answered by
//! one paragraph of a long document finds that paragraph, and a block can
//! show it whole. Pure: no I/O.
//!
//! The cut follows the text's own structure. Blocks are runs of non-blank
//! lines (a fenced code block is one block, blank lines and all); a
//! Markdown heading always starts a block. A block longer than
//! [`PassageOptions::max_unit_tokens`] falls apart into its lines (a
//! conversation's turns), and a line longer than that into sentences
//! (`.` `!` `?` and their CJK forms), then into character runs. The
//! pieces are packed in order into passages of about
//! [`PassageOptions::target_tokens`]; a heading starts a new passage once
//! the current one holds a quarter of the target. When a passage closes
//! for size, the next one repeats its last piece if that piece is short
//! (at most a third of the target): the little overlap that keeps a
//! question and its answer, or a turn and its reply, together.

use super::extract::{full_text, heading_level, heading_text};
use crate::tokens::estimate_tokens;

/// How files are cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PassageOptions {
    /// Files whose full text (without frontmatter) is at least this many
    /// tokens get passages. Default [`DEFAULT_MIN_FILE_TOKENS`].
    pub min_file_tokens: usize,
    /// The size passages are packed to. Default [`DEFAULT_TARGET_TOKENS`].
    pub target_tokens: usize,
    /// The largest piece kept whole. Default [`DEFAULT_MAX_UNIT_TOKENS`].
    pub max_unit_tokens: usize,
}

/// Files from about 2 KB of English (512 tokens) get passages: shorter
/// ones are shown whole in a block anyway.
pub const DEFAULT_MIN_FILE_TOKENS: usize = 512;
/// Passages of about 192 tokens: a paragraph or two, a few turns.
pub const DEFAULT_TARGET_TOKENS: usize = 192;
/// Pieces up to 256 tokens are kept whole.
pub const DEFAULT_MAX_UNIT_TOKENS: usize = 256;
/// Passages one file gets at most: a longer file gets longer passages.
pub const MAX_PASSAGES: usize = 1024;

impl Default for PassageOptions {
    fn default() -> Self {
        Self {
            min_file_tokens: DEFAULT_MIN_FILE_TOKENS,
            target_tokens: DEFAULT_TARGET_TOKENS,
            max_unit_tokens: DEFAULT_MAX_UNIT_TOKENS,
        }
    }
}

/// One passage of a file's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    /// Its first byte in the file's text (frontmatter included).
    pub start: usize,
    /// One past its last byte (trailing blank space excluded).
    pub end: usize,
    /// Its first line, 1-based.
    pub first_line: u32,
    /// Its last line, 1-based.
    pub last_line: u32,
    /// The headings it sits under, outermost first, joined by ` > `
    /// (empty when none).
    pub headings: String,
}

/// A contiguous range of the text that packing keeps whole.
#[derive(Debug, Clone)]
struct Unit {
    start: usize,
    end: usize,
    tokens: usize,
    heading: Option<usize>,
}

/// The passages of `text` (a file as stored), in order; none when its
/// full text is shorter than `options.min_file_tokens`.
///
/// Cost: one pass over the text plus a token estimate of each piece.
#[must_use]
pub fn split(text: &str, options: &PassageOptions) -> Vec<Piece> {
    let region = full_text(text);
    let total = estimate_tokens(region);
    if region.is_empty() || total < options.min_file_tokens.max(1) {
        return Vec::new();
    }
    // `full_text` returns a slice of `text`.
    let base = region.as_ptr() as usize - text.as_ptr() as usize;
    let target = options.target_tokens.max(16).max(total.div_ceil(MAX_PASSAGES) + total.div_ceil(MAX_PASSAGES * 4));
    let max_unit = options.max_unit_tokens.max(target);
    let mut units = Vec::new();
    for (start, end, heading) in blocks(region) {
        let tokens = estimate_tokens(&region[start..end]);
        if tokens <= max_unit || heading.is_some() {
            units.push(Unit { start, end, tokens, heading });
        } else {
            split_block(region, start, end, max_unit, &mut units);
        }
    }
    let packed = pack(&units, target);
    let mut trail: Vec<(usize, String)> = Vec::new();
    let mut next_heading = 0;
    let headings: Vec<(usize, usize, String)> = units
        .iter()
        .filter_map(|u| u.heading.map(|level| (u.start, level, heading_text(&region[u.start..u.end]).to_owned())))
        .collect();
    let mut out = Vec::with_capacity(packed.len());
    for (start, end) in packed {
        // The headings in force at the passage's start (its own first line
        // included when it is one).
        while let Some((at, level, title)) = headings.get(next_heading) {
            if *at > start {
                break;
            }
            trail.retain(|(l, _)| l < level);
            trail.push((*level, title.clone()));
            next_heading += 1;
        }
        let (start, end) = (base + start, base + end);
        let first_line = line_of(text, start);
        let last_line = first_line + count_newlines(&text[start..end]);
        out.push(Piece {
            start,
            end,
            first_line,
            last_line,
            headings: trail.iter().map(|(_, t)| t.as_str()).collect::<Vec<_>>().join(" > "),
        });
    }
    out
}

fn count_newlines(text: &str) -> u32 {
    u32::try_from(text.bytes().filter(|&b| b == b'\n').count()).unwrap_or(u32::MAX)
}

fn line_of(text: &str, at: usize) -> u32 {
    count_newlines(&text[..at]).saturating_add(1)
}

/// The blocks of `region`: `(start, end, heading level)`, trailing blank
/// space excluded; a heading line is a block of its own.
fn blocks(region: &str) -> Vec<(usize, usize, Option<usize>)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, usize)> = None;
    let mut in_fence = false;
    let mut offset = 0;
    for line in region.split_inclusive('\n') {
        let (at, trimmed) = (offset, line.trim_end());
        offset += line.len();
        let fence = trimmed.trim_start().starts_with("```") || trimmed.trim_start().starts_with("~~~");
        if in_fence {
            if let Some(block) = &mut current {
                block.1 = at + trimmed.len();
            }
            in_fence = !fence;
            continue;
        }
        if let Some(level) = heading_level(line) {
            out.extend(current.take().map(|(s, e)| (s, e, None)));
            out.push((at, at + trimmed.len(), Some(level)));
            continue;
        }
        if trimmed.trim_start().is_empty() {
            out.extend(current.take().map(|(s, e)| (s, e, None)));
            continue;
        }
        in_fence = fence;
        match &mut current {
            Some(block) => block.1 = at + trimmed.len(),
            None => current = Some((at, at + trimmed.len())),
        }
    }
    out.extend(current.map(|(s, e)| (s, e, None)));
    out
}

/// Splits the block `region[start..end]` into lines, and lines longer than
/// `max` into sentences and then character runs.
fn split_block(region: &str, start: usize, end: usize, max: usize, units: &mut Vec<Unit>) {
    let mut offset = start;
    for line in region[start..end].split_inclusive('\n') {
        let (at, trimmed) = (offset, line.trim_end());
        offset += line.len();
        if trimmed.trim_start().is_empty() {
            continue;
        }
        let tokens = estimate_tokens(trimmed);
        if tokens <= max {
            units.push(Unit { start: at, end: at + trimmed.len(), tokens, heading: None });
            continue;
        }
        let mut piece_start = at;
        let mut piece_tokens = 0;
        for (i, sentence) in sentences(trimmed) {
            let tokens = estimate_tokens(sentence);
            let sentence_start = at + i;
            if piece_tokens > 0 && piece_tokens + tokens > max {
                units.push(Unit { start: piece_start, end: sentence_start, tokens: piece_tokens, heading: None });
                piece_start = sentence_start;
                piece_tokens = 0;
            }
            if tokens > max {
                // One sentence longer than a piece: character runs.
                let mut run_start = sentence_start;
                let mut rest = sentence;
                while !rest.is_empty() {
                    let run = crate::tokens::truncate_to_tokens(rest, max);
                    let run = if run.is_empty() { &rest[..rest.chars().next().map_or(0, char::len_utf8)] } else { run };
                    units.push(Unit {
                        start: run_start,
                        end: run_start + run.len(),
                        tokens: estimate_tokens(run),
                        heading: None,
                    });
                    run_start += run.len();
                    rest = &rest[run.len()..];
                }
                piece_start = run_start;
            } else {
                piece_tokens += tokens;
            }
        }
        if piece_tokens > 0 {
            units.push(Unit { start: piece_start, end: at + trimmed.len(), tokens: piece_tokens, heading: None });
        }
    }
}

/// `line` cut after each sentence end (`. `, `! `, `? `, `。`, `！`, `？`,
/// `；`): `(offset, sentence)`, covering the line.
fn sentences(line: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut chars = line.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let next = chars.peek().map(|(_, n)| *n);
        let ends = match c {
            '。' | '！' | '？' | '；' => true,
            '.' | '!' | '?' => next.is_some_and(char::is_whitespace),
            _ => false,
        };
        if ends {
            let end = i + c.len_utf8();
            // Keep the following spaces with the sentence they end.
            let end = end + line[end..].len() - line[end..].trim_start().len();
            if end > start {
                out.push((start, &line[start..end]));
                start = end;
            }
        }
    }
    if start < line.len() {
        out.push((start, &line[start..]));
    }
    out
}

/// Packs `units` in order into passages of about `target` tokens:
/// `(start, end)` ranges of the region.
fn pack(units: &[Unit], target: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut first = 0;
    let mut tokens = 0;
    // Whether the passage holds only the piece carried over from the last.
    let mut carried = false;
    let mut i = 0;
    while i < units.len() {
        let unit = &units[i];
        let heading_breaks = unit.heading.is_some() && tokens >= target / 4;
        // A heading stays with what follows it, whatever its size.
        let only_headings = units[first..i].iter().all(|u| u.heading.is_some());
        if i > first && !only_headings && (heading_breaks || tokens + unit.tokens > target) {
            if carried {
                // The overlap does not fit beside the next piece: drop it.
                (first, tokens, carried) = (i, 0, false);
                continue;
            }
            out.push((units[first].start, units[i - 1].end));
            // A little overlap: a short last piece opens the next passage
            // too, unless a heading starts it (or it is one).
            let last = &units[i - 1];
            let overlap = !heading_breaks && last.heading.is_none() && i - 1 > first && last.tokens <= target / 3;
            first = if overlap { i - 1 } else { i };
            carried = overlap;
            tokens = units[first..i].iter().map(|u| u.tokens).sum();
            continue;
        }
        tokens += unit.tokens;
        carried = false;
        i += 1;
    }
    if first < units.len() {
        out.push((units[first].start, units[units.len() - 1].end));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> PassageOptions {
        PassageOptions { min_file_tokens: 20, target_tokens: 40, max_unit_tokens: 50 }
    }

    fn texts<'a>(text: &'a str, pieces: &[Piece]) -> Vec<&'a str> {
        pieces.iter().map(|p| &text[p.start..p.end]).collect()
    }

    fn paragraph(word: &str, words: usize) -> String {
        vec![word; words].join(" ")
    }

    #[test]
    fn short_files_get_no_passages() {
        assert!(split("# Title\n\nA short note.\n", &PassageOptions::default()).is_empty());
        assert!(split("", &small()).is_empty());
    }

    #[test]
    fn paragraphs_pack_and_headings_start_passages() {
        let text = format!(
            "---\ntags: a\n---\n# Guide\n\n{}\n\n{}\n\n## Install\n\n{}\n",
            paragraph("alpha", 30),
            paragraph("beta", 30),
            paragraph("gamma", 30)
        );
        let pieces = split(&text, &small());
        let got = texts(&text, &pieces);
        assert_eq!(got.len(), 3, "{got:?}");
        assert!(got[0].starts_with("# Guide") && got[0].ends_with("alpha"), "{got:?}");
        assert!(got[1].starts_with("beta") && got[1].ends_with("beta"));
        assert!(got[2].starts_with("## Install") && got[2].ends_with("gamma"));
        assert_eq!((pieces[0].first_line, pieces[0].last_line), (4, 6), "frontmatter lines count");
        assert_eq!(pieces[1].first_line, 8);
        assert_eq!(pieces[0].headings, "Guide");
        assert_eq!(pieces[2].headings, "Guide > Install");
    }

    #[test]
    fn turns_of_a_long_conversation_pack_with_a_little_overlap() {
        let turns: Vec<String> =
            (0..12).map(|i| format!("**user{i}**: turn number {i} says a few words here")).collect();
        let text = turns.join("\n");
        let pieces = split(&text, &small());
        let got = texts(&text, &pieces);
        assert!(got.len() > 2, "{got:?}");
        for pair in got.windows(2) {
            let last_turn = pair[0].lines().last().expect("non-empty");
            assert!(pair[1].starts_with(last_turn), "the next passage repeats the short last turn: {pair:?}");
        }
        assert!(got.last().expect("some").ends_with("turn number 11 says a few words here"));
        assert!(got.iter().all(|p| estimate_tokens(p) <= 50 + 12));
    }

    #[test]
    fn cjk_text_and_long_lines_split_at_sentences() {
        let text = "内存检索需要把长文档切成段落。".repeat(40);
        let pieces = split(&text, &small());
        let got = texts(&text, &pieces);
        assert!(got.len() > 3, "{got:?}");
        assert!(got.iter().all(|p| p.ends_with('。')), "cut at sentence ends: {got:?}");
        assert!(got.iter().all(|p| estimate_tokens(p) <= 50), "{got:?}");
        assert!(pieces.iter().all(|p| text.is_char_boundary(p.start) && text.is_char_boundary(p.end)));
    }

    #[test]
    fn a_fenced_block_is_not_cut_at_its_blank_lines_or_comments() {
        let code = "```sh\n# not a heading\n\nmake\n```";
        let text = format!("{}\n\n{code}\n\n{}", paragraph("one", 30), paragraph("two", 30));
        let got = texts(&text, &split(&text, &small()));
        assert!(got.iter().any(|p| p.contains(code)), "{got:?}");
    }

    #[test]
    fn passages_cover_every_word_in_order() {
        let mut text = String::new();
        for i in 0..60 {
            text.push_str(&format!("word{i} "));
            if i % 7 == 0 {
                text.push_str("\n\n");
            }
        }
        let pieces = split(&text, &PassageOptions { min_file_tokens: 10, target_tokens: 16, max_unit_tokens: 16 });
        let joined = texts(&text, &pieces).join(" ");
        for i in 0..60 {
            assert!(joined.contains(&format!("word{i}")), "word{i} in {joined}");
        }
        assert!(pieces.windows(2).all(|w| w[0].start <= w[1].start && w[0].end <= w[1].end));
    }
}
