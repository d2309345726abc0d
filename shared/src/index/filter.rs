//! Record filters: targets, context types, levels, tags, a time range, and
//! the reference's `filter` expression (`must`, `must_not`, `range`,
//! `time_range`, `prefix`, `and`, `or`). Pure: no I/O, "now" is an input.

use serde_json::Value;

use super::record::{ContextType, LEVEL_FILE, Level, Record};
use crate::uri::VikingUri;

/// Which record time a range applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeField {
    /// `updated_at` (the default).
    UpdatedAt,
    /// `created_at`.
    CreatedAt,
}

impl TimeField {
    fn of(self, r: &Record) -> i64 {
        match self {
            Self::UpdatedAt => r.updated_at,
            Self::CreatedAt => r.created_at,
        }
    }
}

/// An inclusive time range in Unix seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeRange {
    /// The record time compared.
    pub field: TimeField,
    /// Lower bound (inclusive).
    pub since: Option<i64>,
    /// Upper bound (inclusive).
    pub until: Option<i64>,
}

/// Everything a search filters on. The default matches every record.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// A record matches if its URI is at or under one of these (empty: any).
    pub targets: Vec<VikingUri>,
    /// …and not at or under any of these.
    pub not_under: Vec<VikingUri>,
    /// Allowed context types (empty: any).
    pub context_types: Vec<ContextType>,
    /// Allowed levels (empty: any); a file's passages pass as level 2.
    pub levels: Vec<Level>,
    /// Tags that must all be present.
    pub tags: Vec<String>,
    /// A time window.
    pub time: Option<TimeRange>,
    /// The request's own filter expression.
    pub expr: Option<FilterExpr>,
}

impl Filter {
    /// Whether `record` passes every part of the filter.
    #[must_use]
    pub fn matches(&self, record: &Record) -> bool {
        (self.targets.is_empty() || self.targets.iter().any(|t| record.uri.is_under(t)))
            && !self.not_under.iter().any(|t| record.uri.is_under(t))
            && (self.context_types.is_empty() || self.context_types.contains(&record.context_type))
            && (self.levels.is_empty() || self.levels.contains(&record.level.min(LEVEL_FILE)))
            && self.tags.iter().all(|t| record.tags.contains(t))
            && self.time.is_none_or(|range| {
                let t = range.field.of(record);
                range.since.is_none_or(|s| t >= s) && range.until.is_none_or(|u| t <= u)
            })
            && self.expr.as_ref().is_none_or(|e| e.matches(record))
    }
}

/// A record field a filter expression can test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// `uri`.
    Uri,
    /// `context_type`.
    ContextType,
    /// `category`.
    Category,
    /// `level`.
    Level,
    /// `search_tags` / `tags`.
    Tags,
    /// `owner_user_id`.
    Owner,
    /// `created_at`.
    CreatedAt,
    /// `updated_at`.
    UpdatedAt,
}

/// The most nodes a request's filter expression may have: 256. A node is
/// an operator object or one value it tests (`{"op": "must", "field":
/// "uri", "conds": ["a", "b"]}` has 3). Every record a search scans is
/// tested against the whole expression, so its size multiplies the scan.
/// OpenViking's clients send none; the reference builds one of a few nodes
/// from `context_type`. 256 leaves room for a `must` over as many URIs as
/// `exclude_uris` takes (200).
pub const MAX_FILTER_NODES: usize = 256;

/// How deeply a filter expression may nest operators: 8 (a single
/// operator is 1; each `and` / `or` around it adds 1).
pub const MAX_FILTER_DEPTH: usize = 8;

/// A filter expression's size, counted on its JSON before it is parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FilterSize {
    /// Operator objects plus the values they test (see [`MAX_FILTER_NODES`]).
    pub nodes: usize,
    /// The deepest nesting of operator objects (see [`MAX_FILTER_DEPTH`]).
    pub depth: usize,
}

