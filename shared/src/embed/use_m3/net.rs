//! The USE-m3 network: token embeddings (6-bit rows), an input projection
//! with one LayerNorm over its 768-wide output, three n-gram CNN branches
//! ((order 2, left 0), (3, 1), (5, 2), two ReLU layers each with residuals,
//! zero padding outside the sentence), a second LayerNorm over the 1280-wide
//! `[embedding | branches]` features, a length-scaled sum pooling through
//! the output projection, the DNN head, `tanh` and L2 normalisation.
//!
//! Sentences of a batch are processed as one flat token matrix (each
//! weight matrix is streamed once per batch); windows never cross a
//! sentence boundary. The matrices are stored packed in 16-column panels
//! (`pack_matrix`; the shapes below are the logical ones). Matrix products are plain Rust over weights read in
//! place from the mapped file.

use std::ops::Range;

use super::format::{Dtype, FormatError, TensorTable};
use crate::embed::kernel::{Mat, layer_norm, matmul_acc, packs};

/// Output dimension.
pub(crate) const DIM: usize = 512;
/// Width of one CNN branch.
const CNN: usize = 256;
/// Width of the token features (`[embedding | 3 branches]`).
const FEAT: usize = DIM + 3 * CNN;
/// Width of the DNN head's hidden layers.
const HID: usize = 320;
/// Chunks of the quantised embedding table (one scale and offset each).
const CHUNKS: usize = 17;
/// Rows of the embedding table (17 chunks × 7530).
pub(crate) const EMB_ROWS: usize = CHUNKS * 7530;
/// (n-gram order, left context) of the CNN branches, in feature order.
const ORDERS: [(usize, usize); 3] = [(2, 0), (3, 1), (5, 2)];

/// Tensor names in the model file.
pub mod names {
    /// Embedding rows, `u8` `[128010, 512]`, row `r` at `r * 512`.
    pub const EMB_Q: &str = "emb.q";
    /// Per-chunk scale, `f32` `[17]` (row `r` uses `r % 17`).
    pub const EMB_SCALE: &str = "emb.scale";
    /// Per-chunk offset, `f32` `[17]`.
    pub const EMB_LO: &str = "emb.lo";
    /// Input projection `[512, 768]` (branches' projections side by side).
    pub const PROJ_W: &str = "proj.w";
    /// Input projection bias `[768]`.
    pub const PROJ_B: &str = "proj.b";
    /// First LayerNorm gain `[768]`.
    pub const LN0_G: &str = "ln0.g";
    /// First LayerNorm bias `[768]`.
    pub const LN0_B: &str = "ln0.b";
    /// Second LayerNorm gain `[1280]`.
    pub const LN1_G: &str = "ln1.g";
    /// Second LayerNorm bias `[1280]`.
    pub const LN1_B: &str = "ln1.b";
    /// Output projection `[1280, 512]`.
    pub const OUT_W: &str = "out.w";
    /// Output projection bias `[512]`.
    pub const OUT_B: &str = "out.b";
    /// LayerNorm and normalisation epsilon, `f64` scalar.
    pub const EPS: &str = "eps";
    /// The DNN head's matrices, with their shapes.
    pub const HEAD: [(&str, [usize; 2]); 6] = [
        ("head.d0", [512, 320]),
        ("head.d1", [320, 320]),
        ("head.p1", [512, 320]),
        ("head.d2", [320, 512]),
        ("head.p3", [320, 512]),
        ("head.d3", [512, 512]),
    ];

    /// The CNN branch tensors of n-gram order `n`: `(w1, b1, w2, b2)`,
    /// matrices `[n * 256, 256]`, biases `[256]`.
    #[must_use]
    pub fn cnn(n: usize) -> [String; 4] {
        [format!("cnn{n}.w1"), format!("cnn{n}.b1"), format!("cnn{n}.w2"), format!("cnn{n}.b2")]
    }
}

