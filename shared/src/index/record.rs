//! Index records and how a URI classifies into a context type
//! and a category.

use serde::{Deserialize, Serialize};

use crate::uri::VikingUri;

/// What kind of context a node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ContextType {
    /// A memory (under `…/memories/`).
    Memory,
    /// A resource (documents; the default for anything unclassified).
    Resource,
    /// A skill (under `…/skills/`).
    Skill,
}

impl ContextType {
    /// Every context type.
    pub const ALL: [Self; 3] = [Self::Memory, Self::Resource, Self::Skill];

    /// The wire name: `memory`, `resource` or `skill`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Resource => "resource",
            Self::Skill => "skill",
        }
    }

    /// Parses a wire name; `None` for anything else.
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "memory" => Some(Self::Memory),
            "resource" => Some(Self::Resource),
            "skill" => Some(Self::Skill),
            _ => None,
        }
    }
}

/// The memory categories that have their own bucket.
pub const MEMORY_CATEGORIES: [&str; 4] = ["events", "entities", "preferences", "experiences"];

/// A node's category: one of the four memory categories, `memories` (any
/// other memory), `resources` or `skills`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Category {
    /// `…/memories/events/…`.
    Events,
    /// `…/memories/entities/…`.
    Entities,
    /// `…/memories/preferences/…`.
    Preferences,
    /// `…/memories/experiences/…`.
    Experiences,
    /// Any other memory (cases, tools, profile, …).
    Memories,
    /// Resources.
    Resources,
    /// Skills.
    Skills,
}

impl Category {
    /// Every category.
    pub const ALL: [Self; 7] = [
        Self::Events,
        Self::Entities,
        Self::Preferences,
        Self::Experiences,
        Self::Memories,
        Self::Resources,
        Self::Skills,
    ];

    /// The wire name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Events => "events",
            Self::Entities => "entities",
            Self::Preferences => "preferences",
            Self::Experiences => "experiences",
            Self::Memories => "memories",
            Self::Resources => "resources",
            Self::Skills => "skills",
        }
    }

    /// Parses a wire name; `None` for anything else.
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "events" => Self::Events,
            "entities" => Self::Entities,
            "preferences" => Self::Preferences,
            "experiences" => Self::Experiences,
            "memories" => Self::Memories,
            "resources" => Self::Resources,
            "skills" => Self::Skills,
            _ => return None,
        })
    }
}

/// Where a URI lives: its context type and category, or `None` for what is
/// never indexed (sessions, anything outside the known roots' shapes stays a
/// resource, as the reference).
#[must_use]
pub fn classify(uri: &VikingUri) -> Option<(ContextType, Category)> {
    let segs: Vec<&str> = uri.segments().collect();
    let memory = |rest: &[&str]| {
        let category = rest
            .first()
            .and_then(|c| MEMORY_CATEGORIES.contains(c).then(|| Category::parse(c)))
            .flatten()
            .unwrap_or(Category::Memories);
        (ContextType::Memory, category)
    };
    match segs.as_slice() {
        ["session" | "sessions", ..] | ["user", _, "sessions", ..] => None,
        ["agent", "skills", ..] | ["user", _, "skills", ..] => Some((ContextType::Skill, Category::Skills)),
        ["user", _, "memories", rest @ ..] | ["user", _, "peers", _, "memories", rest @ ..] => Some(memory(rest)),
        _ => Some((ContextType::Resource, Category::Resources)),
    }
}

/// Level of a record: a directory's abstract (0), its overview (1), a file
/// (2), or passage `n` of a long file (`LEVEL_PASSAGE + n`).
pub type Level = u16;
/// Level 0: a directory's `.abstract.md`.
pub const LEVEL_ABSTRACT: Level = 0;
/// Level 1: a directory's `.overview.md`.
pub const LEVEL_OVERVIEW: Level = 1;
/// Level 2: a file.
pub const LEVEL_FILE: Level = 2;
/// Level 3 and up: the passages of a long file, in order
/// ([`super::passage`]): passage `n` is level `LEVEL_PASSAGE + n`, so each
/// is a node of the index of its own, keyed like any record.
pub const LEVEL_PASSAGE: Level = 3;

/// The level of passage `n`, or `None` past the last level there is.
#[must_use]
pub fn passage_level(n: usize) -> Option<Level> {
    Level::try_from(n).ok().and_then(|n| n.checked_add(LEVEL_PASSAGE))
}

/// Where a passage sits in its file's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Span {
    /// Its first byte in the file (frontmatter included).
    pub start: u32,
    /// One past its last byte.
    pub end: u32,
    /// Its first line, 1-based.
    pub first_line: u32,
    /// Its last line, 1-based.
    pub last_line: u32,
}

