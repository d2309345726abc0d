//! How an account's index maps onto Amazon S3 Vectors, as pure functions:
//! the index's name, each record's vector key and metadata, and a search
//! [`Filter`] as a metadata filter. No I/O: the client is
//! [`super::s3vectors`].
//!
//! **Layout.** One vector index per account (`{prefix}{account}-{hash}`)
//! in the deployment's vector bucket, distance metric cosine. A record's
//! key is `{level}:{uri}`. Its metadata:
//!
//! | key | filterable | value |
//! | --- | --- | --- |
//! | `a` | yes | hashes of the URI and its ancestors ([`MAX_ANCESTORS`]) |
//! | `u` | yes | the hash of the whole URI |
//! | `t`, `c`, `l`, `o` | yes | context type, category, level, owner |
//! | `ca`, `ua` | yes | created and updated time (Unix seconds) |
//! | `g`, `gx` | yes | hashes of the tags ([`MAX_TAGS`]); `gx` when cut |
//! | `w`, `wx` | yes | hashes of the most frequent terms; `wx` when cut |
//! | `r` | no | the whole record as JSON, terms cut to fit |
//!
//! Hashes keep the filterable part under the service's 2 KB whatever the
//! URI's length. A pushed-down filter is always *implied by* the exact
//! filter — it may let through records the exact filter rejects (a hash
//! collision, a cut tag list), never the reverse — and every record that
//! comes back is tested with [`Filter::matches`] again, so results are
//! exact and only their completeness depends on what was pushed down.

use serde_json::{Map, Value, json};
use sha2::{Digest as _, Sha256};

use super::filter::{Field, Filter, FilterExpr, TimeField};
use super::lexical::decode_counts;
use super::record::{Category, ContextType, LEVEL_FILE, LEVEL_PASSAGE, Level, Record};
use crate::identity::AccountId;
use crate::uri::VikingUri;

/// The service's largest `topK`.
pub const MAX_TOP_K: usize = 100;
/// The most vectors one `PutVectors` or `DeleteVectors` call takes.
pub const MAX_WRITE_BATCH: usize = 500;
/// The most keys one `GetVectors` call takes.
pub const MAX_GET_BATCH: usize = 100;
/// The longest vector key the service takes (bytes).
pub const MAX_KEY_BYTES: usize = 1024;
/// The longest index name the service takes.
pub const MAX_INDEX_NAME: usize = 63;
/// Ancestors stored per record, the URI itself included (deeper targets
/// are pushed down as their ancestor at this depth).
pub const MAX_ANCESTORS: usize = 24;
/// Tags stored as filterable hashes; a record with more has `gx`.
pub const MAX_TAGS: usize = 24;
/// Terms stored as filterable hashes (the most frequent; `wx` when cut).
pub const MAX_TERMS: usize = 64;
/// Bytes of filterable metadata a record may use (the service allows
/// 2 KB; terms are dropped, least frequent first, to stay under this).
pub const FILTERABLE_BUDGET: usize = 1900;
/// Bytes of the non-filterable `r` (the service allows 40 KB in all).
pub const RECORD_BUDGET: usize = 36 * 1024;
/// The most constraints a query's filter may have (each comparison, and
/// each value of an `$in` or `$nin`): the service's bound for an
/// `ENHANCED` index is 100; parts past it are left to the local re-check.
pub const MAX_FILTER_CONSTRAINTS: usize = 96;
/// The most query terms a keyword filter names (the longest).
pub const MAX_FILTER_TERMS: usize = 32;
/// The metadata keys declared non-filterable when an index is created.
pub const NON_FILTERABLE_KEYS: [&str; 1] = ["r"];

/// The S3 Vectors index holding `account`'s records: `prefix`, the account
/// id in the service's alphabet (lower case, digits, `-`, `.`), and 8 hex
/// digits of its hash (two ids that fold alike stay apart), at most 63
/// characters.
#[must_use]
pub fn index_name(prefix: &str, account: &AccountId) -> String {
    let hash = &hex::encode(Sha256::digest(account.as_str().as_bytes()))[..8];
    let folded: String = account
        .as_str()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' })
        .collect();
    let room = MAX_INDEX_NAME.saturating_sub(prefix.len() + 1 + hash.len());
    let slug: String = folded.chars().take(room).collect();
    format!("{prefix}{}-{hash}", slug.trim_matches('-'))
}

