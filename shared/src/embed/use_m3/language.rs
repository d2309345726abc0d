//! USE-m3's language axis, taken out of query vectors.
//!
//! USE-m3 places a sentence and its translation close together, but not on
//! top of each other: every Chinese vector leans one way and every English
//! vector the other, whatever they say. A query in one language therefore
//! scores documents in its own language a little higher than equally
//! relevant ones in the other, and a question asked in Chinese about an
//! English note loses to Chinese notes on other topics. The axis
//! ([`AXIS`]) is that lean: the normalised mean of the Chinese vectors of
//! [`PAIRS`] less the mean of their English twins, so the meaning cancels
//! and the language is left ([`derive`]).
//!
//! [`UseM3Embedder`](super::UseM3Embedder) takes [`QUERY_SHARE`] of the
//! axis out of every query vector ([`neutralise`]); documents are embedded
//! as before, so an index needs no rebuild and both index backends rank
//! alike. Removing the component from the query alone changes a document's
//! score by `−share·(q·a)(d·a)`: what the document's language added.
//! Pure: no model here; the generator (`cargo run --release -p skald-bench
//! --bin language_axis`) and its check (`tests/it/use_m3_parity.rs`) embed.

/// The English and Chinese sentence pairs the axis is derived from (a tab
/// between them; `#` starts a comment line). Written for this purpose;
/// no evaluation set's text is among them.
pub const PAIRS: &str = include_str!("language_pairs.tsv");

/// USE-m3's language axis ([`derive`]d from [`PAIRS`]; a unit vector of
/// [`super::DIMENSION`] values), generated into `language_axis.in` by
/// `cargo run --release -p skald-bench --bin language_axis`.
pub const AXIS: [f32; super::DIMENSION] = include!("language_axis.in");

/// The share of the axis taken out of a query vector: 0 keeps the query as
/// the model gives it, 1 removes its language component entirely. Chosen
/// on the retrieval set's cross-language questions (`BENCHMARKS.md`).
pub const QUERY_SHARE: f32 = 0.5;

/// The `(english, chinese)` pairs of `text` in [`PAIRS`]' format; lines
/// without a tab, blank lines and comments are skipped.
#[must_use]
pub fn pairs(text: &str) -> Vec<(&str, &str)> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split_once('\t'))
        .map(|(en, zh)| (en.trim(), zh.trim()))
        .filter(|(en, zh)| !en.is_empty() && !zh.is_empty())
        .collect()
}

/// The unit axis from `english` to `chinese` vectors (equally many, each of
/// the same dimension): the normalised difference of their means. `None`
/// when either side is empty, the dimensions differ or the means coincide.
#[must_use]
pub fn derive(english: &[Vec<f32>], chinese: &[Vec<f32>]) -> Option<Vec<f32>> {
    let dim = english.first()?.len();
    if chinese.is_empty() || english.iter().chain(chinese).any(|v| v.len() != dim) {
        return None;
    }
    let mean = |vs: &[Vec<f32>]| -> Vec<f64> {
        let mut sum = vec![0.0f64; dim];
        for v in vs {
            sum.iter_mut().zip(v).for_each(|(s, x)| *s += f64::from(*x));
        }
        sum.iter().map(|s| s / vs.len() as f64).collect()
    };
    let difference: Vec<f64> = mean(chinese).iter().zip(mean(english)).map(|(zh, en)| zh - en).collect();
    let norm = difference.iter().map(|x| x * x).sum::<f64>().sqrt();
    (norm > f64::EPSILON).then(|| difference.iter().map(|x| (x / norm) as f32).collect())
}

/// Takes `share` of the unit `axis` out of the unit vector `v`
/// (`v − share·(v·axis)·axis`) and normalises it again. A vector of
/// another dimension is left as it is.
pub fn neutralise(v: &mut [f32], axis: &[f32], share: f32) {
    if v.len() != axis.len() {
        return;
    }
    let along = super::super::dot(v, axis) * share;
    v.iter_mut().zip(axis).for_each(|(x, a)| *x -= along * a);
    super::super::l2_normalise(v);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pairs_file_holds_eighty_pairs_in_both_languages() {
        let pairs = pairs(PAIRS);
        assert_eq!(pairs.len(), 80);
        let han = |s: &str| s.chars().any(|c| ('\u{4e00}'..='\u{9fff}').contains(&c));
        assert!(pairs.iter().all(|(en, zh)| !han(en) && han(zh)), "English first, Chinese second");
        assert_eq!(super::pairs("# note\n\nno tab\na\tb\n \t \n"), vec![("a", "b")]);
    }

    #[test]
    fn the_axis_is_the_unit_difference_of_the_means() {
        let english = vec![vec![1.0, 0.0, 0.0], vec![0.0, 1.0, 0.0]];
        let chinese = vec![vec![1.0, 0.0, 1.0], vec![0.0, 1.0, 1.0]];
        assert_eq!(derive(&english, &chinese), Some(vec![0.0, 0.0, 1.0]));
        assert_eq!(derive(&english, &english), None, "no difference, no axis");
        assert_eq!(derive(&[], &chinese), None);
        assert_eq!(derive(&english, &[vec![1.0, 0.0]]), None, "dimensions differ");
    }

    #[test]
    fn neutralising_removes_the_share_along_the_axis_and_keeps_unit_length() {
        let axis = [0.0, 0.0, 1.0];
        let s = std::f32::consts::FRAC_1_SQRT_2;
        // (what, share, the component along the axis after, over the rest)
        for (share, ratio) in [(0.0, 1.0), (0.5, 0.5), (1.0, 0.0)] {
            let mut v = [s, 0.0, s];
            neutralise(&mut v, &axis, share);
            let length = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((length - 1.0).abs() < 1e-6, "share {share}: unit length, got {length}");
            assert!((v[2] / v[0] - ratio).abs() < 1e-6, "share {share}: {v:?}");
        }
        let mut other = [1.0, 0.0];
        neutralise(&mut other, &axis, 1.0);
        assert_eq!(other, [1.0, 0.0], "another dimension is left alone");
    }
}
