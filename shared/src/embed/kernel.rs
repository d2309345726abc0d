//! The dense kernels the embedded embedders share: LayerNorm, and a matrix product over
//! weights read in place as little-endian `f32` bytes (a mapped model file,
//! or weights decoded into the same layout), in plain Rust that the
//! optimiser vectorises: compiled once for plain x86-64 (SSE2, ~27
//! GFLOP/s on the bench machine) and once with AVX2 and FMA, chosen at run
//! time when the CPU has them (see `BENCHMARKS.md`).

/// An `f32` matrix read in place from little-endian bytes: row-major, or
/// packed in panels ([`pack`]).
#[derive(Clone, Copy)]
pub(crate) struct Mat<'a> {
    /// The elements, each an `f32`'s little-endian bytes.
    pub(crate) data: &'a [[u8; 4]],
    /// Columns per row.
    pub(crate) cols: usize,
    /// Panel-major: each [`TILE_COLS`]-column panel's rows lie together
    /// (`cols` a multiple of [`TILE_COLS`]), so a tile reads its weights
    /// in one run instead of one cache line per row.
    pub(crate) packed: bool,
}

/// Whether a matrix of `cols` columns is packed in panels by [`pack`]
/// (`cols` a multiple of [`TILE_COLS`]).
pub(crate) fn packs(cols: usize) -> bool {
    cols > 0 && cols.is_multiple_of(TILE_COLS)
}

/// The row-major `rows × cols` matrix `w` laid out for [`matmul_acc`]:
/// packed in panels when [`packs`]`(cols)` (the returned flag), else as it
/// is.
pub(crate) fn pack<T: Copy>(w: &[T], cols: usize) -> (Vec<T>, bool) {
    if !packs(cols) {
        return (w.to_vec(), false);
    }
    let rows = w.len() / cols;
    let mut out = Vec::with_capacity(w.len());
    for j0 in (0..cols).step_by(TILE_COLS) {
        for r in 0..rows {
            out.extend_from_slice(&w[r * cols + j0..r * cols + j0 + TILE_COLS]);
        }
    }
    (out, true)
}

/// Output columns per register tile.
const TILE_COLS: usize = 16;
/// Rows per register tile.
const TILE_ROWS: usize = 4;

/// `out[r][..m] += a[r][..k] · w` for `rows` rows, with `a` of row stride
/// `lda`, `out` of row stride `ldo`, and `w` a `k × m` matrix. Register
/// tiles of 4 rows × 16 columns run down the whole `k`, so each 16-column
/// panel of `w` is reused from cache by every 4-row block. With AVX2 and
/// FMA (detected once, then a cached check) products are fused
/// multiply-adds, which round once instead of twice.
#[allow(unsafe_code)]
pub(crate) fn matmul_acc(a: &[f32], lda: usize, rows: usize, w: Mat<'_>, out: &mut [f32], ldo: usize) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the two features `matmul_avx2_fma` is compiled for were
        // just detected on this CPU.
        unsafe { matmul_avx2_fma(a, lda, rows, w, out, ldo) };
        return;
    }
    matmul::<false>(a, lda, rows, w, out, ldo);
}

/// [`matmul_acc`] compiled for AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn matmul_avx2_fma(a: &[f32], lda: usize, rows: usize, w: Mat<'_>, out: &mut [f32], ldo: usize) {
    matmul::<true>(a, lda, rows, w, out, ldo);
}

/// [`matmul_acc`]'s body; `FMA` fuses each multiply-add.
#[inline(always)]
fn matmul<const FMA: bool>(a: &[f32], lda: usize, rows: usize, w: Mat<'_>, out: &mut [f32], ldo: usize) {
    let m = w.cols;
    if m == 0 || rows == 0 {
        return;
    }
    let k = w.data.len() / m;
    let full = m / TILE_COLS * TILE_COLS;
    for j0 in (0..full).step_by(TILE_COLS) {
        let mut r0 = 0;
        while r0 + TILE_ROWS <= rows {
            tile::<TILE_ROWS, FMA>(a, lda, r0, k, w, j0, out, ldo);
            r0 += TILE_ROWS;
        }
        while r0 < rows {
            tile::<1, FMA>(a, lda, r0, k, w, j0, out, ldo);
            r0 += 1;
        }
    }
    for j in full..m {
        for r in 0..rows {
            let mut acc = out[r * ldo + j];
            for kk in 0..k {
                acc += a[r * lda + kk] * f32::from_le_bytes(w.data[kk * m + j]);
            }
            out[r * ldo + j] = acc;
        }
    }
}

