//! Double-array tries in darts-clone's unit layout, used twice: the
//! SentencePiece normaliser's precompiled charsmap (built by darts-clone
//! itself, shipped inside `sp.model`) and the piece vocabulary (built here,
//! at conversion time, by [`build`]).
//!
//! One unit is a little-endian `u32`:
//! - bits 0–7: the label (the byte that leads from the parent to this node);
//! - bit 8: the node has a value (a key ends here);
//! - bits 10–30 with bit 9: the XOR offset from this node to the base of its
//!   children (`(unit >> 10) << ((unit & 0x200) >> 6)`);
//! - bit 31 set marks a value unit; its low 31 bits are the value. A node's
//!   value sits at `base ^ 0`.
//!
//! A node's children live at `base ^ label`. Every base is used by at most
//! one node, so checking a child's label is enough to know it belongs to the
//! node being walked (no separate check array).

use std::collections::{BTreeSet, VecDeque};

/// The units of a trie, read straight from little-endian bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Units<'a> {
    units: &'a [[u8; 4]],
}

/// A position in a walk: the base of the current node's children.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cursor(usize);

impl<'a> Units<'a> {
    /// Units over `bytes` (a trailing partial unit is ignored).
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { units: bytes.as_chunks::<4>().0 }
    }

    fn unit(&self, pos: usize) -> Option<u32> {
        self.units.get(pos).map(|b| u32::from_le_bytes(*b))
    }

    /// The walk's starting point (`None` for an empty trie).
    pub(crate) fn root(&self) -> Option<Cursor> {
        self.unit(0).map(|u| Cursor(offset(u)))
    }

    /// Follows the edge labelled `byte` from `at`: the child's cursor and,
    /// when a key ends at the child, its value. `None` when there is no
    /// such edge (also for positions outside the array).
    #[inline]
    pub(crate) fn step(&self, at: Cursor, byte: u8) -> Option<(Cursor, Option<u32>)> {
        let pos = at.0 ^ usize::from(byte);
        let unit = self.unit(pos)?;
        if unit & 0x8000_00FF != u32::from(byte) {
            return None;
        }
        let base = pos ^ offset(unit);
        let value = if unit & 0x100 != 0 { self.unit(base).map(|v| v & 0x7FFF_FFFF) } else { None };
        Some((Cursor(base), value))
    }
}

#[inline]
fn offset(unit: u32) -> usize {
    ((unit >> 10) << ((unit & 0x200) >> 6)) as usize
}

/// Why a trie could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A key is empty, contains a NUL byte or is listed twice.
    #[error("trie key #{0} is empty, contains a NUL byte or repeats an earlier key")]
    BadKey(usize),
    /// A value does not fit in 31 bits.
    #[error("trie value {0} does not fit in 31 bits")]
    BadValue(u32),
    /// The array outgrew what the unit layout can address (2^21 units).
    #[error("trie too large for the unit layout")]
    TooLarge,
}

/// Positions a base may use: all XOR offsets stay below this.
const MAX_UNITS: usize = 1 << 21;

/// Builds a double array mapping each key to its value, as little-endian
/// units (a multiple of 256 units long, so every `base ^ byte` is inside).
///
/// Keys may come in any order; they must be non-empty, unique and free of
/// NUL bytes, and values must fit in 31 bits. Cost: sorting the keys, then
/// roughly linear in the number of trie nodes (about 0.5 s for the 128k
/// USE-m3 pieces in a release build).
///
/// # Errors
/// [`BuildError`] for a bad key or value, or a trie beyond 2^21 units.
pub fn build(keys: &[(&[u8], u32)]) -> Result<Vec<u8>, BuildError> {
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by(|&a, &b| keys[a].0.cmp(keys[b].0));
    for (n, &k) in order.iter().enumerate() {
        let (key, value) = keys[k];
        if key.is_empty() || key.contains(&0) || (n > 0 && keys[order[n - 1]].0 == key) {
            return Err(BuildError::BadKey(k));
        }
        if value > 0x7FFF_FFFF {
            return Err(BuildError::BadValue(value));
        }
    }
    let sorted: Vec<(&[u8], u32)> = order.iter().map(|&k| keys[k]).collect();

    let mut b = Builder { units: Vec::new(), used: Vec::new(), base_used: Vec::new(), free: BTreeSet::new() };
    b.grow(256)?;
    b.take(0);
    // (node position, depth, key range)
    let mut queue = VecDeque::from([(0usize, 0usize, 0usize, sorted.len())]);
    let mut labels: Vec<u8> = Vec::with_capacity(256);
    while let Some((pos, depth, lo, hi)) = queue.pop_front() {
        if lo == hi {
            continue;
        }
        // The only key that can end here is the first (keys are sorted).
        let leaf = (sorted[lo].0.len() == depth).then_some(sorted[lo].1);
        let first_child = if leaf.is_some() { lo + 1 } else { lo };
        labels.clear();
        if leaf.is_some() {
            labels.push(0);
        }
        for (key, _) in &sorted[first_child..hi] {
            let byte = key[depth];
            if labels.last() != Some(&byte) {
                labels.push(byte);
            }
        }
        let base = b.find_base(&labels)?;
        let off = pos ^ base;
        if off >= MAX_UNITS {
            return Err(BuildError::TooLarge);
        }
        b.base_used[base] = true;
        b.units[pos] |= (off as u32) << 10 | if leaf.is_some() { 0x100 } else { 0 };
        for &label in &labels {
            let child = base ^ usize::from(label);
            b.take(child);
            b.units[child] = u32::from(label);
        }
        if let Some(value) = leaf {
            b.units[base] = value | 0x8000_0000;
        }
        let mut start = first_child;
        while start < hi {
            let byte = sorted[start].0[depth];
            let mut end = start + 1;
            while end < hi && sorted[end].0[depth] == byte {
                end += 1;
            }
            queue.push_back((base ^ usize::from(byte), depth + 1, start, end));
            start = end;
        }
    }
    // Unused units must never match a label (not even 0).
    for (unit, used) in b.units.iter_mut().zip(&b.used) {
        if !used {
            *unit = 0x8000_0000;
        }
    }
    Ok(b.units.iter().flat_map(|u| u.to_le_bytes()).collect())
}