/// The size of the filter JSON `value`: an object is one node (one level
/// deeper than its parent), and each item of its `conds` or `prefix` — an
/// object counted likewise, anything else one node.
#[must_use]
pub fn filter_size(value: &Value) -> FilterSize {
    let Value::Object(map) = value else { return FilterSize { nodes: 1, depth: 0 } };
    let mut size = FilterSize { nodes: 1, depth: 1 };
    for key in ["conds", "prefix"] {
        let items = match map.get(key) {
            Some(Value::Array(items)) => items.as_slice(),
            Some(other) => std::slice::from_ref(other),
            None => &[],
        };
        for item in items {
            let inner = filter_size(item);
            size.nodes = size.nodes.saturating_add(inner.nodes);
            size.depth = size.depth.max(inner.depth + 1);
        }
    }
    size
}

/// A filter expression in the reference's shape.
#[derive(Debug, Clone, PartialEq)]
pub enum FilterExpr {
    /// Every sub-expression matches.
    And(Vec<FilterExpr>),
    /// At least one sub-expression matches.
    Or(Vec<FilterExpr>),
    /// The field equals one of the values (for tags: has one of them).
    Must(Field, Vec<String>),
    /// The field equals none of the values.
    MustNot(Field, Vec<String>),
    /// A numeric or time range (`gt`, `gte`, `lt`, `lte`).
    Range {
        /// The field.
        field: Field,
        /// Lower bound, and whether it is inclusive.
        lower: Option<(f64, bool)>,
        /// Upper bound, and whether it is inclusive.
        upper: Option<(f64, bool)>,
    },
    /// The field starts with one of the prefixes (`uri` by segment).
    Prefix(Field, Vec<String>),
}

impl FilterExpr {
    /// Parses the reference's filter JSON. `parse_time` turns a time value
    /// (ISO 8601, `YYYY-MM-DD`, or relative like `7d`) into Unix seconds.
    ///
    /// # Errors
    /// A message naming the bad operator, field or value.
    pub fn parse(value: &Value, parse_time: &dyn Fn(&str) -> Result<i64, String>) -> Result<Self, String> {
        let Value::Object(map) = value else {
            return Err("filter must be an object".into());
        };
        let op = map.get("op").and_then(Value::as_str).ok_or("filter needs a string 'op'")?;
        let field = || -> Result<Field, String> {
            let name = map.get("field").and_then(Value::as_str).ok_or(format!("filter op {op:?} needs a 'field'"))?;
            parse_field(name)
        };
        let strings = |key: &str| -> Result<Vec<String>, String> {
            let conds = map.get(key).ok_or(format!("filter op {op:?} needs '{key}'"))?;
            let list = match conds {
                Value::Array(items) => items.clone(),
                other => vec![other.clone()],
            };
            list.iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.clone()),
                    Value::Number(n) => Ok(n.to_string()),
                    Value::Bool(b) => Ok(b.to_string()),
                    other => Err(format!("filter value {other} is not a string or number")),
                })
                .collect()
        };
        let subs = || -> Result<Vec<FilterExpr>, String> {
            let conds =
                map.get("conds").and_then(Value::as_array).ok_or(format!("filter op {op:?} needs a 'conds' list"))?;
            conds.iter().map(|c| Self::parse(c, parse_time)).collect()
        };
        match op {
            "and" => Ok(Self::And(subs()?)),
            "or" => Ok(Self::Or(subs()?)),
            "must" => Ok(Self::Must(field()?, strings("conds")?)),
            "must_not" => Ok(Self::MustNot(field()?, strings("conds")?)),
            "prefix" => {
                Ok(Self::Prefix(field()?, strings(if map.contains_key("prefix") { "prefix" } else { "conds" })?))
            }
            "range" | "time_range" => {
                let field = field()?;
                let bound = |key: &str| -> Result<Option<f64>, String> {
                    match map.get(key) {
                        None | Some(Value::Null) => Ok(None),
                        Some(Value::Number(n)) => n.as_f64().map(Some).ok_or(format!("filter {key} is not a number")),
                        Some(Value::String(s)) if matches!(field, Field::CreatedAt | Field::UpdatedAt) => {
                            parse_time(s).map(|t| Some(t as f64))
                        }
                        Some(other) => Err(format!("filter {key} {other} is not a number")),
                    }
                };
                let lower = bound("gt")?.map(|v| (v, false)).or(bound("gte")?.map(|v| (v, true)));
                let upper = bound("lt")?.map(|v| (v, false)).or(bound("lte")?.map(|v| (v, true)));
                Ok(Self::Range { field, lower, upper })
            }
            other => {
                Err(format!("unknown filter op {other:?}; allowed: and, or, must, must_not, range, time_range, prefix"))
            }
        }
    }

    /// Whether `record` satisfies the expression.
    #[must_use]
    pub fn matches(&self, record: &Record) -> bool {
        match self {
            Self::And(all) => all.iter().all(|e| e.matches(record)),
            Self::Or(any) => any.iter().any(|e| e.matches(record)),
            Self::Must(field, values) => values.iter().any(|v| field_equals(record, *field, v)),
            Self::MustNot(field, values) => !values.iter().any(|v| field_equals(record, *field, v)),
            Self::Prefix(field, prefixes) => prefixes.iter().any(|p| match field {
                Field::Uri => VikingUri::parse(p.trim_end_matches('/')).is_ok_and(|root| record.uri.is_under(&root)),
                _ => field_text(record, *field).is_some_and(|t| t.starts_with(p.as_str())),
            }),
            Self::Range { field, lower, upper } => {
                let Some(x) = field_number(record, *field) else { return false };
                lower.is_none_or(|(v, inclusive)| if inclusive { x >= v } else { x > v })
                    && upper.is_none_or(|(v, inclusive)| if inclusive { x <= v } else { x < v })
            }
        }
    }
}

