//! The converted model file: one flat, memory-mappable file holding the
//! network's tensors and the tokenizer's tables, written once by
//! `skald model convert` and never changed afterwards.
//!
//! Layout (all integers little-endian):
//!
//! | bytes | what |
//! | --- | --- |
//! | 0–7 | magic `SKALDUM3` |
//! | 8–11 | format version ([`FORMAT_VERSION`]) |
//! | 12–15 | tensor count |
//! | 16–23 | total file length (a truncated copy is refused) |
//! | 24–31 | tensor table length in bytes |
//! | 32… | tensor table: per tensor `u16` name length, the UTF-8 name, `u8` dtype ([`Dtype`]), `u8` rank, `u64` per dimension, `u64` data offset, `u64` data length |
//! | … | tensor data, smallest first, each starting on a 64-byte boundary, zero padding between |
//!
//! Opening reads only the header, the table and the small tensors that follow
//! them (a few pages); the rest of the data is used in place.

use std::collections::HashMap;
use std::io::Write;

/// The first eight bytes of every model file.
pub const MAGIC: &[u8; 8] = b"SKALDUM3";
/// The format version this build reads and writes. Bump it on any change to
/// the layout or the tensor set (and in `scripts/setup-model.sh`). Version
/// 2 stores the weight matrices packed in 16-column panels
/// ([`super::pack_matrix`]).
pub const FORMAT_VERSION: u32 = 2;
/// Data alignment in the file.
const ALIGN: usize = 64;

/// Element types of stored tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Dtype {
    /// Unsigned byte.
    U8 = 0,
    /// Little-endian `u32`.
    U32 = 1,
    /// Little-endian IEEE `f32`.
    F32 = 2,
    /// Little-endian IEEE `f64`.
    F64 = 3,
}

impl Dtype {
    /// Bytes per element.
    #[must_use]
    pub fn size(self) -> usize {
        match self {
            Self::U8 => 1,
            Self::U32 | Self::F32 => 4,
            Self::F64 => 8,
        }
    }

    fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => Self::U8,
            1 => Self::U32,
            2 => Self::F32,
            3 => Self::F64,
            _ => return None,
        })
    }
}

/// Why a model file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// Not a Skald USE-m3 model file, or a different format version.
    #[error("not a Skald USE-m3 model file of format version {FORMAT_VERSION} ({0})")]
    Version(String),
    /// The header or table is inconsistent with the file.
    #[error("corrupt model file: {0}")]
    Corrupt(String),
    /// A tensor the network needs is missing or has the wrong type or shape.
    #[error("model file tensor {name}: {problem}")]
    Tensor {
        /// The tensor name.
        name: String,
        /// What is wrong.
        problem: String,
    },
}

/// Where a tensor's data sits in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorEntry {
    /// Element type.
    pub dtype: Dtype,
    /// Dimensions (empty for a scalar).
    pub shape: Vec<usize>,
    /// Byte offset of the data in the file.
    pub offset: usize,
    /// Byte length of the data.
    pub len: usize,
}

/// The parsed tensor table of a model file.
#[derive(Debug, Clone)]
pub struct TensorTable {
    entries: HashMap<String, TensorEntry>,
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], FormatError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or_else(|| FormatError::Corrupt("truncated tensor table".into()))?;
        let s = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], FormatError> {
        let s = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u64_usize(&mut self) -> Result<usize, FormatError> {
        usize::try_from(u64::from_le_bytes(self.array()?)).map_err(|_| FormatError::Corrupt("size overflow".into()))
    }
}