/// One indexed node, without its vector.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The node: a file, or (levels 0 and 1) the directory itself, without
    /// the sidecar suffix.
    pub uri: VikingUri,
    /// 0, 1 or 2.
    pub level: Level,
    /// Context type.
    pub context_type: ContextType,
    /// Category.
    pub category: Category,
    /// The short abstract (cut to the configured size).
    #[serde(rename = "abstract")]
    pub abstract_text: String,
    /// Estimated tokens of `abstract_text` as rendered (XML-escaped).
    pub abstract_tokens: u32,
    /// Estimated tokens of the `overview` tier text as rendered, when the
    /// node has one (a file's summary or outline; a directory's
    /// `.overview.md`). Known before any read, so plans are exact.
    #[serde(default)]
    pub overview_tokens: Option<u32>,
    /// Estimated tokens of the `full` tier text as rendered (a file's body
    /// without frontmatter); `None` for directories.
    #[serde(default)]
    pub full_tokens: Option<u32>,
    /// Bytes of the object a read of [`Record::display_uri`] returns (a
    /// file's body; a directory's `.abstract.md` at level 0, `.overview.md`
    /// at level 1), for planning reads without a HEAD.
    pub size: u64,
    /// Creation time, Unix seconds.
    pub created_at: i64,
    /// Last update, Unix seconds.
    pub updated_at: i64,
    /// `k=v` tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// The owning user for nodes under `viking://user/{id}`.
    #[serde(default)]
    pub owner_user_id: Option<String>,
    /// Hash of the source the record was built from (skips unchanged files).
    pub source_hash: String,
    /// The version of the source the record was built from: the `sequencer`
    /// of the S3 event notification the indexer read it for ([`version_cmp`]
    /// orders them); `None` for records `ingest` commits, which count as
    /// older than any version. A commit never replaces a node's entry with
    /// one of an older version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_version: Option<String>,
    /// The node's term counts for keyword search
    /// ([`super::lexical::encode_counts`] of its URI's name and its text);
    /// empty for records written before keyword search existed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub terms: String,
    /// A file's passages (levels `LEVEL_PASSAGE..LEVEL_PASSAGE + passages`);
    /// 0 for a file short enough to have none, and for directories.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub passages: u32,
    /// A passage's place in its file; `None` for every other record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span: Option<Span>,
}

#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Orders two source versions (S3 event sequencers: hex strings, compared
/// after padding the shorter with leading zeros, as S3 documents).
#[must_use]
pub fn version_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    let width = a.len().max(b.len());
    let pad = |s: &str| format!("{}{}", "0".repeat(width - s.len()), s.to_ascii_uppercase());
    pad(a).cmp(&pad(b))
}

/// Whether an entry of version `ours` may replace one of version `theirs`:
/// only when it is strictly newer (`None`, an unversioned entry, is older
/// than any version and newer than none).
#[must_use]
pub fn supersedes(ours: Option<&str>, theirs: Option<&str>) -> bool {
    match (ours, theirs) {
        (Some(ours), Some(theirs)) => version_cmp(ours, theirs).is_gt(),
        (Some(_), None) => true,
        (None, _) => false,
    }
}

impl Record {
    /// Whether the record is a passage of a file.
    #[must_use]
    pub fn is_passage(&self) -> bool {
        self.level >= LEVEL_PASSAGE
    }

    /// The URI as `find` reports it: directories carry `/.abstract.md`
    /// (level 0) or `/.overview.md` (level 1); a passage is its file's.
    #[must_use]
    pub fn display_uri(&self) -> String {
        match self.level {
            LEVEL_ABSTRACT => format!("{}/.abstract.md", self.uri),
            LEVEL_OVERVIEW => format!("{}/.overview.md", self.uri),
            _ => self.uri.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(s: &str) -> Option<(ContextType, Category)> {
        classify(&VikingUri::parse(s).expect("valid"))
    }

    #[test]
    fn uris_classify_as_the_reference() {
        use Category as C;
        use ContextType as T;
        let cases = [
            ("viking://user/a/memories/events/2026/x.md", Some((T::Memory, C::Events))),
            ("viking://user/a/memories/entities/sw/x.md", Some((T::Memory, C::Entities))),
            ("viking://user/a/memories/cases/x.md", Some((T::Memory, C::Memories))),
            ("viking://user/a/memories/skills/s.md", Some((T::Memory, C::Memories))),
            ("viking://user/a/memories/profile.md", Some((T::Memory, C::Memories))),
            ("viking://user/a/peers/p/memories/preferences/x.md", Some((T::Memory, C::Preferences))),
            ("viking://user/a/peers/p/resources/x.md", Some((T::Resource, C::Resources))),
            ("viking://user/a/resources/x.md", Some((T::Resource, C::Resources))),
            ("viking://user/a/skills/s/SKILL.md", Some((T::Skill, C::Skills))),
            ("viking://agent/skills/s/SKILL.md", Some((T::Skill, C::Skills))),
            ("viking://resources/aws/s3.md", Some((T::Resource, C::Resources))),
            ("viking://user/a/sessions/s1/meta.json", None),
            ("viking://session/s1", None),
        ];
        for (uri, want) in cases {
            assert_eq!(class(uri), want, "{uri}");
        }
    }

    #[test]
    fn versions_order_as_s3_sequencers() {
        assert!(version_cmp("0A", "9").is_gt(), "padded: 0A > 09");
        assert!(version_cmp("00000000000000000A", "B").is_lt());
        assert!(version_cmp("5f", "5F").is_eq());
        assert!(supersedes(Some("2"), Some("1")) && !supersedes(Some("1"), Some("1")));
        assert!(supersedes(Some("1"), None) && !supersedes(None, Some("1")) && !supersedes(None, None));
    }

    #[test]
    fn directory_hits_carry_their_level_suffix() {
        let mut r = Record {
            uri: VikingUri::parse("viking://resources/aws").expect("valid"),
            level: LEVEL_ABSTRACT,
            context_type: ContextType::Resource,
            category: Category::Resources,
            abstract_text: String::new(),
            abstract_tokens: 0,
            overview_tokens: None,
            full_tokens: None,
            size: 0,
            created_at: 0,
            updated_at: 0,
            tags: vec![],
            owner_user_id: None,
            source_hash: String::new(),
            source_version: None,
            terms: String::new(),
            passages: 0,
            span: None,
        };
        assert_eq!(r.display_uri(), "viking://resources/aws/.abstract.md");
        r.level = LEVEL_OVERVIEW;
        assert_eq!(r.display_uri(), "viking://resources/aws/.overview.md");
        r.level = LEVEL_FILE;
        assert_eq!(r.display_uri(), "viking://resources/aws");
    }
}