/// A record's vector key: `{level}:{uri}` (a URI is at most
/// [`crate::uri::MAX_URI_BYTES`], so the key always fits the service's).
#[must_use]
pub fn vector_key(uri: &VikingUri, level: Level) -> String {
    format!("{level}:{uri}")
}

const _: () = assert!(crate::uri::MAX_URI_BYTES + 4 <= MAX_KEY_BYTES, "every record's key fits");

/// A short hash of `text` for filterable metadata: 12 hex digits (48 bits).
fn short_hash(text: &str) -> String {
    hex::encode(&Sha256::digest(text.as_bytes())[..6])
}

/// A term's hash: 8 hex digits (32 bits; a collision only adds a candidate).
fn term_hash(term: &str) -> String {
    hex::encode(&Sha256::digest(term.as_bytes())[..4])
}

/// The hash stored for `uri` as an ancestor at `depth` segments (the URI
/// itself is its own deepest ancestor).
fn ancestor_hashes(uri: &VikingUri) -> Vec<String> {
    let mut out = Vec::new();
    let mut path = String::new();
    for segment in uri.segments().take(MAX_ANCESTORS) {
        if !path.is_empty() {
            path.push('/');
        }
        path.push_str(segment);
        out.push(short_hash(&path));
    }
    out
}

/// The hash a target `uri` is pushed down as: its own, or its ancestor's
/// at [`MAX_ANCESTORS`] when it is deeper (a superset). `None` for the
/// root, which every record is under.
fn target_hash(uri: &VikingUri) -> Option<String> {
    ancestor_hashes(uri).pop()
}

/// A record's metadata as the index stores it (see the module's table):
/// the filterable keys within [`FILTERABLE_BUDGET`], and `r`, the record
/// with its terms cut (least frequent first) to fit [`RECORD_BUDGET`].
#[must_use]
pub fn metadata(record: &Record) -> Value {
    let mut map = Map::new();
    map.insert("a".into(), json!(ancestor_hashes(&record.uri)));
    map.insert("u".into(), json!(short_hash(record.uri.as_str())));
    map.insert("t".into(), json!(record.context_type.as_str()));
    map.insert("c".into(), json!(record.category.as_str()));
    map.insert("l".into(), json!(record.level));
    if let Some(owner) = &record.owner_user_id {
        map.insert("o".into(), json!(owner));
    }
    map.insert("ca".into(), json!(record.created_at));
    map.insert("ua".into(), json!(record.updated_at));
    if !record.tags.is_empty() {
        let tags: Vec<String> = record.tags.iter().take(MAX_TAGS).map(|t| short_hash(t)).collect();
        map.insert("g".into(), json!(tags));
        if record.tags.len() > MAX_TAGS {
            map.insert("gx".into(), json!(true));
        }
    }
    let mut counts: Vec<(&str, u32)> = decode_counts(&record.terms).collect();
    counts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    let mut terms: Vec<String> = counts.iter().take(MAX_TERMS).map(|(t, _)| term_hash(t)).collect();
    let mut cut = counts.len() > terms.len();
    let base = Value::Object(map.clone()).to_string().len();
    // `"w":[…]` and `,"wx":true` around the hashes: 24 bytes at most.
    while !terms.is_empty() && base + 24 + terms.iter().map(|t| t.len() + 3).sum::<usize>() > FILTERABLE_BUDGET {
        terms.pop();
        cut = true;
    }
    if !terms.is_empty() {
        map.insert("w".into(), json!(terms));
    }
    if cut {
        map.insert("wx".into(), json!(true));
    }
    map.insert("r".into(), Value::String(record_json(record, &counts)));
    Value::Object(map)
}

