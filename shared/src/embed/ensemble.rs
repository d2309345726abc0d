//! Two embedders as one (`use-m3+e5`): a cross-lingual base (USE-m3)
//! beside an asymmetric second opinion (multilingual-e5-small) that reads
//! paraphrase within one language better and reads across languages
//! worse. The index keeps one vector a record and scores by dot product,
//! so the fusion lives in the vectors' layout: a query `q` and a document
//! `d` score
//!
//! `s = W·cos_base + (1 − W)·(o·(K·cos_second − (K − 1)) + (1 − o)·cos_base)`
//!
//! where `o` is how much the two texts share a script (`o = l_q·l_d +
//! c_q·c_d`, `c` the share of CJK characters among a text's letters, `l =
//! 1 − c`). Within one script the second embedder's cosine counts, stretched
//! (its cosines crowd 0.7–0.9; `K·cos − (K − 1)` spreads them like the base's,
//! so the relevance bars tuned on the base keep their meaning); across
//! scripts the base alone decides.
//!
//! Layout (before scaling): a document is `[u | l·e | c·e | l | c | c·u |
//! l·u | pad]` (`1 − l = c`), a query `[W·u | (1−W)K·l·e | (1−W)K·c·e |
//! −(1−W)(K−1)·l | −(1−W)(K−1)·c | (1−W)·l·u | (1−W)·c·u | 0]`. `pad`
//! brings every document to length 2, and documents are halved to unit
//! length (what a cosine index expects); queries are doubled, so `q · d`
//! is `s` exactly. Queries are not unit length: an index scoring by cosine
//! multiplies by the query's length (`index::s3vectors`).
//!
//! Cost: both embedders' costs; vectors of `3·base + 2·second + 3`
//! dimensions (2,307 for USE-m3 and E5: 4.5× USE-m3's index).

use std::sync::Arc;

use async_trait::async_trait;

use super::{EmbedError, Embedder};

/// The base's weight `W`: 0.7 (0.5 held less of the answer on the
/// conversational evaluation's conversations it was tried on).
pub const BASE_WEIGHT: f32 = 0.7;
/// How far the second embedder's cosines are stretched, `K`: 4.
pub const STRETCH: f32 = 4.0;

/// The share of CJK characters (Han, kana, Hangul) among `text`'s
/// alphabetic characters; 0 for a text with none.
#[must_use]
pub fn cjk_share(text: &str) -> f32 {
    let (mut letters, mut cjk) = (0u32, 0u32);
    for c in text.chars().filter(|c| c.is_alphabetic()) {
        letters += 1;
        cjk += u32::from(is_cjk(c));
    }
    if letters == 0 { 0.0 } else { cjk as f32 / letters as f32 }
}

fn is_cjk(c: char) -> bool {
    matches!(u32::from(c),
        0x3040..=0x30ff // kana
        | 0x3400..=0x4dbf | 0x4e00..=0x9fff | 0xf900..=0xfaff | 0x20000..=0x3134f // Han
        | 0x1100..=0x11ff | 0x3130..=0x318f | 0xac00..=0xd7af // Hangul
    )
}

/// A base and a second embedder fused by script (see the module).
#[derive(Debug)]
pub struct Ensemble {
    id: String,
    base: Arc<dyn Embedder>,
    second: Arc<dyn Embedder>,
}

impl Ensemble {
    /// `base` (cross-lingual, symmetric) beside `second` (asymmetric: its
    /// [`Embedder::embed_queries`] side embeds queries). Costs nothing.
    #[must_use]
    pub fn new(base: Arc<dyn Embedder>, second: Arc<dyn Embedder>) -> Self {
        let dimension = 3 * base.dimension() + 2 * second.dimension() + 3;
        let id = format!("{}+{}/script-{dimension}", base.id(), second.id());
        Self { id, base, second }
    }

    fn check(&self, got: &[Vec<f32>], texts: usize, who: &dyn Embedder) -> Result<(), EmbedError> {
        let bad = got.len() != texts || got.iter().any(|v| v.len() != who.dimension());
        if bad {
            return Err(EmbedError::Shape { provider: self.id.clone(), want: texts, got: got.len() });
        }
        Ok(())
    }
}

#[async_trait]
impl Embedder for Ensemble {
    fn id(&self) -> &str {
        &self.id
    }

    fn dimension(&self) -> usize {
        3 * self.base.dimension() + 2 * self.second.dimension() + 3
    }