/// The network's parameters: small vectors decoded at open, matrices as
/// byte ranges of the mapped file.
#[derive(Debug, Clone)]
pub(crate) struct Network {
    emb_q: Range<usize>,
    scale: [f32; CHUNKS],
    lo: [f32; CHUNKS],
    proj_w: Range<usize>,
    proj_b: Vec<f32>,
    ln0: (Vec<f32>, Vec<f32>),
    branches: [Branch; 3],
    ln1: (Vec<f32>, Vec<f32>),
    out_w: Range<usize>,
    out_b: Vec<f32>,
    head: [Range<usize>; 6],
    eps: f32,
}

#[derive(Debug, Clone)]
struct Branch {
    order: usize,
    left: usize,
    w1: Range<usize>,
    b1: Vec<f32>,
    w2: Range<usize>,
    b2: Vec<f32>,
}

fn range(table: &TensorTable, name: &str, dtype: Dtype, shape: &[usize]) -> Result<Range<usize>, FormatError> {
    let e = table.get(name, dtype, shape)?;
    Ok(e.offset..e.offset + e.len)
}

fn vector(file: &[u8], table: &TensorTable, name: &str, len: usize) -> Result<Vec<f32>, FormatError> {
    let r = range(table, name, Dtype::F32, &[len])?;
    Ok(file[r].as_chunks::<4>().0.iter().map(|b| f32::from_le_bytes(*b)).collect())
}

impl Network {
    /// Checks every tensor's dtype and shape and decodes the small ones.
    pub(crate) fn load(file: &[u8], table: &TensorTable) -> Result<Self, FormatError> {
        let chunk = |name: &str| -> Result<[f32; CHUNKS], FormatError> {
            let v = vector(file, table, name, CHUNKS)?;
            Ok(std::array::from_fn(|i| v[i]))
        };
        let branch = |(order, left): (usize, usize)| -> Result<Branch, FormatError> {
            let [w1, b1, w2, b2] = names::cnn(order);
            Ok(Branch {
                order,
                left,
                w1: range(table, &w1, Dtype::F32, &[order * CNN, CNN])?,
                b1: vector(file, table, &b1, CNN)?,
                w2: range(table, &w2, Dtype::F32, &[order * CNN, CNN])?,
                b2: vector(file, table, &b2, CNN)?,
            })
        };
        let head = names::HEAD.map(|(name, shape)| range(table, name, Dtype::F32, &shape));
        let [h0, h1, h2, h3, h4, h5] = head;
        let eps = range(table, names::EPS, Dtype::F64, &[])?;
        let eps = file[eps].first_chunk::<8>().map_or(1e-12, |b| f64::from_le_bytes(*b));
        Ok(Self {
            emb_q: range(table, names::EMB_Q, Dtype::U8, &[EMB_ROWS, DIM])?,
            scale: chunk(names::EMB_SCALE)?,
            lo: chunk(names::EMB_LO)?,
            proj_w: range(table, names::PROJ_W, Dtype::F32, &[DIM, 3 * CNN])?,
            proj_b: vector(file, table, names::PROJ_B, 3 * CNN)?,
            ln0: (vector(file, table, names::LN0_G, 3 * CNN)?, vector(file, table, names::LN0_B, 3 * CNN)?),
            branches: [branch(ORDERS[0])?, branch(ORDERS[1])?, branch(ORDERS[2])?],
            ln1: (vector(file, table, names::LN1_G, FEAT)?, vector(file, table, names::LN1_B, FEAT)?),
            out_w: range(table, names::OUT_W, Dtype::F32, &[FEAT, DIM])?,
            out_b: vector(file, table, names::OUT_B, DIM)?,
            head: [h0?, h1?, h2?, h3?, h4?, h5?],
            // The reference adds the epsilon to float32 values as float32.
            eps: eps as f32,
        })
    }

    /// Where the embedding table lies in the file.
    pub(crate) fn table_range(&self) -> Range<usize> {
        self.emb_q.clone()
    }

