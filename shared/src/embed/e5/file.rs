//! The layout of the 4-bit multilingual-e5-small file (`E5S1`, version 1):
//! a header of hyper-parameters, the SentencePiece vocabulary (piece bytes,
//! scores, the special ids), a per-character normalisation map, and a
//! directory of tensors (`f32`, or 4-bit blocks of 32 weights sharing one
//! `f16` scale). All integers are little-endian. Parsing reads the header,
//! the vocabulary's offsets and scores and the directory; the tensors stay
//! where they are.

use std::collections::HashMap;
use std::ops::Range;

/// The file's first four bytes.
pub const MAGIC: &[u8; 4] = b"E5S1";
/// The format version this code reads.
pub const VERSION: u32 = 1;
/// Weights per 4-bit block.
pub const BLOCK: usize = 32;
/// Bytes per 4-bit block: an `f16` scale and 16 bytes of two nibbles each.
pub const BLOCK_BYTES: usize = 18;

/// Tensor element types in the directory.
const DTYPE_F32: u8 = 0;
const DTYPE_Q4: u8 = 1;

/// What is wrong with a model file.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The file ends inside the part named.
    #[error("truncated in {0}")]
    Truncated(&'static str),
    /// Not an `E5S1` file of the version this code reads.
    #[error("not a 4-bit multilingual-e5 file of version {VERSION} (magic {magic:?}, version {version})")]
    Header {
        /// The first four bytes.
        magic: [u8; 4],
        /// The version found.
        version: u32,
    },
    /// A value that cannot be right.
    #[error("{0}")]
    Invalid(String),
}

/// The hyper-parameters and where everything lies in the file.
#[derive(Debug, Clone)]
pub struct Layout {
    /// Hidden width (384).
    pub hidden: usize,
    /// Encoder layers (12).
    pub layers: usize,
    /// Attention heads (12).
    pub heads: usize,
    /// Feed-forward width (1536).
    pub ffn: usize,
    /// Rows of the word table.
    pub vocab: usize,
    /// Position rows: the most tokens a text can have, markers included.
    pub positions: usize,
    /// Token-type rows (the encoder uses the first).
    pub types: usize,
    /// LayerNorm epsilon.
    pub eps: f32,
    /// The begin-of-text id.
    pub bos: u32,
    /// The end-of-text id.
    pub eos: u32,
    /// The unknown-piece id.
    pub unk: u32,
    /// Piece `i`'s bytes are `piece_bytes[offsets[i]..offsets[i + 1]]`.
    pub offsets: Vec<u32>,
    /// Piece scores (log probabilities).
    pub scores: Vec<f32>,
    /// The piece bytes' range in the file.
    pub piece_bytes: Range<usize>,
    /// Characters the normaliser rewrites, sorted, with what each becomes
    /// (`replacements[spans[i]]`; empty: dropped).
    pub normalised: Vec<(u32, Range<usize>)>,
    /// The replacement characters, side by side.
    pub replacements: Vec<u32>,
    /// Each tensor's name, type and byte range.
    tensors: HashMap<String, (u8, Range<usize>)>,
}

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
    part: &'static str,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], FileError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len()).ok_or(FileError::Truncated(self.part))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], FileError> {
        self.take(N)?.first_chunk::<N>().copied().ok_or(FileError::Truncated(self.part))
    }
    fn u32(&mut self) -> Result<u32, FileError> {
        self.array().map(u32::from_le_bytes)
    }
    /// A signed count or id that must not be negative.
    fn count(&mut self) -> Result<usize, FileError> {
        let v = i32::from_le_bytes(self.array()?);
        usize::try_from(v).map_err(|_| FileError::Invalid(format!("negative {} value {v}", self.part)))
    }
    fn u64(&mut self) -> Result<usize, FileError> {
        usize::try_from(u64::from_le_bytes(self.array()?))
            .map_err(|_| FileError::Invalid(format!("{} offset beyond memory", self.part)))
    }
}

fn u32s(bytes: &[u8]) -> Vec<u32> {
    bytes.as_chunks::<4>().0.iter().map(|b| u32::from_le_bytes(*b)).collect()
}