/// `record` as JSON within [`RECORD_BUDGET`]: its terms kept most
/// frequent first until the rest would not fit (in their stored order).
fn record_json(record: &Record, by_count: &[(&str, u32)]) -> String {
    let whole = serde_json::to_string(record).unwrap_or_default();
    if whole.len() <= RECORD_BUDGET {
        return whole;
    }
    let mut bare = record.clone();
    bare.terms = String::new();
    let room = RECORD_BUDGET.saturating_sub(serde_json::to_string(&bare).unwrap_or_default().len() + 16);
    let mut kept: Vec<(&str, u32)> = Vec::new();
    let mut used = 0;
    for &(term, count) in by_count {
        let cost = term.len() + 12;
        if used + cost > room {
            break;
        }
        used += cost;
        kept.push((term, count));
    }
    kept.sort_unstable();
    bare.terms = kept.iter().map(|(t, c)| format!("{t}:{c}")).collect::<Vec<_>>().join(" ");
    serde_json::to_string(&bare).unwrap_or_default()
}

/// The record a vector's metadata holds (`None` when `r` is missing or
/// does not decode: not a Skald record).
#[must_use]
pub fn record_of(metadata: &Value) -> Option<Record> {
    serde_json::from_str(metadata.get("r")?.as_str()?).ok()
}

/// A filter as pushed down: the metadata filter (`None`: nothing to push,
/// every vector qualifies) and whether it is exact — whether every vector
/// it lets through passes the [`Filter`] (barring hash collisions), so that
/// a full page of results needs no over-fetch.
#[derive(Debug, Clone, PartialEq)]
pub struct Pushed {
    /// The S3 Vectors metadata filter.
    pub filter: Option<Value>,
    /// Whether nothing was left to the local re-check.
    pub exact: bool,
}

/// `filter` as an S3 Vectors metadata filter, implied by it; with `terms`
/// (a keyword search's query terms) also "holds one of the terms".
#[must_use]
pub fn pushdown(filter: &Filter, terms: Option<&[String]>) -> Pushed {
    let mut exact = true;
    let mut all: Vec<Value> = Vec::new();
    let hashes = |uris: &[VikingUri]| -> Vec<String> { uris.iter().filter_map(target_hash).collect() };
    if !filter.targets.is_empty() {
        let targets = hashes(&filter.targets);
        // A root target matches everything: nothing to push.
        if targets.len() == filter.targets.len() {
            all.push(json!({"a": {"$in": targets}}));
        }
        exact &= filter.targets.iter().all(|t| t.segments().count() <= MAX_ANCESTORS);
    }
    if !filter.not_under.is_empty() {
        // Only targets whose own hash is stored can be excluded exactly.
        let shallow: Vec<VikingUri> =
            filter.not_under.iter().filter(|t| t.segments().count() <= MAX_ANCESTORS).cloned().collect();
        exact &= shallow.len() == filter.not_under.len();
        let hashes = hashes(&shallow);
        if !hashes.is_empty() {
            all.push(json!({"a": {"$nin": hashes}}));
        }
    }
    if !filter.context_types.is_empty() {
        all.push(json!({"t": {"$in": filter.context_types.iter().map(|t| t.as_str()).collect::<Vec<_>>()}}));
    }
    if filter.levels.contains(&LEVEL_FILE) {
        // A file's passages pass as their file.
        all.push(json!({"$or": [{"l": {"$in": filter.levels}}, {"l": {"$gte": LEVEL_PASSAGE}}]}));
    } else if !filter.levels.is_empty() {
        all.push(json!({"l": {"$in": filter.levels}}));
    }
    for tag in &filter.tags {
        // A record whose tag list was cut passes without the tag.
        all.push(has_tag(std::slice::from_ref(tag)));
        exact = false;
    }
    if let Some(range) = filter.time {
        let key = time_key(range.field);
        let mut bounds = Map::new();
        if let Some(since) = range.since {
            bounds.insert("$gte".into(), json!(since));
        }
        if let Some(until) = range.until {
            bounds.insert("$lte".into(), json!(until));
        }
        if !bounds.is_empty() {
            all.push(json!({ key: bounds }));
        }
    }
    if let Some(expr) = &filter.expr {
        let (pushed, whole) = push_expr(expr);
        exact &= whole;
        all.extend(pushed);
    }
    if let Some(terms) = terms.filter(|t| !t.is_empty()) {
        // A whole pasted prompt has thousands of terms: the longest
        // (usually the rarest) [`MAX_QUERY_TERMS`] make the filter.
        let mut terms: Vec<&String> = terms.iter().collect();
        terms.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        terms.truncate(MAX_FILTER_TERMS);
        let hashes: Vec<String> = terms.iter().map(|t| term_hash(t)).collect();
        all.push(json!({"$or": [{"w": {"$in": hashes}}, {"wx": true}]}));
    }
    // Past the service's bound, the last parts (terms, the expression,
    // times, tags, …) are left to the local re-check; targets stay.
    while all.len() > 1 && all.iter().map(constraints).sum::<usize>() > MAX_FILTER_CONSTRAINTS {
        all.pop();
        exact = false;
    }
    if all.first().is_some_and(|f| constraints(f) > MAX_FILTER_CONSTRAINTS) {
        all.clear();
        exact = false;
    }
    let filter = match all.len() {
        0 => None,
        1 => all.pop(),
        _ => Some(json!({ "$and": all })),
    };
    Pushed { filter, exact }
}