/// Free positions older than this many units behind the end are given up
/// on (as darts-clone does), which keeps the search for a base short.
const SEARCH_WINDOW: usize = 16 * 256;

struct Builder {
    units: Vec<u32>,
    used: Vec<bool>,
    base_used: Vec<bool>,
    free: BTreeSet<usize>,
}

impl Builder {
    fn grow(&mut self, to: usize) -> Result<(), BuildError> {
        let to = to.div_ceil(256) * 256;
        if to > MAX_UNITS {
            return Err(BuildError::TooLarge);
        }
        let from = self.units.len();
        if to > from {
            self.units.resize(to, 0);
            self.used.resize(to, false);
            self.base_used.resize(to, false);
            self.free.extend(from..to);
        }
        Ok(())
    }

    fn take(&mut self, pos: usize) {
        self.used[pos] = true;
        self.free.remove(&pos);
    }

    /// A base not yet taken whose `base ^ label` positions are all free,
    /// searched among the free positions of the last few blocks.
    fn find_base(&mut self, labels: &[u8]) -> Result<usize, BuildError> {
        let first = usize::from(labels[0]);
        loop {
            let window = self.units.len().saturating_sub(SEARCH_WINDOW);
            let found = self.free.range(window..).map(|&probe| probe ^ first).find(|&base| {
                base != 0 && !self.base_used[base] && labels.iter().all(|&l| !self.used[base ^ usize::from(l)])
            });
            if let Some(base) = found {
                return Ok(base);
            }
            self.grow(self.units.len() + 256)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every value found along the walk of `key` (prefix matches).
    fn prefixes(units: Units<'_>, key: &[u8]) -> Vec<(usize, u32)> {
        let mut out = Vec::new();
        let Some(mut at) = units.root() else { return out };
        for (i, &byte) in key.iter().enumerate() {
            match units.step(at, byte) {
                Some((next, value)) => {
                    if let Some(v) = value {
                        out.push((i + 1, v));
                    }
                    at = next;
                }
                None => break,
            }
        }
        out
    }

    #[test]
    fn built_trie_finds_every_key_and_only_keys() {
        let words: Vec<&[u8]> =
            vec![b"a", b"ab", b"abc", b"b", b"bcd", "\u{2581}".as_bytes(), "\u{2581}the".as_bytes(), "中文".as_bytes()];
        let keys: Vec<(&[u8], u32)> = words.iter().enumerate().map(|(i, w)| (*w, i as u32 * 7 + 3)).collect();
        let bytes = build(&keys).expect("builds");
        assert_eq!(bytes.len() % 1024, 0);
        let units = Units::new(&bytes);
        assert_eq!(prefixes(units, b"abcd"), vec![(1, 3), (2, 10), (3, 17)]);
        assert_eq!(prefixes(units, b"bc"), vec![(1, 24)]);
        assert_eq!(prefixes(units, b"bcd!"), vec![(1, 24), (3, 31)]);
        assert_eq!(prefixes(units, "\u{2581}them".as_bytes()), vec![(3, 38), (6, 45)]);
        assert_eq!(prefixes(units, "中文字".as_bytes()), vec![(6, 52)]);
        assert_eq!(prefixes(units, "中".as_bytes()), vec![]);
        assert_eq!(prefixes(units, b"c"), vec![]);
        assert_eq!(prefixes(units, b"\0a"), vec![]);
        assert_eq!(prefixes(units, b"a\0"), vec![(1, 3)]);
    }

    #[test]
    fn many_keys_round_trip() {
        let words: Vec<String> = (0..3000u32).map(|i| format!("k{}x{}", i % 97, i * 31 % 1013)).collect();
        let mut uniq = words;
        uniq.sort();
        uniq.dedup();
        let keys: Vec<(&[u8], u32)> = uniq.iter().enumerate().map(|(i, w)| (w.as_bytes(), i as u32)).collect();
        let bytes = build(&keys).expect("builds");
        let units = Units::new(&bytes);
        for (key, value) in &keys {
            assert_eq!(prefixes(units, key).last(), Some(&(key.len(), *value)));
        }
        assert_eq!(prefixes(units, b"zz"), vec![]);
    }

    #[test]
    fn bad_keys_are_refused() {
        assert!(matches!(build(&[(b"a", 1), (b"a", 2)]), Err(BuildError::BadKey(_))));
        assert!(matches!(build(&[(b"", 1)]), Err(BuildError::BadKey(0))));
        assert!(matches!(build(&[(b"a\0b", 1)]), Err(BuildError::BadKey(0))));
        assert!(matches!(build(&[(b"a", u32::MAX)]), Err(BuildError::BadValue(_))));
    }
}