impl Layout {
    /// Reads the header, vocabulary, normaliser and tensor directory of
    /// `file`. Cost: ~2 MB of offsets and scores copied (about a
    /// millisecond); the tensors are not touched.
    ///
    /// # Errors
    /// [`FileError`] when the file is truncated, of another format or
    /// version, or inconsistent.
    pub fn parse(file: &[u8]) -> Result<Self, FileError> {
        let mut c = Cursor { bytes: file, at: 0, part: "header" };
        let magic = c.array::<4>()?;
        let version = c.u32()?;
        if &magic != MAGIC || version != VERSION {
            return Err(FileError::Header { magic, version });
        }
        let [hidden, layers, heads, ffn, vocab, positions, types] = [(); 7].map(|()| c.count());
        let (hidden, layers, heads, ffn, vocab, positions, types) =
            (hidden?, layers?, heads?, ffn?, vocab?, positions?, types?);
        let eps = f32::from_le_bytes(c.array()?);
        let block = c.count()?;
        let shaped = block == BLOCK && heads > 0 && hidden % heads == 0 && hidden % BLOCK == 0 && ffn % BLOCK == 0;
        // A text needs its two markers and a piece.
        if !shaped || hidden == 0 || positions < 3 || types == 0 {
            return Err(FileError::Invalid(format!(
                "unsupported shape: hidden {hidden}, heads {heads}, ffn {ffn}, block {block}, positions {positions}, types {types}"
            )));
        }
        c.part = "vocabulary";
        let pieces = c.count()?;
        let [bos, eos, _pad, unk] = [(); 4].map(|()| c.count());
        let (bos, eos, unk) = (bos?, eos?, unk?);
        let blob_len = c.u64()?;
        let offsets = u32s(c.take(pieces.checked_add(1).ok_or(FileError::Truncated("vocabulary"))? * 4)?);
        let scores: Vec<f32> = c.take(pieces * 4)?.as_chunks::<4>().0.iter().map(|b| f32::from_le_bytes(*b)).collect();
        let start = c.at;
        c.take(blob_len)?;
        let piece_bytes = start..c.at;
        let ordered = offsets.windows(2).all(|w| w[0] <= w[1]);
        if !ordered || offsets.last().is_some_and(|&l| l as usize > blob_len) || pieces > vocab {
            return Err(FileError::Invalid("piece offsets out of order or beyond the piece bytes".into()));
        }
        for (name, id) in [("bos", bos), ("eos", eos), ("unk", unk)] {
            if id >= pieces {
                return Err(FileError::Invalid(format!("{name} id {id} beyond {pieces} pieces")));
            }
        }
        c.part = "normaliser";
        let entries = c.count()?;
        let map_len = c.u32()? as usize;
        let mut m = Cursor { bytes: c.take(map_len)?, at: 0, part: "normaliser" };
        let mut normalised = Vec::with_capacity(entries);
        let mut replacements = Vec::new();
        for _ in 0..entries {
            let from = m.u32()?;
            let n = usize::from(m.array::<1>()?[0]);
            let start = replacements.len();
            replacements.extend(u32s(m.take(n * 4)?));
            normalised.push((from, start..replacements.len()));
        }
        normalised.sort_by_key(|(from, _)| *from);
        c.part = "tensor directory";
        let n = c.count()?;
        let mut tensors = HashMap::with_capacity(n);
        for _ in 0..n {
            let len = usize::from(u16::from_le_bytes(c.array()?));
            let name = String::from_utf8_lossy(c.take(len)?).into_owned();
            let dtype = c.array::<1>()?[0];
            let _elements = c.u32()?;
            let (offset, bytes) = (c.u64()?, c.u64()?);
            let end = offset.checked_add(bytes).filter(|&e| e <= file.len());
            let Some(end) = end else {
                return Err(FileError::Invalid(format!("tensor {name} lies beyond the file's end")));
            };
            tensors.insert(name, (dtype, offset..end));
        }
        Ok(Self {
            hidden,
            layers,
            heads,
            ffn,
            vocab,
            positions,
            types,
            eps,
            bos: bos as u32,
            eos: eos as u32,
            unk: unk as u32,
            offsets,
            scores,
            piece_bytes,
            normalised,
            replacements,
            tensors,
        })
    }

    /// The byte range of the `f32` tensor `name` of `len` elements.
    ///
    /// # Errors
    /// [`FileError::Invalid`] when it is missing or of another type or size.
    pub fn f32s(&self, name: &str, len: usize) -> Result<Range<usize>, FileError> {
        self.tensor(name, DTYPE_F32, len * 4)
    }