impl TensorTable {
    /// Parses the header and tensor table of a whole model file, checking
    /// the magic, version, file length and that every tensor lies inside the
    /// file with the length its dtype and shape imply. Cost: proportional to
    /// the table (a few KB), not the data.
    ///
    /// # Errors
    /// [`FormatError`] when the file is not a model file of this version or
    /// is inconsistent.
    pub fn parse(file: &[u8]) -> Result<Self, FormatError> {
        let header = file.get(..32).ok_or_else(|| FormatError::Version("file shorter than its header".into()))?;
        if &header[..8] != MAGIC {
            return Err(FormatError::Version("bad magic".into()));
        }
        let mut r = Reader { bytes: file, pos: 8 };
        let version = u32::from_le_bytes(r.array()?);
        if version != FORMAT_VERSION {
            return Err(FormatError::Version(format!("file has version {version}")));
        }
        let count = u32::from_le_bytes(r.array()?) as usize;
        let file_len = r.u64_usize()?;
        if file_len != file.len() {
            return Err(FormatError::Corrupt(format!("file is {} bytes, header says {file_len}", file.len())));
        }
        let table_len = r.u64_usize()?;
        let table = file
            .get(32..32usize.saturating_add(table_len))
            .ok_or_else(|| FormatError::Corrupt("tensor table runs past the end of the file".into()))?;
        let mut r = Reader { bytes: table, pos: 0 };
        let mut entries = HashMap::with_capacity(count);
        for _ in 0..count {
            let name_len = usize::from(u16::from_le_bytes(r.array()?));
            let name = std::str::from_utf8(r.take(name_len)?)
                .map_err(|_| FormatError::Corrupt("tensor name is not UTF-8".into()))?
                .to_owned();
            let [dtype, rank] = r.array()?;
            let dtype =
                Dtype::from_u8(dtype).ok_or_else(|| FormatError::Corrupt(format!("tensor {name}: dtype {dtype}")))?;
            let shape = (0..rank).map(|_| r.u64_usize()).collect::<Result<Vec<_>, _>>()?;
            let offset = r.u64_usize()?;
            let len = r.u64_usize()?;
            let elements = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
            if elements.and_then(|e| e.checked_mul(dtype.size())) != Some(len) {
                return Err(FormatError::Corrupt(format!("tensor {name}: length {len} does not match its shape")));
            }
            if offset.checked_add(len).is_none_or(|end| end > file.len()) {
                return Err(FormatError::Corrupt(format!("tensor {name} runs past the end of the file")));
            }
            entries.insert(name, TensorEntry { dtype, shape, offset, len });
        }
        Ok(Self { entries })
    }

    /// The entry of `name`, checked against the expected dtype and shape.
    ///
    /// # Errors
    /// [`FormatError::Tensor`] when it is missing or differs.
    pub fn get(&self, name: &str, dtype: Dtype, shape: &[usize]) -> Result<&TensorEntry, FormatError> {
        let entry = self.get_any(name, dtype)?;
        if entry.shape != shape {
            return Err(FormatError::Tensor {
                name: name.to_owned(),
                problem: format!("shape {:?}, expected {shape:?}", entry.shape),
            });
        }
        Ok(entry)
    }

    /// The entry of `name` of any shape, checked against the dtype.
    ///
    /// # Errors
    /// [`FormatError::Tensor`] when it is missing or of another dtype.
    pub fn get_any(&self, name: &str, dtype: Dtype) -> Result<&TensorEntry, FormatError> {
        let entry = self
            .entries
            .get(name)
            .ok_or_else(|| FormatError::Tensor { name: name.to_owned(), problem: "missing".into() })?;
        if entry.dtype != dtype {
            return Err(FormatError::Tensor {
                name: name.to_owned(),
                problem: format!("dtype {:?}, expected {dtype:?}", entry.dtype),
            });
        }
        Ok(entry)
    }

    /// How many tensors the file holds.
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the file holds no tensor.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Collects tensors and writes them as one model file.
#[derive(Debug, Default)]
pub struct ModelWriter {
    tensors: Vec<(String, Dtype, Vec<usize>, Vec<u8>)>,
}

impl ModelWriter {
    /// An empty writer.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tensor of raw little-endian bytes.
    ///
    /// # Errors
    /// [`FormatError::Tensor`] when the length does not match dtype and
    /// shape, the name is longer than 65535 bytes or is already present.
    pub fn add_bytes(&mut self, name: &str, dtype: Dtype, shape: &[usize], data: Vec<u8>) -> Result<(), FormatError> {
        let want = shape.iter().product::<usize>() * dtype.size();
        let problem = if data.len() != want {
            Some(format!("{} bytes for shape {shape:?}", data.len()))
        } else if name.len() > usize::from(u16::MAX) || shape.len() > usize::from(u8::MAX) {
            Some("name or rank too long".to_owned())
        } else if self.tensors.iter().any(|t| t.0 == name) {
            Some("added twice".to_owned())
        } else {
            None
        };
        if let Some(problem) = problem {
            return Err(FormatError::Tensor { name: name.to_owned(), problem });
        }
        self.tensors.push((name.to_owned(), dtype, shape.to_vec(), data));
        Ok(())
    }

    /// Adds an `f32` tensor.
    ///
    /// # Errors
    /// As [`ModelWriter::add_bytes`].
    pub fn add_f32(&mut self, name: &str, shape: &[usize], data: &[f32]) -> Result<(), FormatError> {
        self.add_bytes(name, Dtype::F32, shape, data.iter().flat_map(|v| v.to_le_bytes()).collect())
    }

