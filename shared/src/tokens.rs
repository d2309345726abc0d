//! The CJK-aware token estimator: the one function every budget uses.
//!
//! Per code point: 1.5 tokens for CJK (the ranges below), 2.0 for other code
//! points above U+FFFF, 0.25 otherwise; the total is rounded up. It counts in
//! integer quarter-tokens, so there is no float error, and pure ASCII takes a
//! fast path that never decodes UTF-8.

/// Code point ranges weighted 1.5 tokens: CJK punctuation, kana, CJK
/// ideographs (with extensions), Hangul, compatibility ideographs and
/// full-width forms.
const CJK_RANGES: [(u32, u32); 11] = [
    (0x1100, 0x11FF),
    (0x3000, 0x303F),
    (0x3040, 0x30FF),
    (0x3130, 0x318F),
    (0x31F0, 0x31FF),
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xAC00, 0xD7AF),
    (0xF900, 0xFAFF),
    (0xFF00, 0xFFEF),
    (0x20000, 0x2EBEF),
];

/// Estimated tokens of `text`: `ceil(Σ weight)`, with weights 1.5 (CJK),
/// 2.0 (other astral code points) and 0.25 (everything else).
///
/// Cost: one pass over the bytes, no allocation; `(len + 3) / 4` for ASCII.
#[must_use]
pub fn estimate_tokens(text: &str) -> usize {
    if text.is_ascii() {
        return text.len().div_ceil(4);
    }
    let quarters: usize = text.chars().map(quarter_tokens).sum();
    quarters.div_ceil(4)
}

/// The weight of one code point, in quarter tokens.
fn quarter_tokens(c: char) -> usize {
    let cp = u32::from(c);
    if cp < 0x1100 {
        return 1;
    }
    if CJK_RANGES.iter().any(|&(lo, hi)| (lo..=hi).contains(&cp)) {
        6
    } else if cp > 0xFFFF {
        8
    } else {
        1
    }
}

/// Estimated tokens of `text` once escaped as XML element text the way
/// Skald renders it (`<` → `&lt;`, `>` → `&gt;`, `&` → `&amp;`, CR →
/// `&#13;`; characters XML cannot hold become U+FFFD). Equal to
/// `estimate_tokens(&escaped)`, without building the escaped string.
///
/// Cost: one pass, no allocation.
#[must_use]
pub fn estimate_escaped_tokens(text: &str) -> usize {
    let extra: usize = text
        .bytes()
        .map(|b| match b {
            b'<' | b'>' => 3,
            b'&' | b'\r' => 4,
            _ => 0,
        })
        .sum();
    let quarters: usize = if text.is_ascii() { text.len() } else { text.chars().map(escaped_quarter_tokens).sum() };
    (quarters + extra).div_ceil(4)
}

/// The weight of one code point after escaping (a character XML cannot
/// hold becomes U+FFFD, one quarter token).
fn escaped_quarter_tokens(c: char) -> usize {
    if crate::xml_text::is_xml_char(c) { quarter_tokens(c) } else { 1 }
}

/// The longest prefix of `text` (cut at a char boundary) whose estimate is at
/// most `max_tokens`. Returns `text` itself when it already fits.
///
/// Cost: one pass over the kept prefix.
#[must_use]
pub fn truncate_to_tokens(text: &str, max_tokens: usize) -> &str {
    prefix_within(text, max_tokens.saturating_mul(4), quarter_tokens)
}

/// The longest prefix of `text`, cut at a char boundary, whose characters
/// cost at most `budget` in all by `cost`; `text` itself when it fits.
///
/// Cost: one pass over the kept prefix.
#[must_use]
pub fn prefix_within(text: &str, budget: usize, cost: impl Fn(char) -> usize) -> &str {
    let mut used = 0usize;
    for (at, c) in text.char_indices() {
        used += cost(c);
        if used > budget {
            return &text[..at];
        }
    }
    text
}

