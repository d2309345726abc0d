//! XML text escaping as Skald renders entry bodies: only what XML needs
//! (`<`, `>`, `&`, and CR so parsers do not fold it), and characters XML 1.0
//! cannot hold replaced with U+FFFD, so any body yields well-formed XML and
//! parses back to the same text (save for those replaced characters).
//! Dependency-free: ingest uses it to price bodies, render to write them.

/// Whether XML 1.0 can hold `c` (the `Char` production).
#[must_use]
pub fn is_xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

/// `text` with the characters XML cannot hold replaced by U+FFFD: what a
/// parser reads back from [`escape_text`].
#[must_use]
pub fn xml_safe(text: &str) -> std::borrow::Cow<'_, str> {
    if text.chars().all(is_xml_char) {
        std::borrow::Cow::Borrowed(text)
    } else {
        std::borrow::Cow::Owned(text.chars().map(|c| if is_xml_char(c) { c } else { '\u{FFFD}' }).collect())
    }
}

/// `text` escaped for use as element content.
#[must_use]
pub fn escape_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 16);
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '\r' => out.push_str("&#13;"),
            c if is_xml_char(c) => out.push(c),
            _ => out.push('\u{FFFD}'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::{estimate_escaped_tokens, estimate_tokens};

    #[test]
    fn escapes_only_what_xml_needs() {
        assert_eq!(escape_text(r#"a < b && c > "d" 'e'"#), r#"a &lt; b &amp;&amp; c &gt; "d" 'e'"#);
        assert_eq!(escape_text("x\r\ny"), "x&#13;\ny");
        assert_eq!(escape_text("bell\u{7}"), "bell\u{FFFD}");
        assert_eq!(escape_text("中文 😀"), "中文 😀");
    }

    proptest::proptest! {
        #[test]
        fn the_escaped_estimate_equals_the_estimate_of_the_escaped_text(s in "\\PC{0,64}|[<>&\\r\\u{0}-\\u{1f}a]{0,32}") {
            proptest::prop_assert_eq!(estimate_escaped_tokens(&s), estimate_tokens(&escape_text(&s)));
        }
    }
}