    /// Adds a scalar `f64`.
    ///
    /// # Errors
    /// As [`ModelWriter::add_bytes`].
    pub fn add_f64_scalar(&mut self, name: &str, value: f64) -> Result<(), FormatError> {
        self.add_bytes(name, Dtype::F64, &[], value.to_le_bytes().to_vec())
    }

    /// Adds a scalar `u32`.
    ///
    /// # Errors
    /// As [`ModelWriter::add_bytes`].
    pub fn add_u32_scalar(&mut self, name: &str, value: u32) -> Result<(), FormatError> {
        self.add_bytes(name, Dtype::U32, &[], value.to_le_bytes().to_vec())
    }

    /// Writes the file to `out`; returns its length in bytes. Cost: one
    /// sequential write of all tensor data.
    ///
    /// # Errors
    /// The writer's I/O error.
    pub fn write_to(&self, out: &mut impl Write) -> std::io::Result<u64> {
        let mut table_len = 0usize;
        for (name, _, shape, _) in &self.tensors {
            table_len += 2 + name.len() + 2 + 8 * shape.len() + 16;
        }
        // Data is laid out smallest first: what opening reads (scalars and
        // vectors) shares the first few pages after the table.
        let mut order: Vec<usize> = (0..self.tensors.len()).collect();
        order.sort_by_key(|&i| self.tensors[i].3.len());
        let mut offsets = vec![0usize; self.tensors.len()];
        let mut end = 32 + table_len;
        for &i in &order {
            offsets[i] = align(end);
            end = offsets[i] + self.tensors[i].3.len();
        }
        let file_len = end;
        let mut table = Vec::with_capacity(table_len);
        for ((name, dtype, shape, data), offset) in self.tensors.iter().zip(&offsets) {
            table.extend_from_slice(&(name.len() as u16).to_le_bytes());
            table.extend_from_slice(name.as_bytes());
            table.extend_from_slice(&[*dtype as u8, shape.len() as u8]);
            for d in shape {
                table.extend_from_slice(&(*d as u64).to_le_bytes());
            }
            table.extend_from_slice(&(*offset as u64).to_le_bytes());
            table.extend_from_slice(&(data.len() as u64).to_le_bytes());
        }
        let mut header = Vec::with_capacity(32);
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        header.extend_from_slice(&(self.tensors.len() as u32).to_le_bytes());
        header.extend_from_slice(&(file_len as u64).to_le_bytes());
        header.extend_from_slice(&(table_len as u64).to_le_bytes());
        out.write_all(&header)?;
        out.write_all(&table)?;
        let mut written = 32 + table_len;
        for &i in &order {
            out.write_all(&vec![0u8; offsets[i] - written])?;
            out.write_all(&self.tensors[i].3)?;
            written = offsets[i] + self.tensors[i].3.len();
        }
        Ok(file_len as u64)
    }
}

fn align(n: usize) -> usize {
    n.div_ceil(ALIGN) * ALIGN
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_files_parse_back_aligned() {
        let mut w = ModelWriter::new();
        w.add_f32("a", &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).expect("a");
        w.add_bytes("q", Dtype::U8, &[5], vec![1, 2, 3, 4, 5]).expect("q");
        w.add_f64_scalar("eps", 1e-12).expect("eps");
        assert!(w.add_bytes("bad", Dtype::F32, &[2], vec![0; 7]).is_err());
        assert!(w.add_f64_scalar("eps", 1.0).is_err());
        let mut file = Vec::new();
        let len = w.write_to(&mut file).expect("write");
        assert_eq!(len as usize, file.len());
        let t = TensorTable::parse(&file).expect("parse");
        assert_eq!(t.len(), 3);
        let a = t.get("a", Dtype::F32, &[2, 3]).expect("a");
        assert_eq!(a.offset % 64, 0);
        assert_eq!(f32::from_le_bytes(file[a.offset + 20..a.offset + 24].try_into().expect("4")), 6.0);
        let q = t.get("q", Dtype::U8, &[5]).expect("q");
        assert_eq!(&file[q.offset..q.offset + 5], &[1, 2, 3, 4, 5]);
        assert!(t.get("a", Dtype::F32, &[3, 2]).is_err());
        assert!(t.get("q", Dtype::F32, &[5]).is_err());
        assert!(t.get("nope", Dtype::U8, &[]).is_err());
        assert!(TensorTable::parse(&file[..file.len() - 1]).is_err());
        let mut other = file.clone();
        other[8] = 9;
        assert!(matches!(TensorTable::parse(&other), Err(FormatError::Version(_))));
    }
}
