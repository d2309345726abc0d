//! The USE-m3 tokenizer: SentencePiece's `nmt_nfkc` normaliser (the
//! precompiled charsmap, a darts-clone trie walked longest-match first) with
//! its whitespace rules (dummy prefix, `▁` for spaces, extra spaces removed),
//! then unigram Viterbi over the piece scores.
//!
//! It reproduces the reference package's pure-Python tokenizer exactly, and
//! with it that package's quirks: every piece of the vocabulary can match,
//! control pieces (`<unk>`, `<s>`, `</s>`, score 0) included, and the normalised
//! text loses any trailing `▁`, typed or produced from spaces.
//!
//! [`TokenizerTables::from_sentencepiece`] parses `sp.model` once, at
//! conversion time, into tables that are used in place from the model file
//! ([`Tokenizer`]), so opening costs nothing.

use super::darts::{self, Units};

/// The id of the unknown piece.
pub const UNK_ID: u32 = 0;
/// The id added before every sentence.
pub const BOS_ID: u32 = 1;
/// The id added after every sentence.
pub const EOS_ID: u32 = 2;

/// What the escaped space looks like (U+2581, `▁`).
const SPACE: &[u8] = "\u{2581}".as_bytes();

/// Why `sp.model` could not be turned into tokenizer tables.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// The protobuf is malformed (truncated field, bad varint, …).
    #[error("sp.model is not a valid SentencePiece model: {0}")]
    Malformed(&'static str),
    /// A piece is not UTF-8.
    #[error("sp.model piece #{0} is not UTF-8")]
    PieceNotUtf8(usize),
    /// The model has no pieces.
    #[error("sp.model has no pieces")]
    NoPieces,
    /// The piece vocabulary could not be turned into a trie.
    #[error("piece trie: {0}")]
    Trie(#[from] darts::BuildError),
}

/// The parts of a SentencePiece model that tokenisation uses.
#[derive(Debug, Clone, PartialEq)]
pub struct SentencePieceModel {
    /// Pieces in id order.
    pub pieces: Vec<String>,
    /// Their scores (log probabilities), in id order.
    pub scores: Vec<f32>,
    /// The normaliser's precompiled charsmap (empty when the model has none).
    pub charsmap: Vec<u8>,
}

impl SentencePieceModel {
    /// Parses a serialised `ModelProto`: pieces are field 1 (each with its
    /// text in field 1 and score in field 2, score 0 when absent; an entry
    /// without text is skipped), the normaliser spec is field 3 with the
    /// precompiled charsmap in its field 2. The first occurrence of a field
    /// wins, as in the reference reader. Cost: one pass over the bytes.
    ///
    /// # Errors
    /// [`TokenizerError`] for a malformed protobuf, a non-UTF-8 piece, or no
    /// pieces at all.
    pub fn parse(bytes: &[u8]) -> Result<Self, TokenizerError> {
        let mut pieces = Vec::new();
        let mut scores = Vec::new();
        let mut charsmap = None;
        for field in Fields::new(bytes) {
            let (number, value) = field?;
            match (number, value) {
                (1, Value::Bytes(entry)) => {
                    let mut text = None;
                    let mut score = None;
                    for inner in Fields::new(entry) {
                        match inner? {
                            (1, Value::Bytes(t)) if text.is_none() => text = Some(t),
                            (2, Value::Fixed32(s)) if score.is_none() => score = Some(f32::from_le_bytes(s)),
                            _ => {}
                        }
                    }
                    if let Some(t) = text {
                        let piece = std::str::from_utf8(t).map_err(|_| TokenizerError::PieceNotUtf8(pieces.len()))?;
                        pieces.push(piece.to_owned());
                        scores.push(score.unwrap_or(0.0));
                    }
                }
                (3, Value::Bytes(spec)) if charsmap.is_none() => {
                    let mut found = Vec::new();
                    for inner in Fields::new(spec) {
                        if let (2, Value::Bytes(c)) = inner? {
                            found = c.to_vec();
                            break;
                        }
                    }
                    charsmap = Some(found);
                }
                _ => {}
            }
        }
        if pieces.is_empty() {
            return Err(TokenizerError::NoPieces);
        }
        Ok(Self { pieces, scores, charsmap: charsmap.unwrap_or_default() })
    }
}

enum Value<'a> {
    Varint,
    Fixed64,
    Bytes(&'a [u8]),
    Fixed32([u8; 4]),
}

/// A protobuf field reader over one message.
struct Fields<'a> {
    data: &'a [u8],
    pos: usize,
    failed: bool,
}