    /// The byte range of the 4-bit matrix `name`, `rows × cols` (`cols` a
    /// multiple of [`BLOCK`]), row after row.
    ///
    /// # Errors
    /// [`FileError::Invalid`] when it is missing or of another type or size.
    pub fn q4(&self, name: &str, rows: usize, cols: usize) -> Result<Range<usize>, FileError> {
        self.tensor(name, DTYPE_Q4, rows * (cols / BLOCK) * BLOCK_BYTES)
    }

    fn tensor(&self, name: &str, dtype: u8, bytes: usize) -> Result<Range<usize>, FileError> {
        match self.tensors.get(name) {
            Some((d, r)) if *d == dtype && r.len() == bytes => Ok(r.clone()),
            Some((d, r)) => Err(FileError::Invalid(format!(
                "tensor {name}: type {d} of {} bytes, expected type {dtype} of {bytes}",
                r.len()
            ))),
            None => Err(FileError::Invalid(format!("tensor {name} missing"))),
        }
    }
}

/// An IEEE half-precision value's bits as `f32`.
#[must_use]
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    let bits = match (exp, man) {
        (0, 0) => sign,
        (0, _) => {
            // Subnormal: shift the mantissa up until its leading one is the
            // implicit bit.
            let shift = man.leading_zeros() - 21;
            sign | ((113 - shift) << 23) | ((man << (shift + 13)) & 0x7f_ffff)
        }
        (31, _) => sign | 0x7f80_0000 | (man << 13),
        _ => sign | ((exp + 112) << 23) | (man << 13),
    };
    f32::from_bits(bits)
}

/// Decodes one row of 4-bit blocks into `out` (`out.len()` weights, a
/// multiple of [`BLOCK`]): byte `j` of a block holds weight `j` in its low
/// nibble and weight `j + 16` in its high one, each `(nibble − 8) × scale`.
pub fn decode_q4_row(row: &[u8], out: &mut [f32]) {
    for (block, out) in row.chunks_exact(BLOCK_BYTES).zip(out.chunks_exact_mut(BLOCK)) {
        let scale = f16_to_f32(u16::from_le_bytes([block[0], block[1]]));
        let (low, high) = out.split_at_mut(BLOCK / 2);
        for (j, &b) in block[2..].iter().enumerate() {
            low[j] = (f32::from(b & 0x0f) - 8.0) * scale;
            high[j] = (f32::from(b >> 4) - 8.0) * scale;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_decode_like_the_standard() {
        for (bits, want) in [
            (0x3c00u16, 1.0f32),
            (0xc000, -2.0),
            (0x3555, 1365.0 / 4096.0),
            (0x0001, 1.0 / 16_777_216.0),
            (0x03ff, 1023.0 / 16_777_216.0),
            (0x7bff, 65504.0),
            (0x0000, 0.0),
        ] {
            assert_eq!(f16_to_f32(bits), want, "{bits:#06x}");
        }
        assert!(f16_to_f32(0x7c00).is_infinite());
    }

    #[test]
    fn a_block_decodes_low_nibbles_first() {
        let mut block = vec![0x00, 0x3c]; // scale 1.0
        block.extend((0..16u8).map(|j| (15 - j) << 4 | j));
        let mut out = [0f32; 32];
        decode_q4_row(&block, &mut out);
        let want: Vec<f32> = (0..16).map(|j| j as f32 - 8.0).chain((0..16).map(|j| 7.0 - j as f32)).collect();
        assert_eq!(out.to_vec(), want);
    }

    #[test]
    fn other_files_and_truncations_are_refused() {
        assert!(matches!(Layout::parse(b"SKALDUM3\x01\0\0\0"), Err(FileError::Header { .. })));
        assert!(matches!(Layout::parse(b"E5S1"), Err(FileError::Truncated("header"))));
        let header = |positions: i32| {
            let mut header = b"E5S1\x01\0\0\0".to_vec();
            for v in [384i32, 12, 12, 1536, 10, positions, 2] {
                header.extend(v.to_le_bytes());
            }
            header.extend(1e-12f32.to_le_bytes());
            header.extend(32i32.to_le_bytes());
            header.extend(5i32.to_le_bytes());
            header
        };
        assert!(matches!(Layout::parse(&header(512)), Err(FileError::Truncated("vocabulary"))));
        // Too few positions for a text's markers: refused, not a panic later.
        let err = Layout::parse(&header(2)).expect_err("two positions");
        assert!(err.to_string().contains("positions 2"), "{err}");
    }
}
