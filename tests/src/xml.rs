//! Parsing a rendered block back with a real XML parser (quick-xml): what
//! the property and golden tests compare entries against.

use std::collections::BTreeMap;

use quick_xml::XmlVersion;
use quick_xml::escape::resolve_predefined_entity;
use quick_xml::events::{BytesStart, Event};
use quick_xml::reader::Reader;

/// One parsed `<memory>` element.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    /// The `uri` attribute.
    pub uri: String,
    /// The `lines` attribute of a passage (`first-last`, first ≤ last).
    pub lines: Option<String>,
    /// The `type` attribute.
    pub category: String,
    /// The `score` attribute.
    pub score: String,
    /// The `detail` attribute.
    pub detail: String,
    /// Whether `truncated="true"` is present (the only value it may have).
    pub truncated: bool,
    /// The text content; `None` for a self-closing element.
    pub text: Option<String>,
}

fn parsed_attributes(e: &BytesStart<'_>) -> Result<Parsed, String> {
    let mut found: BTreeMap<String, String> = BTreeMap::new();
    for attr in e.attributes() {
        let attr = attr.map_err(|err| format!("bad attribute: {err}"))?;
        let key = attr.key.as_ref().to_owned();
        let value =
            attr.normalized_value(XmlVersion::Implicit1_0).map_err(|err| format!("bad value of {key}: {err}"))?;
        if found.insert(key.clone(), value.into_owned()).is_some() {
            return Err(format!("duplicate attribute {key}"));
        }
    }
    let truncated = match found.remove("truncated").as_deref() {
        None => false,
        Some("true") => true,
        Some(other) => return Err(format!("truncated={other:?}, want \"true\" or no attribute")),
    };
    let lines = found.remove("lines");
    if let Some(lines) = &lines {
        let range = lines.split_once('-').and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)));
        if !range.is_some_and(|(first, last)| first >= 1 && first <= last) {
            return Err(format!("lines={lines:?}, want \"first-last\" with 1 <= first <= last"));
        }
    }
    let keys: Vec<&str> = found.keys().map(String::as_str).collect();
    if keys != ["detail", "score", "type", "uri"] {
        return Err(format!("attributes {keys:?}, want uri, type, score, detail (and lines, truncated)"));
    }
    let mut take = |k: &str| found.remove(k).unwrap_or_default();
    Ok(Parsed {
        lines,
        uri: take("uri"),
        category: take("type"),
        score: take("score"),
        detail: take("detail"),
        truncated,
        text: None,
    })
}

/// Parses a rendered block wrapped in `<root>…</root>` with quick-xml (no
/// trimming, end names checked): its `memory` elements in order. Anything
/// else — another element, CDATA, a comment, a processing instruction, an
/// unknown entity, text between entries other than the `\n` separators —
/// is an error.
pub fn parse_block(rendered: &str) -> Result<Vec<Parsed>, String> {
    let doc = format!("<root>{rendered}</root>");
    let mut reader = Reader::from_str(&doc);
    reader.config_mut().trim_text(false);
    reader.config_mut().check_end_names = true;
    let mut out: Vec<Parsed> = Vec::new();
    let mut open: Option<Parsed> = None;
    let mut in_root = false;
    let mut root_closed = false;
    let mut between = String::new();
    loop {
        let at = reader.buffer_position();
        let event = reader.read_event().map_err(|e| format!("parse error at {at}: {e}"))?;
        match event {
            Event::Start(e) if !in_root && !root_closed && e.name().as_ref() == "root" => in_root = true,
            Event::Start(e) if in_root && open.is_none() && e.name().as_ref() == "memory" => {
                if !out.is_empty() && between != "\n" {
                    return Err(format!("entries separated by {between:?}, want \"\\n\""));
                }
                between.clear();
                let mut p = parsed_attributes(&e)?;
                p.text = Some(String::new());
                open = Some(p);
            }
            Event::Empty(e) if in_root && open.is_none() && e.name().as_ref() == "memory" => {
                if !out.is_empty() && between != "\n" {
                    return Err(format!("entries separated by {between:?}, want \"\\n\""));
                }
                between.clear();
                out.push(parsed_attributes(&e)?);
            }
            Event::Text(t) => {
                let content = t.xml_content(XmlVersion::Implicit1_0);
                match open.as_mut().and_then(|p| p.text.as_mut()) {
                    Some(text) => text.push_str(&content),
                    None if in_root => between.push_str(&content),
                    None => return Err(format!("text outside the root: {content:?}")),
                }
            }
            Event::GeneralRef(r) => {
                let resolved = match r.resolve_char_ref().map_err(|e| format!("bad character reference: {e}"))? {
                    Some(c) => String::from(c),
                    None => {
                        resolve_predefined_entity(&r).ok_or_else(|| format!("unknown entity &{};", &*r))?.to_owned()
                    }
                };
                match open.as_mut().and_then(|p| p.text.as_mut()) {
                    Some(text) => text.push_str(&resolved),
                    None => return Err(format!("entity &{}; outside an entry", &*r)),
                }
            }
            Event::End(e) if e.name().as_ref() == "memory" => {
                out.push(open.take().ok_or("a </memory> without its start")?);
            }
            Event::End(e) if e.name().as_ref() == "root" && open.is_none() => {
                if !between.is_empty() {
                    return Err(format!("trailing text {between:?} after the last entry"));
                }
                in_root = false;
                root_closed = true;
            }
            Event::Eof => break,
            other => return Err(format!("unexpected event {other:?}")),
        }
    }
    if !root_closed || open.is_some() {
        return Err("the block is not closed".into());
    }
    Ok(out)
}
