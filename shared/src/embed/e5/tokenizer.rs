//! XLM-RoBERTa's SentencePiece unigram tokenizer, as multilingual-e5
//! uses it: each character rewritten by the normaliser's map, runs of
//! spaces collapsed, a leading space added, spaces turned into `▁`
//! (U+2581), then the most probable split into vocabulary pieces (Viterbi
//! over the pieces' log probabilities); a character no piece covers
//! becomes the unknown piece.

use super::file::Layout;

/// SentencePiece's word-boundary marker.
const SPACE_MARK: char = '\u{2581}';

/// The vocabulary's lookup table: an open-addressing hash table of piece
/// indices (`index + 1`, 0 free), keyed by the pieces' bytes.
#[derive(Debug, Clone)]
pub(crate) struct PieceTable {
    slots: Vec<u32>,
    longest: usize,
    unknown_score: f32,
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

impl PieceTable {
    /// Builds the table over `layout`'s pieces (`pieces` is the file's piece
    /// bytes). Cost: one hash per piece, ~5 ms for 250,002 pieces; 2 MB.
    pub(crate) fn new(layout: &Layout, pieces: &[u8]) -> Self {
        let n = layout.scores.len();
        let size = (n * 2).next_power_of_two().max(2);
        let mut slots = vec![0u32; size];
        let mut longest = 1;
        for i in 0..n {
            let piece = piece(layout, pieces, i);
            if piece.is_empty() {
                continue;
            }
            longest = longest.max(piece.len());
            let mut at = (fnv1a(piece) as usize) & (size - 1);
            while slots[at] != 0 {
                at = (at + 1) & (size - 1);
            }
            slots[at] = i as u32 + 1;
        }
        // As SentencePiece: an unknown character costs ten below the least
        // likely piece.
        let unknown_score = layout.scores.iter().copied().fold(f32::INFINITY, f32::min) - 10.0;
        Self { slots, longest, unknown_score }
    }

    fn find(&self, layout: &Layout, pieces: &[u8], bytes: &[u8]) -> Option<usize> {
        let mask = self.slots.len() - 1;
        let mut at = (fnv1a(bytes) as usize) & mask;
        loop {
            let i = (*self.slots.get(at)? as usize).checked_sub(1)?;
            if piece(layout, pieces, i) == bytes {
                return Some(i);
            }
            at = (at + 1) & mask;
        }
    }
}

fn piece<'a>(layout: &Layout, pieces: &'a [u8], i: usize) -> &'a [u8] {
    let (start, end) = (layout.offsets[i] as usize, layout.offsets[i + 1] as usize);
    pieces.get(start..end).unwrap_or_default()
}

/// The normalised text SentencePiece splits: mapped characters, single
/// spaces, a leading `▁`, every space a `▁`.
fn normalise(layout: &Layout, text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 4);
    let push = |c: char, out: &mut String| {
        let c = if c == ' ' { SPACE_MARK } else { c };
        if !(c == SPACE_MARK && out.ends_with(SPACE_MARK)) {
            out.push(c);
        }
    };
    out.push(SPACE_MARK);
    for c in text.chars() {
        match layout.normalised.binary_search_by_key(&u32::from(c), |(from, _)| *from) {
            Ok(i) => {
                for &r in &layout.replacements[layout.normalised[i].1.clone()] {
                    push(char::from_u32(r).unwrap_or(char::REPLACEMENT_CHARACTER), &mut out);
                }
            }
            Err(_) => push(c, &mut out),
        }
    }
    out
}

/// The piece ids of `text` (no begin or end marker), at most `max` of them
/// (the first ones). Cost: for each character, one lookup per piece length
/// up to the longest piece's bytes.
pub(crate) fn encode(layout: &Layout, table: &PieceTable, pieces: &[u8], text: &str, max: usize) -> Vec<u32> {
    let normal = normalise(layout, text);
    let bytes = normal.as_bytes();
    let bounds: Vec<usize> = normal.char_indices().map(|(i, _)| i).chain([bytes.len()]).collect();
    let chars = bounds.len() - 1;
    // best[e]: the best score of a split of the first e characters, reached
    // by piece `from[e].1` starting at character `from[e].0`.
    let mut best = vec![f32::NEG_INFINITY; chars + 1];
    let mut from: Vec<(usize, Option<usize>)> = vec![(0, None); chars + 1];
    best[0] = 0.0;
    for i in 0..chars {
        if best[i] == f32::NEG_INFINITY {
            continue;
        }
        for e in i + 1..=chars {
            let span = &bytes[bounds[i]..bounds[e]];
            if span.len() > table.longest {
                break;
            }
            if let Some(p) = table.find(layout, pieces, span).filter(|&p| p != layout.unk as usize) {
                let score = best[i] + layout.scores[p];
                if score > best[e] {
                    best[e] = score;
                    from[e] = (i, Some(p));
                }
            }
        }
        let unknown = best[i] + table.unknown_score;
        if unknown > best[i + 1] {
            best[i + 1] = unknown;
            from[i + 1] = (i, None);
        }
    }
    let mut ids = Vec::new();
    let mut e = chars;
    while e > 0 {
        let (start, p) = from[e];
        ids.push(p.map_or(layout.unk, |p| p as u32));
        e = start;
    }
    ids.reverse();
    ids.truncate(max);
    ids
}