/// The constraints a metadata filter has: each comparison, and each value
/// of an `$in` or `$nin`.
fn constraints(filter: &Value) -> usize {
    match filter {
        Value::Object(map) => map
            .iter()
            .map(|(key, value)| match (key.as_str(), value) {
                ("$and" | "$or", Value::Array(items)) => items.iter().map(constraints).sum(),
                (_, Value::Object(ops)) => ops.values().map(|v| v.as_array().map_or(1, |a| a.len().max(1))).sum(),
                _ => 1,
            })
            .sum(),
        _ => 1,
    }
}

/// A metadata filter no record passes (levels are never negative): what an
/// expression that can match nothing pushes down.
fn nothing() -> Value {
    json!({"l": {"$lt": 0}})
}

fn time_key(field: TimeField) -> &'static str {
    match field {
        TimeField::CreatedAt => "ca",
        TimeField::UpdatedAt => "ua",
    }
}

/// "Has one of `tags`": a hash match, or a record whose tag list was cut.
fn has_tag(tags: &[String]) -> Value {
    let hashes: Vec<String> = tags.iter().map(|t| short_hash(t)).collect();
    json!({"$or": [{"g": {"$in": hashes}}, {"gx": true}]})
}

/// An expression as a metadata filter it implies (`None`: every vector)
/// and whether the two are equivalent.
fn push_expr(expr: &FilterExpr) -> (Option<Value>, bool) {
    match expr {
        FilterExpr::And(subs) => {
            let mut exact = true;
            let mut pushed = Vec::new();
            for sub in subs {
                let (p, e) = push_expr(sub);
                exact &= e;
                pushed.extend(p);
            }
            let value = match pushed.len() {
                0 => None,
                1 => pushed.pop(),
                _ => Some(json!({ "$and": pushed })),
            };
            (value, exact)
        }
        FilterExpr::Or(subs) => {
            let mut exact = true;
            let mut pushed = Vec::new();
            for sub in subs {
                let (p, e) = push_expr(sub);
                exact &= e;
                // One branch that lets everything through lets the `or` do so.
                let Some(p) = p else { return (None, false) };
                pushed.push(p);
            }
            match pushed.len() {
                // `or` of nothing matches nothing.
                0 => (Some(nothing()), true),
                1 => (pushed.pop(), exact),
                _ => (Some(json!({ "$or": pushed })), exact),
            }
        }
        FilterExpr::Must(Field::Level, _)
        | FilterExpr::MustNot(Field::Level, _)
        | FilterExpr::Prefix(Field::Level, _)
        | FilterExpr::Range { field: Field::Level, .. } => push_level(expr),
        FilterExpr::Must(field, values) => push_must(*field, values, false),
        FilterExpr::MustNot(field, values) => push_must(*field, values, true),
        FilterExpr::Prefix(Field::Uri, prefixes) => {
            let roots: Vec<VikingUri> =
                prefixes.iter().filter_map(|p| VikingUri::parse(p.trim_end_matches('/')).ok()).collect();
            if roots.len() != prefixes.len() || roots.iter().any(|r| r.segments().count() == 0) {
                return (None, false);
            }
            let exact = roots.iter().all(|r| r.segments().count() <= MAX_ANCESTORS);
            (Some(json!({"a": {"$in": roots.iter().filter_map(target_hash).collect::<Vec<_>>()}})), exact)
        }
        // Fields with a few known values: the values with the prefix.
        FilterExpr::Prefix(field @ (Field::ContextType | Field::Category), prefixes) => {
            let values: Vec<String> = match field {
                Field::ContextType => ContextType::ALL.map(|t| t.as_str().to_owned()).into(),
                _ => Category::ALL.map(|c| c.as_str().to_owned()).into(),
            };
            let matching: Vec<String> =
                values.into_iter().filter(|v| prefixes.iter().any(|p| v.starts_with(p.as_str()))).collect();
            if matching.is_empty() { (Some(nothing()), true) } else { push_must(*field, &matching, false) }
        }
        FilterExpr::Prefix(..) => (None, false),
        FilterExpr::Range { field, lower, upper } => {
            let key = match field {
                Field::CreatedAt => "ca",
                Field::UpdatedAt => "ua",
                // A field without a number is in no range.
                _ => return (Some(nothing()), true),
            };
            (push_range(key, *lower, *upper), true)
        }
    }
}