    fn mat<'a>(file: &'a [u8], r: &Range<usize>, cols: usize) -> Mat<'a> {
        Mat { data: file[r.clone()].as_chunks::<4>().0, cols, packed: packs(cols) }
    }

    /// The unit vectors of a batch of token-id sentences (each non-empty,
    /// ids below [`EMB_ROWS`]; others are read as id 0). Cost: about 1.7 M
    /// multiply-adds per token plus about 1.3 M per sentence, single-threaded.
    pub(crate) fn forward(&self, file: &[u8], sentences: &[&[u32]]) -> Vec<Vec<f32>> {
        let n: usize = sentences.iter().map(|s| s.len()).sum();
        let mut spans = Vec::with_capacity(sentences.len());
        let mut start = 0;
        for s in sentences {
            spans.push(start..start + s.len());
            start += s.len();
        }
        // feats = [embedding | order 2 | order 3 | order 5]
        let mut feats = vec![0f32; n * FEAT];
        let table = &file[self.emb_q.clone()];
        for (row, &id) in feats.chunks_exact_mut(FEAT).zip(sentences.iter().flat_map(|s| s.iter())) {
            let id = if (id as usize) < EMB_ROWS { id as usize } else { 0 };
            let (scale, lo) = (self.scale[id % CHUNKS], self.lo[id % CHUNKS]);
            let q = &table[id * DIM..(id + 1) * DIM];
            for (f, &q) in row[..DIM].iter_mut().zip(q) {
                *f = f32::from(q) * scale + lo;
            }
        }

        let mut x = broadcast(&self.proj_b, n);
        matmul_acc(&feats, FEAT, n, Self::mat(file, &self.proj_w, 3 * CNN), &mut x, 3 * CNN);
        layer_norm(&mut x, 3 * CNN, &self.ln0.0, &self.ln0.1, self.eps);

        let mut window = Vec::new();
        for (i, b) in self.branches.iter().enumerate() {
            let width = b.order * CNN;
            // h = relu(window(xs) · w1 + b1) + xs
            gather_windows(&x, 3 * CNN, i * CNN, &spans, b.order, b.left, &mut window);
            let mut h = broadcast(&b.b1, n);
            matmul_acc(&window, width, n, Self::mat(file, &b.w1, CNN), &mut h, CNN);
            for (hr, xr) in h.chunks_exact_mut(CNN).zip(x.chunks_exact(3 * CNN)) {
                for (hv, &xv) in hr.iter_mut().zip(&xr[i * CNN..(i + 1) * CNN]) {
                    *hv = hv.max(0.0) + xv;
                }
            }
            // c2 = relu(window(h) · w2 + b2) + h, into its feature columns
            gather_windows(&h, CNN, 0, &spans, b.order, b.left, &mut window);
            let col = DIM + i * CNN;
            for row in feats.chunks_exact_mut(FEAT) {
                row[col..col + CNN].copy_from_slice(&b.b2);
            }
            matmul_acc(&window, width, n, Self::mat(file, &b.w2, CNN), &mut feats[col..], FEAT);
            for (fr, hr) in feats.chunks_exact_mut(FEAT).zip(h.chunks_exact(CNN)) {
                for (fv, &hv) in fr[col..col + CNN].iter_mut().zip(hr) {
                    *fv = fv.max(0.0) + hv;
                }
            }
        }
        layer_norm(&mut feats, FEAT, &self.ln1.0, &self.ln1.1, self.eps);

        // Sum pooling commutes with the (linear) output projection.
        let s = sentences.len();
        let mut pooled = vec![0f32; s * FEAT];
        let mut sum = vec![0f64; FEAT];
        for (span, out) in spans.iter().zip(pooled.chunks_exact_mut(FEAT)) {
            sum.iter_mut().for_each(|v| *v = 0.0);
            for row in feats[span.start * FEAT..span.end * FEAT].chunks_exact(FEAT) {
                for (acc, &v) in sum.iter_mut().zip(row) {
                    *acc += f64::from(v);
                }
            }
            for (o, &v) in out.iter_mut().zip(&sum) {
                *o = v as f32;
            }
        }
        let mut mean = vec![0f32; s * DIM];
        matmul_acc(&pooled, FEAT, s, Self::mat(file, &self.out_w, DIM), &mut mean, DIM);
        for (row, span) in mean.chunks_exact_mut(DIM).zip(&spans) {
            let len = span.len() as f32;
            let inv = 1.0 / len.sqrt();
            for (v, &b) in row.iter_mut().zip(&self.out_b) {
                *v = (*v + len * b) * inv;
            }
        }

        let [d0, d1, p1, d2, p3, d3] = &self.head;
        let mut y0 = vec![0f32; s * HID];
        matmul_acc(&mean, DIM, s, Self::mat(file, d0, HID), &mut y0, HID);
        relu(&mut y0);
        let mut y1 = vec![0f32; s * HID];
        matmul_acc(&mean, DIM, s, Self::mat(file, p1, HID), &mut y1, HID);
        matmul_acc(&y0, HID, s, Self::mat(file, d1, HID), &mut y1, HID);
        relu(&mut y1);
        let mut y2 = vec![0f32; s * DIM];
        matmul_acc(&y1, HID, s, Self::mat(file, d2, DIM), &mut y2, DIM);
        relu(&mut y2);
        let mut z = vec![0f32; s * DIM];
        matmul_acc(&y1, HID, s, Self::mat(file, p3, DIM), &mut z, DIM);
        matmul_acc(&y2, DIM, s, Self::mat(file, d3, DIM), &mut z, DIM);
        z.chunks_exact(DIM)
            .map(|row| {
                let mut v: Vec<f32> = row.iter().map(|x| x.tanh()).collect();
                let norm2: f32 = v.iter().map(|x| x * x).sum();
                let inv = 1.0 / norm2.max(self.eps).sqrt();
                v.iter_mut().for_each(|x| *x *= inv);
                v
            })
            .collect()
    }
}

