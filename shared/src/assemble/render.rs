//! The rendered block: one flat `<memory>` element per entry,
//! metadata as attributes, the text as escaped element content, entries
//! joined by `\n`, no wrapper. Written with quick-xml, so the output is
//! well-formed whatever a body contains, and an XML parser recovers every
//! URI and text exactly.
//!
//! ```xml
//! <memory uri="viking://user/alice/memories/events/x.md" type="events" score="0.72" detail="full">
//! # Summary
//! …
//! </memory>
//! <memory uri="viking://resources/aws" type="resources" score="0.51" detail="uri"/>
//! ```
//!
//! A text cut short of its tier's whole text (to fit the budget) carries
//! `truncated="true"` after `detail`; its text is a prefix of the whole.

use quick_xml::Writer;
use quick_xml::events::{BytesEnd, BytesStart, BytesText, Event};

use super::params::Tier;
use crate::tokens::estimate_tokens;
use crate::xml_text::escape_text;

/// The element name.
pub const ELEMENT: &str = "memory";
/// What joins entries.
pub const SEPARATOR: &str = "\n";
/// Tokens the `truncated="true"` mark adds to an element (17 ASCII
/// characters, rounded up): what a cut the plan did not price leaves for it.
pub const TRUNCATED_MARK_TOKENS: usize = 5;

/// What one rendered element shows.
#[derive(Debug, Clone, Copy)]
pub struct EntryView<'a> {
    /// The `uri` attribute.
    pub uri: &'a str,
    /// A passage's lines in its file (1-based, inclusive): renders
    /// `lines="first-last"` after `uri`.
    pub lines: Option<(u32, u32)>,
    /// The `type` attribute (the category).
    pub category: &'a str,
    /// The score, shown with two decimals.
    pub score: f64,
    /// The `detail` attribute.
    pub tier: Tier,
    /// The body (ignored for [`Tier::Uri`]).
    pub text: &'a str,
    /// Whether the body is cut short of its tier's whole text: renders
    /// `truncated="true"`.
    pub truncated: bool,
}

fn start<'a>(view: &'a EntryView<'a>, score: &'a str, lines: &'a str) -> BytesStart<'a> {
    let mut head = BytesStart::new(ELEMENT).with_attributes([("uri", view.uri)]);
    if view.lines.is_some() {
        head.push_attribute(("lines", lines));
    }
    let head = head.with_attributes([("type", view.category), ("score", score), ("detail", view.tier.as_str())]);
    if view.truncated && view.tier != Tier::Uri { head.with_attributes([("truncated", "true")]) } else { head }
}

/// The score as rendered: two decimals; non-finite scores render as 0.00.
#[must_use]
pub fn score_text(score: f64) -> String {
    format!("{:.2}", if score.is_finite() { score } else { 0.0 })
}

/// Appends one element to `out`.
pub fn render_entry(out: &mut Vec<u8>, view: &EntryView<'_>) {
    let score = score_text(view.score);
    let lines = view.lines.map(|(first, last)| format!("{first}-{last}")).unwrap_or_default();
    let mut writer = Writer::new(out);
    let head = start(view, &score, &lines);
    // Writing into a Vec cannot fail.
    let _ = if view.tier == Tier::Uri {
        writer.write_event(Event::Empty(head))
    } else {
        let body = format!("\n{}\n", escape_text(view.text));
        writer
            .write_event(Event::Start(head))
            .and_then(|()| writer.write_event(Event::Text(BytesText::from_escaped(body))))
            .and_then(|()| writer.write_event(Event::End(BytesEnd::new(ELEMENT))))
    };
}

/// Every entry rendered and joined by [`SEPARATOR`].
#[must_use]
pub fn render(views: &[EntryView<'_>]) -> String {
    let mut out = Vec::new();
    for (i, view) in views.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(SEPARATOR.as_bytes());
        }
        render_entry(&mut out, view);
    }
    // Only valid UTF-8 went in.
    String::from_utf8(out).unwrap_or_default()
}

/// Tokens of the element for `view` without its body, and the fixed part
/// a body adds around itself (the two newlines), in quarter tokens: the
/// exact envelope cost the planner adds to a body's estimate.
#[must_use]
pub fn envelope_quarters(view: &EntryView<'_>) -> usize {
    let mut out = Vec::new();
    render_entry(&mut out, &EntryView { text: "", ..*view });
    // `render_entry` wrote only ASCII markup plus the URI: count quarters.
    let text = String::from_utf8_lossy(&out);
    if text.is_ascii() { text.len() } else { estimate_tokens(&text) * 4 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view<'a>(uri: &'a str, tier: Tier, text: &'a str) -> EntryView<'a> {
        EntryView { uri, lines: None, category: "events", score: 0.7249, tier, text, truncated: false }
    }

    #[test]
    fn renders_flat_elements_with_attributes() {
        let out = render(&[
            view("viking://user/a/memories/events/x.md", Tier::Full, "# Summary\nShipped."),
            view("viking://resources/aws", Tier::Uri, "ignored"),
        ]);
        assert_eq!(
            out,
            "<memory uri=\"viking://user/a/memories/events/x.md\" type=\"events\" score=\"0.72\" detail=\"full\">\n# Summary\nShipped.\n</memory>\n<memory uri=\"viking://resources/aws\" type=\"events\" score=\"0.72\" detail=\"uri\"/>"
        );
    }

    #[test]
    fn a_cut_text_is_marked_and_a_bare_uri_never_is() {
        let cut = EntryView { truncated: true, ..view("viking://r/x.md", Tier::Abstract, "Shipped the") };
        assert_eq!(
            render(&[cut, EntryView { tier: Tier::Uri, ..cut }]),
            "<memory uri=\"viking://r/x.md\" type=\"events\" score=\"0.72\" detail=\"abstract\" truncated=\"true\">\nShipped the\n</memory>\n<memory uri=\"viking://r/x.md\" type=\"events\" score=\"0.72\" detail=\"uri\"/>"
        );
        assert_eq!(envelope_quarters(&cut), render(&[EntryView { text: "", ..cut }]).len());
        let plain = EntryView { truncated: false, ..cut };
        assert!(envelope_quarters(&cut) - envelope_quarters(&plain) <= TRUNCATED_MARK_TOKENS * 4);
    }

    #[test]
    fn bodies_cannot_forge_elements() {
        let out = render(&[view("viking://r/x&y", Tier::Abstract, "</memory><memory uri=\"x\"> & <![CDATA[ ]]>")]);
        assert_eq!(out.matches("<memory").count(), 1);
        assert_eq!(out.matches("</memory>").count(), 1);
        assert!(out.contains("uri=\"viking://r/x&amp;y\""));
        assert!(out.contains("&lt;/memory&gt;&lt;memory uri=\"x\"&gt; &amp; &lt;![CDATA[ ]]&gt;"));
    }

    #[test]
    fn the_envelope_cost_is_the_rendered_cost_of_an_empty_body() {
        let v = view("viking://user/a/memories/events/x.md", Tier::Overview, "");
        let rendered = render(&[v]);
        assert_eq!(envelope_quarters(&v), rendered.len());
        assert_eq!(score_text(f64::NAN), "0.00");
    }
}