impl<'a> Fields<'a> {
    fn new(data: &'a [u8]) -> Self {
        Self { data, pos: 0, failed: false }
    }

    fn varint(&mut self) -> Result<u64, TokenizerError> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *self.data.get(self.pos).ok_or(TokenizerError::Malformed("truncated varint"))?;
            self.pos += 1;
            value |= u64::from(byte & 0x7F) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(TokenizerError::Malformed("varint too long"))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], TokenizerError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len());
        let end = end.ok_or(TokenizerError::Malformed("truncated field"))?;
        let slice = &self.data[self.pos..end];
        self.pos = end;
        Ok(slice)
    }

    fn next_field(&mut self) -> Result<(u64, Value<'a>), TokenizerError> {
        let tag = self.varint()?;
        let value = match tag & 7 {
            0 => {
                self.varint()?;
                Value::Varint
            }
            1 => {
                self.take(8)?;
                Value::Fixed64
            }
            2 => {
                let len = usize::try_from(self.varint()?).map_err(|_| TokenizerError::Malformed("length"))?;
                Value::Bytes(self.take(len)?)
            }
            5 => {
                let b = self.take(4)?;
                Value::Fixed32([b[0], b[1], b[2], b[3]])
            }
            _ => return Err(TokenizerError::Malformed("unsupported wire type")),
        };
        Ok((tag >> 3, value))
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u64, Value<'a>), TokenizerError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.data.len() {
            return None;
        }
        let field = self.next_field();
        self.failed = field.is_err();
        Some(field)
    }
}

/// The tokenizer's tables as they are stored in the model file.
#[derive(Debug, Clone)]
pub struct TokenizerTables {
    /// The piece vocabulary as a double array: piece bytes → piece id
    /// (little-endian `u32` units).
    pub piece_trie: Vec<u8>,
    /// Piece scores in id order.
    pub scores: Vec<f32>,
    /// The charsmap's darts-clone trie (little-endian `u32` units; empty
    /// when the model normalises nothing).
    pub charsmap_trie: Vec<u8>,
    /// The charsmap's NUL-terminated replacement strings.
    pub charsmap_normalized: Vec<u8>,
    /// The score of an unknown character: the lowest piece score − 10.
    pub unk_score: f64,
    /// The longest piece, in characters.
    pub max_piece_chars: u32,
}

impl TokenizerTables {
    /// Builds the tables from the bytes of `sp.model`. Cost: parsing the
    /// protobuf and building the piece trie (well under a second for the
    /// 128k-piece USE-m3 model in a release build); done once, at conversion.
    ///
    /// # Errors
    /// [`TokenizerError`] when the model cannot be parsed or its pieces
    /// cannot form a trie (empty, NUL bytes, more than 2^31 ids).
    pub fn from_sentencepiece(sp_model: &[u8]) -> Result<Self, TokenizerError> {
        Self::from_model(&SentencePieceModel::parse(sp_model)?)
    }