    async fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let (base, second) = tokio::try_join!(self.base.embed(texts), self.second.embed(texts))?;
        self.check(&base, texts.len(), self.base.as_ref())?;
        self.check(&second, texts.len(), self.second.as_ref())?;
        Ok(texts.iter().zip(base).zip(second).map(|((t, u), e)| document(cjk_share(t), &u, &e)).collect())
    }

    async fn embed_queries(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let (base, second) = tokio::try_join!(self.base.embed_queries(texts), self.second.embed_queries(texts))?;
        self.check(&base, texts.len(), self.base.as_ref())?;
        self.check(&second, texts.len(), self.second.as_ref())?;
        Ok(texts.iter().zip(base).zip(second).map(|((t, u), e)| query(cjk_share(t), &u, &e)).collect())
    }
}

fn scaled(v: &[f32], by: f32) -> impl Iterator<Item = f32> + '_ {
    v.iter().map(move |x| x * by)
}

/// A document's vector: unit length (see the module's layout).
fn document(c: f32, u: &[f32], e: &[f32]) -> Vec<f32> {
    let l = 1.0 - c;
    let mut d: Vec<f32> = Vec::with_capacity(3 * u.len() + 2 * e.len() + 3);
    d.extend(u);
    d.extend(scaled(e, l));
    d.extend(scaled(e, c));
    d.extend([l, c]);
    d.extend(scaled(u, c));
    d.extend(scaled(u, l));
    let len2: f32 = d.iter().map(|x| x * x).sum();
    d.push((4.0 - len2).max(0.0).sqrt());
    d.iter_mut().for_each(|x| *x *= 0.5);
    d
}

/// A query's vector: its dot product with [`document`]'s is the fused score.
fn query(c: f32, u: &[f32], e: &[f32]) -> Vec<f32> {
    let (l, w, k) = (1.0 - c, BASE_WEIGHT, STRETCH);
    let mut q: Vec<f32> = Vec::with_capacity(3 * u.len() + 2 * e.len() + 3);
    q.extend(scaled(u, w));
    q.extend(scaled(e, (1.0 - w) * k * l));
    q.extend(scaled(e, (1.0 - w) * k * c));
    q.extend([-(1.0 - w) * (k - 1.0) * l, -(1.0 - w) * (k - 1.0) * c]);
    q.extend(scaled(u, (1.0 - w) * l));
    q.extend(scaled(u, (1.0 - w) * c));
    q.push(0.0);
    q.iter_mut().for_each(|x| *x *= 2.0);
    q
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::dot;

    fn unit(seed: u32, n: usize) -> Vec<f32> {
        let mut v: Vec<f32> =
            (0..n).map(|i| (((i as u32).wrapping_mul(2_654_435_761) ^ seed) % 1000) as f32 - 500.0).collect();
        crate::embed::l2_normalise(&mut v);
        v
    }

    #[test]
    fn scripts_are_shared_by_their_letters() {
        for (text, want) in [
            ("where does my dad come from?", 0.0),
            ("我的狗对什么过敏？", 1.0),
            ("東京のさくら", 1.0),
            ("서울", 1.0),
            ("PR 审核", 0.5),
            ("12:30 — 100%", 0.0),
        ] {
            assert!((cjk_share(text) - want).abs() < 1e-6, "{text}: {}", cjk_share(text));
        }
    }

    #[test]
    fn the_dot_product_is_the_fused_score_and_documents_are_unit() {
        let (uq, ud, eq, ed) = (unit(1, 16), unit(2, 16), unit(3, 8), unit(4, 8));
        let (cu, ce) = (f64::from(dot(&uq, &ud)), f64::from(dot(&eq, &ed)));
        let (w, k) = (f64::from(BASE_WEIGHT), f64::from(STRETCH));
        for (cq, cd) in [(0.0f32, 0.0f32), (1.0, 1.0), (0.0, 1.0), (1.0, 0.0), (0.3, 0.8)] {
            let d = document(cd, &ud, &ed);
            let q = query(cq, &uq, &eq);
            assert_eq!(d.len(), q.len());
            assert!((f64::from(dot(&d, &d)) - 1.0).abs() < 1e-5, "document length");
            let (lq, lcq, ld, lcd) = (1.0 - f64::from(cq), f64::from(cq), 1.0 - f64::from(cd), f64::from(cd));
            let o = lq * ld + lcq * lcd;
            let want = w * cu + (1.0 - w) * (o * (k * ce - (k - 1.0)) + (1.0 - o) * cu);
            assert!((f64::from(dot(&q, &d)) - want).abs() < 1e-5, "({cq}, {cd}): {} vs {want}", dot(&q, &d));
        }
    }
}