/// A range on the metadata key `key` (`None`: no bound, every vector).
fn push_range(key: &str, lower: Option<(f64, bool)>, upper: Option<(f64, bool)>) -> Option<Value> {
    let mut bounds = Map::new();
    if let Some((v, inclusive)) = lower {
        bounds.insert(if inclusive { "$gte" } else { "$gt" }.into(), json!(v));
    }
    if let Some((v, inclusive)) = upper {
        bounds.insert(if inclusive { "$lte" } else { "$lt" }.into(), json!(v));
    }
    (!bounds.is_empty()).then(|| json!({ key: bounds }))
}

/// A condition on `level`. A passage passes it as its file does (level
/// 2), which its stored `l` (3 and up) does not say: the condition holds
/// for records of levels 0–2 as pushed, and passages pass when level 2
/// would.
fn push_level(expr: &FilterExpr) -> (Option<Value>, bool) {
    let (pushed, exact) = match expr {
        FilterExpr::Must(_, values) => push_must(Field::Level, values, false),
        FilterExpr::MustNot(_, values) => push_must(Field::Level, values, true),
        FilterExpr::Prefix(_, prefixes) => {
            let matching: Vec<String> = (0..=LEVEL_FILE)
                .map(|l| l.to_string())
                .filter(|v| prefixes.iter().any(|p| v.starts_with(p.as_str())))
                .collect();
            if matching.is_empty() { (Some(nothing()), true) } else { push_must(Field::Level, &matching, false) }
        }
        FilterExpr::Range { lower, upper, .. } => (push_range("l", *lower, *upper), true),
        _ => (None, false),
    };
    let files = json!({"l": {"$lte": LEVEL_FILE}});
    let on_files = match pushed {
        Some(p) => json!({"$and": [files, p]}),
        None => files,
    };
    if passes_at_file_level(expr) {
        (Some(json!({"$or": [on_files, {"l": {"$gte": LEVEL_PASSAGE}}]})), exact)
    } else {
        (Some(on_files), exact)
    }
}

/// Whether a file's level (2) passes the level condition `expr`.
fn passes_at_file_level(expr: &FilterExpr) -> bool {
    let (text, number) = (LEVEL_FILE.to_string(), f64::from(LEVEL_FILE));
    match expr {
        FilterExpr::Must(_, values) => values.contains(&text),
        FilterExpr::MustNot(_, values) => !values.contains(&text),
        FilterExpr::Prefix(_, prefixes) => prefixes.iter().any(|p| text.starts_with(p.as_str())),
        FilterExpr::Range { lower, upper, .. } => {
            lower.is_none_or(|(v, inclusive)| if inclusive { number >= v } else { number > v })
                && upper.is_none_or(|(v, inclusive)| if inclusive { number <= v } else { number < v })
        }
        _ => false,
    }
}