    /// Builds the tables from a parsed model (see
    /// [`TokenizerTables::from_sentencepiece`]). A piece repeated in the
    /// vocabulary maps to its last id, as in the reference.
    ///
    /// # Errors
    /// [`TokenizerError`] when the pieces cannot form a trie.
    pub fn from_model(model: &SentencePieceModel) -> Result<Self, TokenizerError> {
        let mut last: std::collections::HashMap<&[u8], u32> = std::collections::HashMap::new();
        for (id, piece) in model.pieces.iter().enumerate() {
            let id = u32::try_from(id).map_err(|_| TokenizerError::Malformed("too many pieces"))?;
            if !piece.is_empty() {
                last.insert(piece.as_bytes(), id);
            }
        }
        let keys: Vec<(&[u8], u32)> = last.into_iter().collect();
        let piece_trie = darts::build(&keys)?;
        let (charsmap_trie, charsmap_normalized) = split_charsmap(&model.charsmap)?;
        let min = model.scores.iter().map(|&s| f64::from(s)).fold(f64::INFINITY, f64::min);
        let max_chars = model.pieces.iter().map(|p| p.chars().count()).max().unwrap_or(0);
        Ok(Self {
            piece_trie,
            scores: model.scores.clone(),
            charsmap_trie,
            charsmap_normalized,
            unk_score: min - 10.0,
            max_piece_chars: u32::try_from(max_chars).map_err(|_| TokenizerError::Malformed("piece length"))?,
        })
    }

    /// A tokenizer reading these tables (tests and tools).
    #[must_use]
    pub fn tokenizer(&self) -> Tokenizer<'_> {
        Tokenizer {
            pieces: Units::new(&self.piece_trie),
            scores: self.scores.as_slice().into(),
            charsmap: Units::new(&self.charsmap_trie),
            normalized: &self.charsmap_normalized,
            unk_score: self.unk_score,
            max_piece_chars: self.max_piece_chars as usize,
        }
    }
}

/// A precompiled charsmap is `u32 trie byte length`, the trie, then the
/// replacement strings.
fn split_charsmap(charsmap: &[u8]) -> Result<(Vec<u8>, Vec<u8>), TokenizerError> {
    if charsmap.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    let (len, rest) = charsmap.split_first_chunk::<4>().ok_or(TokenizerError::Malformed("charsmap header"))?;
    let len = u32::from_le_bytes(*len) as usize;
    if len > rest.len() || !len.is_multiple_of(4) {
        return Err(TokenizerError::Malformed("charsmap trie length"));
    }
    Ok((rest[..len].to_vec(), rest[len..].to_vec()))
}

/// Scores as stored: little-endian `f32`, in owned or mapped memory.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Scores<'a> {
    Owned(&'a [f32]),
    Mapped(&'a [[u8; 4]]),
}

impl<'a> From<&'a [f32]> for Scores<'a> {
    fn from(s: &'a [f32]) -> Self {
        Self::Owned(s)
    }
}

impl Scores<'_> {
    fn get(&self, id: u32) -> Option<f32> {
        match self {
            Self::Owned(s) => s.get(id as usize).copied(),
            Self::Mapped(b) => b.get(id as usize).map(|b| f32::from_le_bytes(*b)),
        }
    }

    fn len(&self) -> usize {
        match self {
            Self::Owned(s) => s.len(),
            Self::Mapped(b) => b.len(),
        }
    }
}

/// A tokenizer over borrowed tables (from the mapped model file or from
/// [`TokenizerTables`]). Cheap to create and to copy.
#[derive(Debug, Clone, Copy)]
pub struct Tokenizer<'a> {
    pieces: Units<'a>,
    scores: Scores<'a>,
    charsmap: Units<'a>,
    normalized: &'a [u8],
    unk_score: f64,
    max_piece_chars: usize,
}

impl<'a> Tokenizer<'a> {
    /// A tokenizer over tables read from a model file.
    pub(crate) fn mapped(
        piece_trie: &'a [u8],
        scores: &'a [u8],
        charsmap_trie: &'a [u8],
        normalized: &'a [u8],
        unk_score: f64,
        max_piece_chars: usize,
    ) -> Self {
        Self {
            pieces: Units::new(piece_trie),
            scores: Scores::Mapped(scores.as_chunks::<4>().0),
            charsmap: Units::new(charsmap_trie),
            normalized,
            unk_score,
            max_piece_chars,
        }
    }

