//! multilingual-e5-small's encoder: word, position and type embeddings
//! with a LayerNorm, then BERT layers (self-attention within each text,
//! residual and LayerNorm; a GELU feed-forward, residual and LayerNorm),
//! mean pooling over every token, L2 normalisation.
//!
//! The layers' 4-bit matrices are decoded once, at open, into `f32` laid
//! out for [`crate::embed::kernel::matmul_acc`] (input-major, packed in
//! panels; queries, keys and values side by side). The word table stays
//! 4-bit in the mapped file: a token decodes its row. Texts of a batch
//! share one token matrix, so each weight matrix is streamed once per
//! batch.

use std::ops::Range;

use super::file::{FileError, Layout, decode_q4_row};
use crate::embed::kernel::{Mat, layer_norm, matmul_acc, pack};

/// A decoded weight matrix, `[inputs, outputs]`, laid out for the kernel.
#[derive(Debug, Clone)]
struct Weights {
    data: Vec<[u8; 4]>,
    cols: usize,
    packed: bool,
}

impl Weights {
    /// Packs the row-major `data` of `cols` columns.
    fn new(data: &[[u8; 4]], cols: usize) -> Self {
        let (data, packed) = pack(data, cols);
        Self { data, cols, packed }
    }

    fn mat(&self) -> Mat<'_> {
        Mat { data: &self.data, cols: self.cols, packed: self.packed }
    }
}

/// One encoder layer, decoded.
#[derive(Debug, Clone)]
struct Layer {
    /// `[hidden, 3·hidden]`: queries, keys, values.
    qkv: Weights,
    qkv_b: Vec<f32>,
    /// `[hidden, hidden]`: the attention output.
    out: Weights,
    out_b: Vec<f32>,
    attn_norm: (Vec<f32>, Vec<f32>),
    /// `[hidden, ffn]`.
    up: Weights,
    up_b: Vec<f32>,
    /// `[ffn, hidden]`.
    down: Weights,
    down_b: Vec<f32>,
    ffn_norm: (Vec<f32>, Vec<f32>),
}

/// The encoder's parameters.
#[derive(Debug, Clone)]
pub(crate) struct Network {
    hidden: usize,
    heads: usize,
    ffn: usize,
    eps: f32,
    /// The 4-bit word table's range in the file, `vocab` rows.
    words: Range<usize>,
    vocab: usize,
    /// Position rows, `f32`.
    positions: Vec<f32>,
    /// The type row every token adds (texts have one segment).
    type_row: Vec<f32>,
    embed_norm: (Vec<f32>, Vec<f32>),
    layers: Vec<Layer>,
}

fn floats(file: &[u8], r: Range<usize>) -> Vec<f32> {
    file[r].as_chunks::<4>().0.iter().map(|b| f32::from_le_bytes(*b)).collect()
}

/// Decodes the 4-bit `[rows, cols]` matrix at `r` into `out`, transposed
/// (`cols` rows of `stride`, starting at column `at`).
fn decode_transposed(
    file: &[u8],
    r: Range<usize>,
    rows: usize,
    cols: usize,
    out: &mut [[u8; 4]],
    stride: usize,
    at: usize,
) {
    let row_bytes = r.len() / rows.max(1);
    let mut row = vec![0f32; cols];
    for (i, bytes) in file[r].chunks_exact(row_bytes).enumerate() {
        decode_q4_row(bytes, &mut row);
        for (j, &v) in row.iter().enumerate() {
            out[j * stride + at + i] = v.to_le_bytes();
        }
    }
}

