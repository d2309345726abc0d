//! `viking://` URIs as a validated type, and their one mapping to store
//! keys: `viking://X` ↔ `accounts/{account}/tree/X`.

use std::fmt;

use crate::names::AccountId;

/// The scheme every URI starts with.
pub const SCHEME: &str = "viking://";

/// Why a string is not a valid `viking://` URI. Messages name the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UriError {
    /// The string does not start with `viking://`.
    #[error("uri must start with viking://: {0:?}")]
    Scheme(String),
    /// A `..` or `.` segment.
    #[error("uri must not contain '.' or '..' segments: {0:?}")]
    Traversal(String),
    /// `a//b`.
    #[error("uri must not contain empty segments: {0:?}")]
    EmptySegment(String),
    /// `%2F`, `%5C` or `%2E` (case-insensitive).
    #[error("uri must not contain percent-encoded separators or dots: {0:?}")]
    EncodedSeparator(String),
    /// A backslash.
    #[error("uri must not contain backslashes: {0:?}")]
    Backslash(String),
    /// A control character (including NUL and newlines) or a character XML
    /// cannot hold (U+FFFE, U+FFFF, lone surrogates).
    #[error("uri must not contain control or non-XML characters: {0:?}")]
    Control(String),
    /// Longer than [`MAX_URI_BYTES`].
    #[error("uri is longer than {MAX_URI_BYTES} bytes")]
    TooLong,
}

/// The longest URI accepted, in bytes (S3 keys are limited to 1024 bytes).
pub const MAX_URI_BYTES: usize = 900;

/// A normalised `viking://` URI: no trailing slash, no empty, `.` or `..`
/// segments, no backslashes, percent-encoded separators or control
/// characters. `viking://` alone is the root.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VikingUri(String);

impl VikingUri {
    /// Parses and normalises `text` (a single trailing `/` is dropped).
    ///
    /// # Errors
    /// A [`UriError`] naming what is wrong with `text`.
    pub fn parse(text: &str) -> Result<Self, UriError> {
        let Some(path) = text.strip_prefix(SCHEME) else {
            return Err(UriError::Scheme(text.to_owned()));
        };
        Self::from_path(path).map_err(|e| match e {
            UriError::Scheme(_) => UriError::Scheme(text.to_owned()),
            other => other.with_text(text),
        })
    }

    /// Builds a URI from its path (`a/b/c`, no scheme), validating it as
    /// [`VikingUri::parse`] does.
    ///
    /// # Errors
    /// A [`UriError`] naming what is wrong with `path`.
    pub fn from_path(path: &str) -> Result<Self, UriError> {
        let full = || format!("{SCHEME}{path}");
        if path.len() + SCHEME.len() > MAX_URI_BYTES {
            return Err(UriError::TooLong);
        }
        if path.contains('\\') {
            return Err(UriError::Backslash(full()));
        }
        if path.chars().any(|c| c.is_control() || !crate::xml_text::is_xml_char(c)) {
            return Err(UriError::Control(full()));
        }
        let lower = path.to_ascii_lowercase();
        if ["%2f", "%5c", "%2e", "%00"].iter().any(|p| lower.contains(p)) {
            return Err(UriError::EncodedSeparator(full()));
        }
        let path = path.strip_suffix('/').unwrap_or(path);
        if path.is_empty() {
            return Ok(Self(SCHEME.to_owned()));
        }
        for segment in path.split('/') {
            match segment {
                "" => return Err(UriError::EmptySegment(full())),
                "." | ".." => return Err(UriError::Traversal(full())),
                _ => {}
            }
        }
        Ok(Self(format!("{SCHEME}{path}")))
    }

    /// The URI as text, e.g. `viking://resources/aws/s3.md`.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The path after the scheme (`""` for the root).
    #[must_use]
    pub fn path(&self) -> &str {
        &self.0[SCHEME.len()..]
    }

    /// The path's segments, in order (none for the root).
    pub fn segments(&self) -> impl Iterator<Item = &str> {
        self.path().split('/').filter(|s| !s.is_empty())
    }

    /// The last segment (`None` for the root).
    #[must_use]
    pub fn file_name(&self) -> Option<&str> {
        self.segments().last()
    }

    /// The parent URI (`None` for the root).
    #[must_use]
    pub fn parent(&self) -> Option<Self> {
        let path = self.path();
        if path.is_empty() {
            return None;
        }
        let parent = path.rsplit_once('/').map_or("", |(head, _)| head);
        Some(Self(format!("{SCHEME}{parent}")))
    }

    /// This URI with `relative` (one or more segments) appended.
    ///
    /// # Errors
    /// A [`UriError`] when `relative` holds an invalid segment.
    pub fn join(&self, relative: &str) -> Result<Self, UriError> {
        let path = self.path();
        if path.is_empty() { Self::from_path(relative) } else { Self::from_path(&format!("{path}/{relative}")) }
    }

    /// Whether this URI is `ancestor` or lies below it (segment-wise:
    /// `viking://a/bc` is not under `viking://a/b`).
    #[must_use]
    pub fn is_under(&self, ancestor: &Self) -> bool {
        let (me, them) = (self.path(), ancestor.path());
        them.is_empty()
            || me == them
            || (me.len() > them.len() && me.starts_with(them) && me.as_bytes()[them.len()] == b'/')
    }
}