    /// How many pieces the vocabulary has (ids are below this).
    #[must_use]
    pub fn vocab_size(&self) -> usize {
        self.scores.len()
    }

    /// The piece ids of `text` with [`BOS_ID`] first and [`EOS_ID`] last; a
    /// text that normalises to nothing gives `[BOS, UNK, EOS]`. With
    /// `max_tokens` (at least 3 is useful) the pieces are cut after the
    /// first `max_tokens − 2` so that the whole, markers included, fits.
    /// Cost: linear in the text's length (normalisation, then at most
    /// [longest piece] trie steps per character).
    #[must_use]
    pub fn encode(&self, text: &str, max_tokens: Option<usize>) -> Vec<u32> {
        let normalized = self.normalize(text);
        let mut pieces = if normalized.is_empty() { vec![UNK_ID] } else { self.viterbi(&normalized) };
        if let Some(cap) = max_tokens {
            pieces.truncate(cap.saturating_sub(2));
        }
        let mut ids = Vec::with_capacity(pieces.len() + 2);
        ids.push(BOS_ID);
        ids.extend_from_slice(&pieces);
        ids.push(EOS_ID);
        ids
    }

    /// The longest charsmap match at `data[pos..]` (non-empty): its
    /// replacement and how many input bytes it consumes. Without a match the
    /// input character is kept (one byte when it is not valid UTF-8).
    fn normalize_prefix<'x>(&self, data: &'x [u8], pos: usize) -> (&'x [u8], usize)
    where
        'a: 'x,
    {
        let mut best: Option<(usize, u32)> = None;
        if let Some(mut at) = self.charsmap.root() {
            for (i, &byte) in data[pos..].iter().enumerate() {
                let Some((next, value)) = self.charsmap.step(at, byte) else { break };
                if let Some(v) = value {
                    best = Some((i + 1, v));
                }
                at = next;
            }
        }
        if let Some((len, value)) = best
            && (value as usize) < self.normalized.len()
        {
            let rest = &self.normalized[value as usize..];
            let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
            return (&rest[..end], len);
        }
        let first = data[pos];
        let mut len = match first {
            0..0x80 => 1,
            _ if first >> 5 == 0x6 => 2,
            _ if first >> 4 == 0xE => 3,
            _ if first >> 3 == 0x1E => 4,
            _ => 1,
        };
        if (1..len).any(|k| data.get(pos + k).is_none_or(|&b| b & 0xC0 != 0x80)) {
            len = 1;
        }
        (&data[pos..pos + len], len)
    }

    /// SentencePiece normalisation: charsmap replacements, leading, trailing
    /// and repeated spaces removed, a `▁` prefix, spaces written as `▁`.
    #[must_use]
    pub fn normalize(&self, text: &str) -> String {
        let raw = text.as_bytes();
        let n = raw.len();
        let mut pos = 0;
        while pos < n {
            let (piece, used) = self.normalize_prefix(raw, pos);
            if piece != b" " {
                break;
            }
            pos += used;
        }
        if pos >= n {
            return String::new();
        }
        let mut out = Vec::with_capacity(n + 8);
        out.extend_from_slice(SPACE);
        let mut prev_space = true;
        while pos < n {
            let (mut piece, used) = self.normalize_prefix(raw, pos);
            pos += used;
            if prev_space {
                while let [b' ', rest @ ..] = piece {
                    piece = rest;
                }
            }
            let Some(&last) = piece.last() else { continue };
            if piece.contains(&b' ') {
                for &byte in piece {
                    if byte == b' ' {
                        out.extend_from_slice(SPACE);
                    } else {
                        out.push(byte);
                    }
                }
                prev_space = last == b' ';
            } else {
                out.extend_from_slice(piece);
                prev_space = false;
            }
        }
        while out.ends_with(SPACE) {
            out.truncate(out.len() - SPACE.len());
        }
        match String::from_utf8(out) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        }
    }

    /// The best segmentation of a non-empty normalised text: piece scores
    /// summed in `f64`, the earliest start winning ties, an unknown
    /// character (no single-character piece) scored `unk_score`.
    fn viterbi(&self, text: &str) -> Vec<u32> {
        let bytes = text.as_bytes();
        let bounds: Vec<usize> = text.char_indices().map(|(i, _)| i).chain(std::iter::once(bytes.len())).collect();
        let chars = bounds.len() - 1;
        let mut best = vec![-1e38f64; chars + 1];
        best[0] = 0.0;
        let mut start_of = vec![0usize; chars + 1];
        let mut piece_of = vec![UNK_ID; chars + 1];
        let root = self.pieces.root();
        for i in 0..chars {
            let base = best[i];
            let stop = (i + self.max_piece_chars).min(chars);
            let mut single = false;
            let mut at = root;
            'ends: for j in i + 1..=stop {
                let mut value = None;
                for &byte in &bytes[bounds[j - 1]..bounds[j]] {
                    match at.and_then(|c| self.pieces.step(c, byte)) {
                        Some((next, v)) => {
                            at = Some(next);
                            value = v;
                        }
                        None => break 'ends,
                    }
                }
                let Some(id) = value else { continue };
                let Some(score) = self.scores.get(id) else { continue };
                let score = base + f64::from(score);
                if score > best[j] {
                    best[j] = score;
                    start_of[j] = i;
                    piece_of[j] = id;
                }
                if j == i + 1 {
                    single = true;
                }
            }
            if !single {
                let score = base + self.unk_score;
                if score > best[i + 1] {
                    best[i + 1] = score;
                    start_of[i + 1] = i;
                    piece_of[i + 1] = UNK_ID;
                }
            }
        }
        let mut ids = Vec::new();
        let mut p = chars;
        while p > 0 {
            ids.push(piece_of[p]);
            p = start_of[p];
        }
        if ids.is_empty() {
            ids.push(UNK_ID);
        }
        ids.reverse();
        ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model with the given pieces (ids 0..3 are the markers, score 0).
    fn tables(pieces: &[(&str, f32)], charsmap: Vec<u8>) -> TokenizerTables {
        let mut all: Vec<(String, f32)> = vec![("<unk>".into(), 0.0), ("<s>".into(), 0.0), ("</s>".into(), 0.0)];
        all.extend(pieces.iter().map(|(p, s)| ((*p).to_owned(), *s)));
        let model = SentencePieceModel {
            pieces: all.iter().map(|(p, _)| p.clone()).collect(),
            scores: all.iter().map(|(_, s)| *s).collect(),
            charsmap,
        };
        TokenizerTables::from_model(&model).expect("tables")
    }

    /// A charsmap (darts trie + replacements) from (source, replacement).
    fn charsmap(rules: &[(&str, &str)]) -> Vec<u8> {
        let mut normalized = Vec::new();
        let mut keys = Vec::new();
        for (from, to) in rules {
            keys.push((from.as_bytes(), normalized.len() as u32));
            normalized.extend_from_slice(to.as_bytes());
            normalized.push(0);
        }
        let trie = darts::build(&keys).expect("trie");
        let mut out = (trie.len() as u32).to_le_bytes().to_vec();
        out.extend_from_slice(&trie);
        out.extend_from_slice(&normalized);
        out
    }

    #[test]
    fn viterbi_prefers_the_best_total_and_the_earliest_start_on_ties() {
        // ids: 3 ▁, 4 a, 5 b, 6 ab, 7 ▁ab, 8 c
        let t = tables(&[("▁", -1.0), ("a", -2.0), ("b", -2.0), ("ab", -3.5), ("▁ab", -5.0), ("c", -1.0)], vec![]);
        let tok = t.tokenizer();
        // ▁ab: "▁ab" = -5.0, "▁"+"ab" = -4.5 (wins), "▁"+"a"+"b" = -5.0.
        assert_eq!(tok.encode("ab", None), vec![BOS_ID, 3, 6, EOS_ID]);
        // A character without a piece becomes UNK (score min − 10).
        assert_eq!(tok.encode("abz", None), vec![BOS_ID, 3, 6, UNK_ID, EOS_ID]);
        // Equal totals: ▁+a+c (-4.0)... vs ties below.
        let t = tables(&[("▁", -1.0), ("x", -1.0), ("▁x", -2.0)], vec![]);
        // "▁x" (-2.0) and "▁"+"x" (-2.0) tie: the node ending at 2 keeps the
        // first one found, the one starting at 0.
        assert_eq!(t.tokenizer().encode("x", None), vec![BOS_ID, 5, EOS_ID]);
    }

    #[test]
    fn control_pieces_match_like_the_reference() {
        let t = tables(&[("▁", -1.0), ("<", -2.0), (">", -2.0), ("s", -2.0)], vec![]);
        assert_eq!(t.tokenizer().encode("<s>", None), vec![BOS_ID, 3, BOS_ID, EOS_ID]);
    }

    #[test]
    fn empty_and_blank_texts_give_unk() {
        let t = tables(&[("▁", -1.0)], charsmap(&[("\t", " ")]));
        let tok = t.tokenizer();
        assert_eq!(tok.encode("", None), vec![BOS_ID, UNK_ID, EOS_ID]);
        assert_eq!(tok.encode("  \t ", None), vec![BOS_ID, UNK_ID, EOS_ID]);
        // A lone ▁ is stripped as trailing whitespace.
        assert_eq!(tok.encode("\u{2581}", None), vec![BOS_ID, UNK_ID, EOS_ID]);
    }

    #[test]
    fn normaliser_replaces_longest_matches_and_squeezes_spaces() {
        let t = tables(&[], charsmap(&[("Ａ", "A"), ("ＡＢ", "ab"), ("\t", " "), ("ﬁ", "f i"), ("x", "")]));
        let tok = t.tokenizer();
        assert_eq!(tok.normalize("ＡＢＡ"), "▁abA");
        assert_eq!(tok.normalize("  a \t  b  "), "▁a▁b");
        assert_eq!(tok.normalize("ﬁ"), "▁f▁i");
        assert_eq!(tok.normalize(" ﬁ ﬁ"), "▁f▁i▁f▁i");
        assert_eq!(tok.normalize("axb"), "▁ab");
        assert_eq!(tok.normalize("a x b"), "▁a▁b");
        assert_eq!(tok.normalize("中文"), "▁中文");
    }

    #[test]
    fn cap_keeps_the_markers() {
        let t = tables(&[("▁", -1.0), ("a", -1.0)], vec![]);
        let tok = t.tokenizer();
        assert_eq!(tok.encode("aaaa", None).len(), 7);
        assert_eq!(tok.encode("aaaa", Some(4)), vec![BOS_ID, 3, 4, EOS_ID]);
    }

    #[test]
    fn protobuf_reader_takes_pieces_scores_and_charsmap() {
        fn field(n: u8, body: &[u8]) -> Vec<u8> {
            let mut v = vec![n << 3 | 2, body.len() as u8];
            v.extend_from_slice(body);
            v
        }
        let mut piece = field(1, b"ab");
        piece.push(2 << 3 | 5);
        piece.extend_from_slice(&(-1.5f32).to_le_bytes());
        piece.extend_from_slice(&[3 << 3, 1]); // type (varint), ignored
        let mut model = field(1, &piece);
        model.extend(field(1, &field(1, b"c")));
        model.extend(field(3, &[field(1, b"nmt").as_slice(), field(2, b"\x04\0\0\0abcdxy").as_slice()].concat()));
        let parsed = SentencePieceModel::parse(&model).expect("parses");
        assert_eq!(parsed.pieces, vec!["ab", "c"]);
        assert_eq!(parsed.scores, vec![-1.5, 0.0]);
        assert_eq!(parsed.charsmap, b"\x04\0\0\0abcdxy");
        assert!(SentencePieceModel::parse(&model[..model.len() - 1]).is_err());
    }
}