fn broadcast(bias: &[f32], rows: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(bias.len() * rows);
    for _ in 0..rows {
        out.extend_from_slice(bias);
    }
    out
}

fn relu(v: &mut [f32]) {
    v.iter_mut().for_each(|x| *x = x.max(0.0));
}

/// Builds the n-gram windows of the `CNN`-wide column block at `col` of
/// `src` (row stride `stride`): row `t` of `out` is the concatenation of
/// rows `t − left … t − left + order − 1`, zeros where those fall outside
/// `t`'s sentence.
fn gather_windows(
    src: &[f32],
    stride: usize,
    col: usize,
    spans: &[Range<usize>],
    order: usize,
    left: usize,
    out: &mut Vec<f32>,
) {
    let width = order * CNN;
    let n = spans.last().map_or(0, |s| s.end);
    out.clear();
    out.resize(n * width, 0.0);
    for span in spans {
        for t in span.clone() {
            let row = &mut out[t * width..(t + 1) * width];
            for slot in 0..order {
                let Some(s) = (t + slot).checked_sub(left).filter(|s| span.contains(s)) else { continue };
                row[slot * CNN..(slot + 1) * CNN].copy_from_slice(&src[s * stride + col..s * stride + col + CNN]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_stop_at_sentence_bounds() {
        let src: Vec<f32> = (0..4 * CNN).map(|i| (i / CNN + 1) as f32).collect();
        let mut out = Vec::new();
        gather_windows(&src, CNN, 0, &[0..1, 1..4], 3, 1, &mut out);
        let slots = |t: usize| -> Vec<f32> { (0..3).map(|s| out[t * 3 * CNN + s * CNN]).collect() };
        assert_eq!(slots(0), vec![0.0, 1.0, 0.0]);
        assert_eq!(slots(1), vec![0.0, 2.0, 3.0]);
        assert_eq!(slots(2), vec![2.0, 3.0, 4.0]);
        assert_eq!(slots(3), vec![3.0, 4.0, 0.0]);
    }
}