impl Network {
    /// Checks every tensor's type and size and decodes the layers (21 M
    /// weights into 85 MB of `f32`; ~0.1 s in a release build).
    pub(crate) fn load(file: &[u8], l: &Layout) -> Result<Self, FileError> {
        let (h, f) = (l.hidden, l.ffn);
        let vector = |name: &str, len: usize| l.f32s(name, len).map(|r| floats(file, r));
        let norm = |prefix: &str| -> Result<(Vec<f32>, Vec<f32>), FileError> {
            Ok((vector(&format!("{prefix}.w"), h)?, vector(&format!("{prefix}.b"), h)?))
        };
        let positions = vector("emb.pos", l.positions * h)?;
        let type_row = vector("emb.type", l.types * h)?.into_iter().take(h).collect();
        let mut layers = Vec::with_capacity(l.layers);
        for i in 0..l.layers {
            let name = |part: &str| format!("l{i}.{part}");
            let mut qkv = vec![[0u8; 4]; h * 3 * h];
            let mut qkv_b = Vec::with_capacity(3 * h);
            for (k, part) in ["q", "k", "v"].iter().enumerate() {
                decode_transposed(file, l.q4(&name(&format!("{part}.w")), h, h)?, h, h, &mut qkv, 3 * h, k * h);
                qkv_b.extend(vector(&name(&format!("{part}.b")), h)?);
            }
            let mut out = vec![[0u8; 4]; h * h];
            decode_transposed(file, l.q4(&name("ao.w"), h, h)?, h, h, &mut out, h, 0);
            let mut up = vec![[0u8; 4]; h * f];
            decode_transposed(file, l.q4(&name("fi.w"), f, h)?, f, h, &mut up, f, 0);
            let mut down = vec![[0u8; 4]; f * h];
            decode_transposed(file, l.q4(&name("fo.w"), h, f)?, h, f, &mut down, h, 0);
            layers.push(Layer {
                qkv: Weights::new(&qkv, 3 * h),
                qkv_b,
                out: Weights::new(&out, h),
                out_b: vector(&name("ao.b"), h)?,
                attn_norm: norm(&name("aln"))?,
                up: Weights::new(&up, f),
                up_b: vector(&name("fi.b"), f)?,
                down: Weights::new(&down, h),
                down_b: vector(&name("fo.b"), h)?,
                ffn_norm: norm(&name("oln"))?,
            });
        }
        Ok(Self {
            hidden: h,
            heads: l.heads,
            ffn: f,
            eps: l.eps,
            words: l.q4("emb.word", l.vocab, h)?,
            vocab: l.vocab,
            positions,
            type_row,
            embed_norm: norm("emb.ln")?,
            layers,
        })
    }

    /// The word table's byte range (for paging advice).
    pub(crate) fn word_table(&self) -> Range<usize> {
        self.words.clone()
    }

    /// The unit vectors of `texts`, each a sequence of token ids with its
    /// markers, at most as long as the position table (callers cut). Ids
    /// beyond the word table read as row 0.
    pub(crate) fn forward(&self, file: &[u8], texts: &[&[u32]]) -> Vec<Vec<f32>> {
        let h = self.hidden;
        let spans: Vec<Range<usize>> = texts
            .iter()
            .scan(0, |at, t| {
                let r = *at..*at + t.len();
                *at = r.end;
                Some(r)
            })
            .collect();
        let n = spans.last().map_or(0, |s| s.end);
        let row_bytes = self.words.len() / self.vocab.max(1);
        let mut x = vec![0f32; n * h];
        for (t, (pos, &id)) in texts.iter().flat_map(|t| t.iter().enumerate()).enumerate() {
            let id = if (id as usize) < self.vocab { id as usize } else { 0 };
            let row = &mut x[t * h..(t + 1) * h];
            let start = self.words.start + id * row_bytes;
            decode_q4_row(&file[start..start + row_bytes], row);
            let p = &self.positions[pos * h..(pos + 1) * h];
            for ((v, &p), &ty) in row.iter_mut().zip(p).zip(&self.type_row) {
                *v += p + ty;
            }
        }
        layer_norm(&mut x, h, &self.embed_norm.0, &self.embed_norm.1, self.eps);
        let mut qkv = Vec::new();
        let mut context = vec![0f32; n * h];
        let mut mid = Vec::new();
        let mut scores = Vec::new();
        let mut y = Vec::new();
        for layer in &self.layers {
            project(&x, h, n, &layer.qkv, &layer.qkv_b, &mut qkv);
            self.attend(&qkv, &spans, &mut context, &mut scores);
            project(&context, h, n, &layer.out, &layer.out_b, &mut y);
            add_norm(&mut x, &y, h, &layer.attn_norm, self.eps);
            project(&x, h, n, &layer.up, &layer.up_b, &mut mid);
            mid.iter_mut().for_each(|v| *v = gelu(*v));
            project(&mid, self.ffn, n, &layer.down, &layer.down_b, &mut y);
            add_norm(&mut x, &y, h, &layer.ffn_norm, self.eps);
        }
        spans
            .iter()
            .map(|span| {
                let mut v = vec![0f32; h];
                for row in x[span.start * h..span.end * h].chunks_exact(h) {
                    v.iter_mut().zip(row).for_each(|(a, b)| *a += b);
                }
                crate::embed::l2_normalise(&mut v);
                v
            })
            .collect()
    }