/// The longest prefix of `text` whose escaped estimate
/// ([`estimate_escaped_tokens`]) is at most `max_tokens`, cut at a char
/// boundary and with trailing whitespace removed.
///
/// Cost: one pass over the kept prefix.
#[must_use]
pub fn truncate_to_escaped_tokens(text: &str, max_tokens: usize) -> &str {
    let cost = |c| {
        escaped_quarter_tokens(c)
            + match c {
                '<' | '>' => 3,
                '&' | '\r' => 4,
                _ => 0,
            }
    };
    let kept = prefix_within(text, max_tokens.saturating_mul(4), cost);
    if kept.len() == text.len() { text } else { kept.trim_end() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascii_is_a_quarter_token_per_byte_rounded_up() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("a"), 1);
        assert_eq!(estimate_tokens("abcd"), 1);
        assert_eq!(estimate_tokens("abcde"), 2);
        assert_eq!(estimate_tokens(&"x".repeat(400)), 100);
    }

    #[test]
    fn cjk_is_one_and_a_half_tokens_per_character() {
        assert_eq!(estimate_tokens("中"), 2); // 1.5 -> 2
        assert_eq!(estimate_tokens("中文"), 3);
        assert_eq!(estimate_tokens("记忆服务"), 6);
        assert_eq!(estimate_tokens("カタカナ"), 6);
        assert_eq!(estimate_tokens("한국어"), 5); // 4.5 -> 5
        assert_eq!(estimate_tokens("。，"), 3); // CJK punctuation
        assert_eq!(estimate_tokens("ＡＢ"), 3); // full-width forms
        assert_eq!(estimate_tokens("𠀀"), 2); // extension B
    }

    #[test]
    fn other_astral_code_points_are_two_tokens() {
        assert_eq!(estimate_tokens("😀"), 2);
        assert_eq!(estimate_tokens("😀😀"), 4);
        assert_eq!(estimate_tokens("🇨🇳"), 4); // two regional indicators
    }

    #[test]
    fn non_cjk_bmp_text_counts_like_ascii() {
        assert_eq!(estimate_tokens("é"), 1);
        assert_eq!(estimate_tokens("привет"), 2); // 6 × 0.25
        assert_eq!(estimate_tokens("—"), 1);
    }

    #[test]
    fn mixed_text_sums_before_rounding() {
        // 4 ASCII (1.0) + 2 CJK (3.0) + 1 emoji (2.0) + 1 space (0.25) = 6.25 -> 7
        assert_eq!(estimate_tokens("Rust中文😀 "), 7);
        // "S3 条件写入" = 3 ASCII incl. space (0.75) + 4 CJK (6.0) = 6.75 -> 7
        assert_eq!(estimate_tokens("S3 条件写入"), 7);
    }

    #[test]
    fn truncation_keeps_the_longest_prefix_that_fits() {
        assert_eq!(truncate_to_tokens("abcdefgh", 1), "abcd");
        assert_eq!(truncate_to_tokens("中文记忆", 3), "中文");
        assert_eq!(truncate_to_tokens("short", 100), "short");
        assert_eq!(truncate_to_tokens("😀a", 1), "");
    }

    proptest::proptest! {
        #[test]
        fn truncation_always_fits_and_is_a_prefix(s in "\\PC{0,64}", n in 0usize..40) {
            let cut = truncate_to_tokens(&s, n);
            proptest::prop_assert!(s.starts_with(cut));
            proptest::prop_assert!(estimate_tokens(cut) <= n);
        }

        #[test]
        fn escaped_truncation_fits(s in "[a<&\u{4e2d}\r ]{0,64}", n in 0usize..40) {
            let cut = truncate_to_escaped_tokens(&s, n);
            proptest::prop_assert!(s.starts_with(cut));
            proptest::prop_assert!(estimate_escaped_tokens(cut) <= n);
        }

        #[test]
        fn the_estimate_is_additive_within_rounding(a in "\\PC{0,32}", b in "\\PC{0,32}") {
            let joined = format!("{a}{b}");
            let sum = estimate_tokens(&a) + estimate_tokens(&b);
            proptest::prop_assert!(estimate_tokens(&joined) <= sum);
            proptest::prop_assert!(estimate_tokens(&joined) + 2 >= sum);
        }
    }
}