impl UriError {
    fn with_text(self, text: &str) -> Self {
        let t = text.to_owned();
        match self {
            Self::Traversal(_) => Self::Traversal(t),
            Self::EmptySegment(_) => Self::EmptySegment(t),
            Self::EncodedSeparator(_) => Self::EncodedSeparator(t),
            Self::Backslash(_) => Self::Backslash(t),
            Self::Control(_) => Self::Control(t),
            other => other,
        }
    }
}

impl fmt::Display for VikingUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl serde::Serialize for VikingUri {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for VikingUri {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// The store key prefix of an account's content tree: `accounts/{account}/tree/`.
#[must_use]
pub fn tree_prefix(account: &AccountId) -> String {
    format!("accounts/{account}/tree/")
}

/// The store key of `uri` in `account`'s tree: `accounts/{account}/tree/{path}`.
/// The root maps to the prefix itself without its trailing slash.
#[must_use]
pub fn tree_key(account: &AccountId, uri: &VikingUri) -> String {
    let path = uri.path();
    if path.is_empty() { format!("accounts/{account}/tree") } else { format!("accounts/{account}/tree/{path}") }
}

/// The URI a store key names inside `account`'s tree; `None` when the key is
/// outside that tree or is not a valid URI path.
#[must_use]
pub fn uri_for_tree_key(account: &AccountId, key: &str) -> Option<VikingUri> {
    let prefix = tree_prefix(account);
    let path = key.strip_prefix(&prefix)?;
    VikingUri::from_path(path).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uri(s: &str) -> VikingUri {
        VikingUri::parse(s).expect("valid uri")
    }

    #[test]
    fn parses_and_normalises_a_trailing_slash() {
        assert_eq!(uri("viking://resources/aws/").as_str(), "viking://resources/aws");
        assert_eq!(uri("viking://").path(), "");
        assert_eq!(uri("viking://a/b.md").file_name(), Some("b.md"));
        assert_eq!(uri("viking://a/b.md").parent(), Some(uri("viking://a")));
        assert_eq!(uri("viking://a").parent(), Some(uri("viking://")));
        assert_eq!(uri("viking://").parent(), None);
    }

    #[test]
    fn rejects_what_could_escape_or_alias() {
        type Check = fn(&UriError) -> bool;
        let cases: [(&str, Check); 9] = [
            ("http://x", |e| matches!(e, UriError::Scheme(_))),
            ("viking://a/../b", |e| matches!(e, UriError::Traversal(_))),
            ("viking://..", |e| matches!(e, UriError::Traversal(_))),
            ("viking://a/./b", |e| matches!(e, UriError::Traversal(_))),
            ("viking://a//b", |e| matches!(e, UriError::EmptySegment(_))),
            ("viking://a%2Fb", |e| matches!(e, UriError::EncodedSeparator(_))),
            ("viking://a/%2e%2e/b", |e| matches!(e, UriError::EncodedSeparator(_))),
            ("viking://a\\b", |e| matches!(e, UriError::Backslash(_))),
            ("viking://a\nb", |e| matches!(e, UriError::Control(_))),
        ];
        for (text, is_expected) in cases {
            let err = VikingUri::parse(text).expect_err(text);
            assert!(is_expected(&err), "{text}: {err}");
            if !matches!(err, UriError::TooLong) {
                assert!(err.to_string().contains(&format!("{text:?}")), "{err} names {text:?}");
            }
        }
        assert_eq!(VikingUri::parse(&format!("viking://{}", "a".repeat(MAX_URI_BYTES))), Err(UriError::TooLong));
    }

    #[test]
    fn is_under_respects_segment_boundaries() {
        let b = uri("viking://a/b");
        assert!(uri("viking://a/b").is_under(&b));
        assert!(uri("viking://a/b/c.md").is_under(&b));
        assert!(!uri("viking://a/bc").is_under(&b));
        assert!(!uri("viking://a").is_under(&b));
        assert!(uri("viking://a").is_under(&uri("viking://")));
    }

    #[test]
    fn store_keys_map_both_ways() {
        let account = AccountId::new("acme").expect("valid account");
        let u = uri("viking://user/alice/memories/events/x.md");
        let key = tree_key(&account, &u);
        assert_eq!(key, "accounts/acme/tree/user/alice/memories/events/x.md");
        assert_eq!(uri_for_tree_key(&account, &key), Some(u));
        let other = AccountId::new("other").expect("valid account");
        assert_eq!(uri_for_tree_key(&other, &key), None);
        assert_eq!(uri_for_tree_key(&account, "accounts/acme/tree/a//b"), None);
    }

    #[test]
    fn join_validates_the_new_segments() {
        let base = uri("viking://user/alice");
        assert_eq!(
            base.join("memories/x.md").map(|u| u.to_string()).ok().as_deref(),
            Some("viking://user/alice/memories/x.md")
        );
        assert!(base.join("../bob").is_err());
        assert_eq!(uri("viking://").join("resources").ok(), Some(uri("viking://resources")));
    }

    proptest::proptest! {
        #[test]
        fn parse_round_trips_and_never_panics(s in "viking://[a-z0-9./%\\\\-]{0,40}") {
            if let Ok(u) = VikingUri::parse(&s) {
                proptest::prop_assert_eq!(VikingUri::parse(u.as_str()).ok(), Some(u.clone()));
                proptest::prop_assert!(u.segments().all(|seg| seg != ".." && seg != "." && !seg.is_empty()));
            }
        }
    }
}