/// `must` (or `must_not`) on `field`.
fn push_must(field: Field, values: &[String], negate: bool) -> (Option<Value>, bool) {
    let (key, list): (&str, Vec<Value>) = match field {
        Field::ContextType => ("t", values.iter().map(|v| json!(v)).collect()),
        Field::Category => ("c", values.iter().map(|v| json!(v)).collect()),
        Field::Owner => ("o", values.iter().map(|v| json!(v)).collect()),
        Field::Level | Field::CreatedAt | Field::UpdatedAt => {
            let key = match field {
                Field::Level => "l",
                Field::CreatedAt => "ca",
                _ => "ua",
            };
            // A value that is not a canonical integer equals no record's.
            let numbers: Vec<Value> = values
                .iter()
                .filter_map(|v| v.parse::<i64>().ok().filter(|n| n.to_string() == *v))
                .map(|n| json!(n))
                .collect();
            // `must` of nothing matches nothing; `must_not` of it, everything.
            if numbers.is_empty() {
                return if negate { (None, true) } else { (Some(nothing()), true) };
            }
            (key, numbers)
        }
        Field::Tags if !negate => return (Some(has_tag(values)), false),
        Field::Tags => return (None, false),
        // A URI as the reference compares it: without a trailing slash.
        Field::Uri => ("u", values.iter().map(|v| json!(short_hash(v.trim_end_matches('/')))).collect()),
    };
    let op = if negate { "$nin" } else { "$in" };
    (Some(json!({ key: { op: list } })), true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::filter::TimeRange;
    use crate::index::lexical::encode_counts;

    fn uri(s: &str) -> VikingUri {
        VikingUri::parse(s).expect("valid")
    }

    fn record(u: &str) -> Record {
        Record {
            uri: uri(u),
            level: LEVEL_FILE,
            context_type: ContextType::Memory,
            category: Category::Events,
            abstract_text: "a".into(),
            abstract_tokens: 1,
            overview_tokens: None,
            full_tokens: Some(3),
            size: 10,
            created_at: 100,
            updated_at: 200,
            tags: vec!["k=v".into()],
            owner_user_id: Some("alice".into()),
            source_hash: "h".into(),
            source_version: Some("0A".into()),
            terms: encode_counts(&["the quick brown fox jumps over the lazy dog fox"]),
            passages: 0,
            span: None,
        }
    }

    #[test]
    fn index_names_fit_the_service_and_keep_accounts_apart() {
        let a = index_name("skald-", &AccountId::new("Acme_Corp").expect("valid"));
        let b = index_name("skald-", &AccountId::new("acme-corp").expect("valid"));
        assert!(a.starts_with("skald-acme-corp-") && b.starts_with("skald-acme-corp-"), "{a} {b}");
        assert_ne!(a, b, "ids that fold alike keep distinct names");
        let long = index_name("skald-", &AccountId::new(&"x".repeat(128)).expect("valid"));
        assert!(long.len() <= MAX_INDEX_NAME, "{long}");
        assert!(long.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'));
    }

    #[test]
    fn keys_are_level_and_uri() {
        assert_eq!(vector_key(&uri("viking://resources/a.md"), 2), "2:viking://resources/a.md");
        assert_ne!(vector_key(&uri("viking://resources/a"), 0), vector_key(&uri("viking://resources/a"), 1));
    }

    #[test]
    fn metadata_round_trips_the_record_and_stays_in_budget() {
        let r = record("viking://user/alice/memories/events/2026/x.md");
        let m = metadata(&r);
        assert_eq!(record_of(&m), Some(r.clone()));
        let mut filterable = m.clone();
        filterable.as_object_mut().expect("object").remove("r");
        assert!(filterable.to_string().len() <= FILTERABLE_BUDGET);
        assert_eq!(m["a"].as_array().map(Vec::len), Some(6), "one hash per segment, the file included");

        // A record with a huge vocabulary and many tags still fits; its
        // most frequent terms are kept.
        let mut big = r;
        let text: String = "often ".repeat(50) + &(0..20_000).map(|i| format!("w{i} ")).collect::<String>();
        big.terms = encode_counts(&[&text]);
        big.tags = (0..100).map(|i| format!("tag{i}=value")).collect();
        let m = metadata(&big);
        let mut filterable = m.clone();
        filterable.as_object_mut().expect("object").remove("r");
        assert!(filterable.to_string().len() <= FILTERABLE_BUDGET, "{}", filterable.to_string().len());
        assert_eq!((m["gx"].clone(), m["wx"].clone()), (json!(true), json!(true)));
        assert!(m["r"].as_str().is_some_and(|r| r.len() <= RECORD_BUDGET));
        let back = record_of(&m).expect("decodes");
        assert!(back.terms.contains("often:50"), "the most frequent term is kept");
        assert!(m["w"].as_array().is_some_and(|w| w.contains(&json!(term_hash("often")))));
    }

    #[test]
    fn targets_types_levels_tags_and_times_push_down_exactly() {
        let filter = Filter {
            targets: vec![uri("viking://user/alice"), uri("viking://resources")],
            not_under: vec![uri("viking://user/alice/peers")],
            context_types: vec![ContextType::Memory],
            levels: vec![2],
            tags: vec!["k=v".into()],
            time: Some(TimeRange { field: TimeField::CreatedAt, since: Some(5), until: None }),
            expr: None,
        };
        let pushed = pushdown(&filter, None);
        assert!(!pushed.exact, "a cut tag list lets a record through without the tag");
        let and = pushed.filter.expect("a filter")["$and"].as_array().cloned().expect("an $and");
        assert_eq!(and.len(), 6);
        assert_eq!(and[0], json!({"a": {"$in": [short_hash("user/alice"), short_hash("resources")]}}));
        assert_eq!(and[1], json!({"a": {"$nin": [short_hash("user/alice/peers")]}}));
        assert_eq!(and[5], json!({"ca": {"$gte": 5}}));
        assert_eq!(pushdown(&Filter::default(), None), Pushed { filter: None, exact: true });
        let untagged = Filter { tags: Vec::new(), ..filter };
        assert!(pushdown(&untagged, None).exact);
    }

    #[test]
    fn expressions_push_down_what_they_can_and_say_when_not_exact() {
        let parse = |v: Value| FilterExpr::parse(&v, &|_| Ok(0)).expect("parses");
        let with = |expr| Filter { expr: Some(expr), ..Filter::default() };
        let must = parse(json!({"op": "must", "field": "category", "conds": ["events", "entities"]}));
        assert_eq!(pushdown(&with(must), None).filter, Some(json!({"c": {"$in": ["events", "entities"]}})));
        let range = parse(json!({"op": "range", "field": "updated_at", "gt": 10, "lte": 20}));
        assert_eq!(
            pushdown(&with(range), None),
            Pushed { filter: Some(json!({"ua": {"$gt": 10.0, "$lte": 20.0}})), exact: true }
        );
        // An `or` with a branch that cannot be pushed lets everything through.
        let or = parse(json!({"op": "or", "conds": [
            {"op": "must", "field": "level", "conds": [2]},
            {"op": "prefix", "field": "owner_user_id", "prefix": "al"}]}));
        assert_eq!(pushdown(&with(or), None), Pushed { filter: None, exact: false });
        // `must` on a URI compares the whole URI's hash.
        let uri_must = parse(json!({"op": "must", "field": "uri", "conds": ["viking://resources/a.md/"]}));
        let pushed = pushdown(&with(uri_must), None);
        assert_eq!(
            pushed,
            Pushed { filter: Some(json!({"u": {"$in": [short_hash("viking://resources/a.md")]}})), exact: true }
        );
        // A filter past the service's constraint bound keeps what fits.
        let many: Vec<String> = (0..200).map(|i| format!("owner{i}")).collect();
        let wide = Filter {
            targets: vec![uri("viking://resources")],
            expr: Some(FilterExpr::Must(Field::Owner, many)),
            ..Filter::default()
        };
        let pushed = pushdown(&wide, None);
        assert!(!pushed.exact);
        assert_eq!(pushed.filter, Some(json!({"a": {"$in": [short_hash("resources")]}})));
        let keywords = pushdown(&Filter::default(), Some(&["fox".to_owned()]));
        assert_eq!(keywords.filter, Some(json!({"$or": [{"w": {"$in": [term_hash("fox")]}}, {"wx": true}]})));
    }
}