fn parse_field(name: &str) -> Result<Field, String> {
    Ok(match name {
        "uri" => Field::Uri,
        "context_type" => Field::ContextType,
        "category" => Field::Category,
        "level" => Field::Level,
        "search_tags" | "tags" => Field::Tags,
        "owner_user_id" => Field::Owner,
        "created_at" => Field::CreatedAt,
        "updated_at" => Field::UpdatedAt,
        other => {
            return Err(format!(
                "unknown filter field {other:?}; allowed: uri, context_type, category, level, search_tags, owner_user_id, created_at, updated_at"
            ));
        }
    })
}

fn field_text(record: &Record, field: Field) -> Option<String> {
    Some(match field {
        Field::Uri => record.uri.to_string(),
        Field::ContextType => record.context_type.as_str().to_owned(),
        Field::Category => record.category.as_str().to_owned(),
        Field::Level => record.level.min(LEVEL_FILE).to_string(),
        Field::Owner => record.owner_user_id.clone()?,
        Field::CreatedAt => record.created_at.to_string(),
        Field::UpdatedAt => record.updated_at.to_string(),
        Field::Tags => return None,
    })
}

fn field_equals(record: &Record, field: Field, value: &str) -> bool {
    match field {
        Field::Tags => record.tags.iter().any(|t| t == value),
        Field::Uri => record.uri.as_str() == value.trim_end_matches('/'),
        _ => field_text(record, field).is_some_and(|t| t == value),
    }
}

fn field_number(record: &Record, field: Field) -> Option<f64> {
    match field {
        Field::Level => Some(f64::from(record.level.min(LEVEL_FILE))),
        Field::CreatedAt => Some(record.created_at as f64),
        Field::UpdatedAt => Some(record.updated_at as f64),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_filters_size_counts_operators_and_the_values_they_test() {
        let leaf = json!({"op": "must", "field": "uri", "conds": ["a", "b"]});
        assert_eq!(filter_size(&leaf), FilterSize { nodes: 3, depth: 1 });
        let one = json!({"op": "must", "field": "level", "conds": 1});
        assert_eq!(filter_size(&one), FilterSize { nodes: 2, depth: 1 });
        let range = json!({"op": "range", "field": "level", "gte": 1});
        assert_eq!(filter_size(&range), FilterSize { nodes: 1, depth: 1 });
        let nested = json!({"op": "and", "conds": [leaf, {"op": "or", "conds": [range, one]}]});
        assert_eq!(filter_size(&nested), FilterSize { nodes: 1 + 3 + 1 + 1 + 2, depth: 3 });
        let prefix = json!({"op": "prefix", "field": "uri", "prefix": "viking://resources"});
        assert_eq!(filter_size(&prefix), FilterSize { nodes: 2, depth: 1 });
    }
}