/// One register tile: `R` rows × [`TILE_COLS`] columns at (`r0`, `j0`),
/// accumulated over all of `k`. Written with plain indexed loops, which the
/// optimiser unrolls and vectorises and which stay tolerable in debug builds.
#[inline(always)]
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
fn tile<const R: usize, const FMA: bool>(
    a: &[f32],
    lda: usize,
    r0: usize,
    k: usize,
    w: Mat<'_>,
    j0: usize,
    out: &mut [f32],
    ldo: usize,
) {
    let (base, stride) = if w.packed { (j0 * k, TILE_COLS) } else { (j0, w.cols) };
    let mut acc = [[0f32; TILE_COLS]; R];
    for r in 0..R {
        acc[r].copy_from_slice(&out[(r0 + r) * ldo + j0..(r0 + r) * ldo + j0 + TILE_COLS]);
    }
    let mut av = [0f32; R];
    let mut wv = [0f32; TILE_COLS];
    // `while` loops: no iterator calls, which debug builds do not inline.
    let mut kk = 0;
    while kk < k {
        let wrow = &w.data[base + kk * stride..base + kk * stride + TILE_COLS];
        let mut c = 0;
        while c < TILE_COLS {
            wv[c] = f32::from_bits(u32::from_le_bytes(wrow[c]));
            c += 1;
        }
        let mut r = 0;
        while r < R {
            av[r] = a[(r0 + r) * lda + kk];
            r += 1;
        }
        r = 0;
        while r < R {
            let (x, row) = (av[r], &mut acc[r]);
            c = 0;
            while c < TILE_COLS {
                row[c] = if FMA { x.mul_add(wv[c], row[c]) } else { row[c] + x * wv[c] };
                c += 1;
            }
            r += 1;
        }
        kk += 1;
    }
    for r in 0..R {
        out[(r0 + r) * ldo + j0..(r0 + r) * ldo + j0 + TILE_COLS].copy_from_slice(&acc[r]);
    }
}

/// LayerNorm over each `width`-wide row of `x` in place, statistics
/// accumulated in `f64`.
pub(crate) fn layer_norm(x: &mut [f32], width: usize, gain: &[f32], bias: &[f32], eps: f32) {
    for row in x.chunks_exact_mut(width) {
        let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / width as f64;
        let mean = mean as f32;
        let mut var = 0f64;
        for v in row.iter_mut() {
            *v -= mean;
            var += f64::from(*v) * f64::from(*v);
        }
        let inv = 1.0 / ((var / width as f64) as f32 + eps).sqrt();
        for ((v, &g), &b) in row.iter_mut().zip(gain).zip(bias) {
            *v = *v * inv * g + b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_build_of_the_product_matches_the_naive_one() {
        let (rows, k, m) = (7, 13, 35);
        let a: Vec<f32> = (0..rows * k).map(|i| (i % 11) as f32 * 0.25 - 1.0).collect();
        let w: Vec<f32> = (0..k * m).map(|i| (i % 7) as f32 * 0.5 - 1.5).collect();
        let bytes: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mat = Mat { data: bytes.as_chunks::<4>().0, cols: m, packed: false };
        // The dispatched product, and each build whatever this CPU has (the
        // fused one without its target feature is slow, not wrong).
        type Product = fn(&[f32], usize, usize, Mat<'_>, &mut [f32], usize);
        let builds: [(&str, Product); 3] =
            [("dispatched", matmul_acc), ("plain", matmul::<false>), ("fused", matmul::<true>)];
        for (name, product) in builds {
            let mut out = vec![1.0f32; rows * m];
            product(&a, k, rows, mat, &mut out, m);
            assert_near_product(&out, &a, &w, (rows, k, m), name);
        }
    }

    /// `out` is `1 + a · w` for the `(rows, k, m)` shapes.
    fn assert_near_product(out: &[f32], a: &[f32], w: &[f32], (rows, k, m): (usize, usize, usize), name: &str) {
        for r in 0..rows {
            for j in 0..m {
                let want: f32 = 1.0 + (0..k).map(|kk| a[r * k + kk] * w[kk * m + j]).sum::<f32>();
                assert!((out[r * m + j] - want).abs() < 1e-4, "{name}: {r},{j}");
            }
        }
    }

    #[test]
    fn packed_weights_give_the_same_product() {
        let (rows, k, m) = (6, 9, 48);
        let a: Vec<f32> = (0..rows * k).map(|i| (i % 5) as f32 - 2.0).collect();
        let w: Vec<f32> = (0..k * m).map(|i| (i % 13) as f32 * 0.25 - 1.5).collect();
        let bytes: Vec<[u8; 4]> = w.iter().map(|v| v.to_le_bytes()).collect();
        let (packed, is_packed) = pack(&bytes, m);
        assert!(is_packed && packed != bytes, "48 columns pack into three panels");
        let mut out = vec![1.0f32; rows * m];
        matmul_acc(&a, k, rows, Mat { data: &packed, cols: m, packed: true }, &mut out, m);
        assert_near_product(&out, &a, &w, (rows, k, m), "packed");
        // Columns that do not fill panels stay row-major.
        assert_eq!(pack(&bytes[..k * 20], 20), (bytes[..k * 20].to_vec(), false));
    }

    #[test]
    fn layer_norm_centres_and_scales_each_row() {
        let mut x = vec![1.0, 2.0, 3.0];
        layer_norm(&mut x, 3, &[2.0; 3], &[0.5; 3], 0.0);
        let s = (2.0f32 / 3.0).sqrt();
        for (got, want) in x.iter().zip([0.5 - 2.0 / s, 0.5, 0.5 + 2.0 / s]) {
            assert!((got - want).abs() < 1e-5, "{got} vs {want}");
        }
    }
}