    /// Scaled dot-product attention of every head, each token attending to
    /// the tokens of its own text.
    fn attend(&self, qkv: &[f32], spans: &[Range<usize>], context: &mut [f32], scores: &mut Vec<f32>) {
        let (h, d) = (self.hidden, self.hidden / self.heads);
        let scale = 1.0 / (d as f32).sqrt();
        let stride = 3 * h;
        for span in spans {
            for head in 0..self.heads {
                let (qo, ko, vo) = (head * d, h + head * d, 2 * h + head * d);
                for t in span.clone() {
                    let q = &qkv[t * stride + qo..t * stride + qo + d];
                    scores.clear();
                    scores.extend(
                        span.clone().map(|s| crate::embed::dot(q, &qkv[s * stride + ko..s * stride + ko + d]) * scale),
                    );
                    let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                    let mut sum = 0.0;
                    scores.iter_mut().for_each(|s| {
                        *s = (*s - max).exp();
                        sum += *s;
                    });
                    let out = &mut context[t * h + qo..t * h + qo + d];
                    out.fill(0.0);
                    for (s, &p) in span.clone().zip(scores.iter()) {
                        let p = p / sum;
                        let v = &qkv[s * stride + vo..s * stride + vo + d];
                        out.iter_mut().zip(v).for_each(|(o, v)| *o += p * v);
                    }
                }
            }
        }
    }
}

/// `out = a · w + bias` for `rows` rows of `a` (`k` wide).
fn project(a: &[f32], k: usize, rows: usize, w: &Weights, bias: &[f32], out: &mut Vec<f32>) {
    out.clear();
    for _ in 0..rows {
        out.extend_from_slice(bias);
    }
    matmul_acc(a, k, rows, w.mat(), out, bias.len());
}

/// `x = LayerNorm(x + y)` row by row.
fn add_norm(x: &mut [f32], y: &[f32], width: usize, norm: &(Vec<f32>, Vec<f32>), eps: f32) {
    x.iter_mut().zip(y).for_each(|(a, b)| *a += b);
    layer_norm(x, width, &norm.0, &norm.1, eps);
}

/// GELU, `x·Φ(x)`, with `erf` by Abramowitz and Stegun 7.1.26 (absolute
/// error below 1.5e−7).
fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

fn erf(x: f32) -> f32 {
    let t = 1.0 / (1.0 + 0.327_591_1 * x.abs());
    let poly = t * (0.254_829_6 + t * (-0.284_496_74 + t * (1.421_413_7 + t * (-1.453_152_1 + t * 1.061_405_4))));
    let y = 1.0 - poly * (-x * x).exp();
    y.copysign(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_and_gelu_match_known_values() {
        for (x, want) in
            [(0.0f32, 0.0f32), (0.5, 0.520_499_9), (1.0, 0.842_700_8), (-2.0, -0.995_322_3), (3.0, 0.999_977_9)]
        {
            assert!((erf(x) - want).abs() < 5e-7, "erf({x}) = {}", erf(x));
        }
        assert!((gelu(1.0) - 0.841_344_7).abs() < 1e-6);
        assert!((gelu(-1.0) + 0.158_655_3).abs() < 1e-6);
    }
}
