//! Strict reading of a JSON request body: every field is checked by type
//! and range, unknown fields are refused, and every problem is collected as
//! a [`FieldError`] whose `loc` names the field — as the reference's
//! pydantic models report them. `null` is the same as absent.

use serde_json::{Map, Value};

use super::error::{ApiError, FieldError};

/// A request body as a JSON object (an empty body is `{}`).
///
/// # Errors
/// 400 with a `json_invalid` validation error for text that is not JSON,
/// `model_attributes_type` for JSON that is not an object, as the
/// reference reports them.
pub fn json_object(bytes: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let value: Value = if bytes.iter().all(u8::is_ascii_whitespace) {
        Value::Object(Map::new())
    } else {
        serde_json::from_slice(bytes).map_err(|e| {
            ApiError::Validation(vec![FieldError {
                loc: vec!["body".into(), e.column().into()],
                message: format!("JSON decode error: {e}"),
                kind: "json_invalid".into(),
            }])
        })?
    };
    let Value::Object(map) = value else {
        return Err(ApiError::Validation(vec![FieldError {
            loc: vec!["body".into()],
            message: "Input should be a valid dictionary or object to extract fields from".into(),
            kind: "model_attributes_type".into(),
        }]));
    };
    Ok(map)
}

/// A request body being validated.
#[derive(Debug)]
pub struct Body {
    map: Map<String, Value>,
    errors: Vec<FieldError>,
}

impl Body {
    /// Parses `bytes` as a JSON object and refuses fields not in `known`
    /// (`extra_forbidden`). An empty body is `{}`.
    ///
    /// # Errors
    /// 400 when the body is not JSON or not an object.
    pub fn parse(bytes: &[u8], known: &[&str]) -> Result<Self, ApiError> {
        let map = json_object(bytes)?;
        let errors = map
            .keys()
            .filter(|k| !known.contains(&k.as_str()))
            .map(|k| FieldError::new(k, "extra_forbidden", "Extra inputs are not permitted"))
            .collect();
        Ok(Self { map, errors })
    }

    /// Whether `name` was sent with a non-null value.
    #[must_use]
    pub fn sent(&self, name: &str) -> bool {
        self.map.get(name).is_some_and(|v| !v.is_null())
    }

    /// The raw value of `name` (`None` when absent or null).
    #[must_use]
    pub fn raw(&self, name: &str) -> Option<&Value> {
        self.map.get(name).filter(|v| !v.is_null())
    }

    /// Records an error.
    pub fn error(&mut self, error: FieldError) {
        self.errors.push(error);
    }

    /// Whether any error was recorded for `name`.
    #[must_use]
    pub fn has_error(&self, name: &str) -> bool {
        self.errors.iter().any(|e| e.loc.get(1).and_then(Value::as_str) == Some(name))
    }

    /// Whether `name` is present at all (even as `null`).
    #[must_use]
    pub fn contains(&self, name: &str) -> bool {
        self.map.contains_key(name)
    }

    /// A checkpoint: the errors recorded so far, if any, as one 400 (they
    /// are taken; validation may go on after an `Ok`).
    ///
    /// # Errors
    /// Every error recorded so far.
    pub fn check(&mut self) -> Result<(), ApiError> {
        if self.errors.is_empty() { Ok(()) } else { Err(ApiError::Validation(std::mem::take(&mut self.errors))) }
    }

    /// Ends validation.
    ///
    /// # Errors
    /// Every recorded error, as one 400.
    pub fn finish(self) -> Result<Map<String, Value>, ApiError> {
        if self.errors.is_empty() { Ok(self.map) } else { Err(ApiError::Validation(self.errors)) }
    }

    /// Whether required field `name` was sent; records `missing` when not.
    pub fn require(&mut self, name: &str) -> bool {
        let sent = self.sent(name);
        if !sent {
            self.error(FieldError::new(name, "missing", "Field required"));
        }
        sent
    }

    /// A `viking://` URI field (`value_error` naming what is wrong with it).
    pub fn uri(&mut self, name: &str) -> Option<crate::uri::VikingUri> {
        let text = self.string(name)?;
        crate::uri::VikingUri::parse(text.trim())
            .map_err(|e| self.error(FieldError::new(name, "value_error", format!("Value error, {e}"))))
            .ok()
    }

    /// A string field.
    pub fn string(&mut self, name: &str) -> Option<String> {
        match self.raw(name)? {
            Value::String(s) => Some(s.clone()),
            _ => {
                self.error(FieldError::new(name, "string_type", "Input should be a valid string"));
                None
            }
        }
    }

    /// A boolean field.
    pub fn boolean(&mut self, name: &str) -> Option<bool> {
        match self.raw(name)? {
            Value::Bool(b) => Some(*b),
            _ => {
                self.error(FieldError::new(name, "bool_type", "Input should be a valid boolean"));
                None
            }
        }
    }

    /// An integer field within `min..=max` (each bound optional). Integral
    /// floats (`10.0`) are accepted as the reference does.
    pub fn int(&mut self, name: &str, min: Option<i64>, max: Option<i64>) -> Option<i64> {
        let value = self.raw(name)?;
        let n = match value {
            Value::Number(n) if n.is_i64() => n.as_i64(),
            // Integers beyond i64 are still integers; they saturate.
            Value::Number(n) if n.is_u64() => Some(i64::MAX),
            Value::Number(n) => n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 9e15).map(|f| f as i64),
            _ => None,
        };
        let Some(n) = n else {
            let (kind, message) = if value.is_number() {
                ("int_from_float", "Input should be a valid integer, got a number with a fractional part")
            } else {
                ("int_type", "Input should be a valid integer")
            };
            self.error(FieldError::new(name, kind, message));
            return None;
        };
        if let Some(lo) = min.filter(|lo| n < *lo) {
            self.error(FieldError::new(
                name,
                "greater_than_equal",
                format!("Input should be greater than or equal to {lo}"),
            ));
            return None;
        }
        if let Some(hi) = max.filter(|hi| n > *hi) {
            self.error(FieldError::new(name, "less_than_equal", format!("Input should be less than or equal to {hi}")));
            return None;
        }
        Some(n)
    }

    /// A finite number.
    pub fn number(&mut self, name: &str) -> Option<f64> {
        match self.raw(name)?.as_f64() {
            Some(f) if f.is_finite() => Some(f),
            _ => {
                self.error(FieldError::new(name, "float_type", "Input should be a valid number"));
                None
            }
        }
    }

    /// One of `allowed`.
    pub fn literal(&mut self, name: &str, allowed: &[&str]) -> Option<String> {
        let value = self.raw(name)?;
        if let Some(s) = value.as_str().filter(|s| allowed.contains(s)) {
            return Some(s.to_owned());
        }
        let quoted: Vec<String> = allowed.iter().map(|a| format!("'{a}'")).collect();
        let listed = match quoted.split_last() {
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        };
        self.error(FieldError::new(name, "literal_error", format!("Input should be {listed}")));
        None
    }

    /// A list of strings.
    pub fn string_list(&mut self, name: &str) -> Option<Vec<String>> {
        let Value::Array(items) = self.raw(name)? else {
            self.error(FieldError::new(name, "list_type", "Input should be a valid list"));
            return None;
        };
        let mut out = Vec::with_capacity(items.len());
        let mut bad = Vec::new();
        for (i, item) in items.iter().enumerate() {
            match item.as_str() {
                Some(s) => out.push(s.to_owned()),
                None => bad.push(FieldError::new(name, "string_type", "Input should be a valid string").at(i)),
            }
        }
        if bad.is_empty() {
            Some(out)
        } else {
            self.errors.extend(bad);
            None
        }
    }

    /// A string or a list of strings (a list of one for a string).
    pub fn string_or_list(&mut self, name: &str) -> Option<Vec<String>> {
        match self.raw(name)? {
            Value::String(s) => Some(vec![s.clone()]),
            Value::Array(_) => self.string_list(name),
            _ => {
                self.error(FieldError::new(name, "string_type", "Input should be a valid string or list of strings"));
                None
            }
        }
    }

    /// A JSON object.
    pub fn object(&mut self, name: &str) -> Option<Map<String, Value>> {
        match self.raw(name)? {
            Value::Object(m) => Some(m.clone()),
            _ => {
                self.error(FieldError::new(name, "dict_type", "Input should be a valid dictionary"));
                None
            }
        }
    }
}

/// A path segment percent-decoded (invalid UTF-8 replaced): a skill's
/// name, a watch's id, a tool result's id as a client encoded it.
#[must_use]
pub fn decode_segment(segment: &str) -> String {
    percent_encoding::percent_decode_str(segment).decode_utf8_lossy().into_owned()
}

/// A request's query string being validated, as the reference's FastAPI
/// query parameters: percent-decoded (`+` is a space), the last value of a
/// repeated name wins, unknown names are ignored, and every problem is a
/// [`FieldError`] at `["query", name]`.
#[derive(Debug, Default)]
pub struct Query {
    pairs: Vec<(String, String)>,
    errors: Vec<FieldError>,
}

impl Query {
    /// Parses `query` (the part of the URI after `?`; `None`: empty).
    #[must_use]
    pub fn parse(query: Option<&str>) -> Self {
        let decode = |s: &str| {
            let spaced = s.replace('+', " ");
            percent_encoding::percent_decode_str(&spaced).decode_utf8_lossy().into_owned()
        };
        let pairs = query
            .unwrap_or_default()
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                (decode(k), decode(v))
            })
            .collect();
        Self { pairs, errors: Vec::new() }
    }

    fn error(&mut self, name: &str, kind: &str, message: &str) {
        self.errors.push(FieldError {
            loc: vec!["query".into(), name.into()],
            message: message.into(),
            kind: kind.into(),
        });
    }

    /// The value of `name` (the last one sent), if any.
    #[must_use]
    pub fn raw(&self, name: &str) -> Option<&str> {
        self.pairs.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// Records a `value_error` on `name` (a value of the right type that
    /// is not acceptable).
    pub fn value_error(&mut self, name: &str, message: &str) {
        self.error(name, "value_error", &format!("Value error, {message}"));
    }

    /// A required string parameter (`missing` when absent).
    pub fn required(&mut self, name: &str) -> Option<String> {
        let value = self.raw(name).map(str::to_owned);
        if value.is_none() {
            self.error(name, "missing", "Field required");
        }
        value
    }

    /// An integer parameter within `min..=max` (each bound optional).
    pub fn int(&mut self, name: &str, min: Option<i64>, max: Option<i64>) -> Option<i64> {
        let text = self.raw(name)?.trim().to_owned();
        let Ok(n) = text.parse::<i64>() else {
            self.error(name, "int_parsing", "Input should be a valid integer, unable to parse string as an integer");
            return None;
        };
        if let Some(lo) = min.filter(|lo| n < *lo) {
            self.error(name, "greater_than_equal", &format!("Input should be greater than or equal to {lo}"));
            return None;
        }
        if let Some(hi) = max.filter(|hi| n > *hi) {
            self.error(name, "less_than_equal", &format!("Input should be less than or equal to {hi}"));
            return None;
        }
        Some(n)
    }

    /// A boolean parameter (`true/false`, `1/0`, `yes/no`, `on/off`, any
    /// case, as pydantic reads them).
    pub fn boolean(&mut self, name: &str) -> Option<bool> {
        let text = self.raw(name)?.trim().to_ascii_lowercase();
        match text.as_str() {
            "true" | "1" | "yes" | "on" | "t" | "y" => Some(true),
            "false" | "0" | "no" | "off" | "f" | "n" => Some(false),
            _ => {
                self.error(name, "bool_parsing", "Input should be a valid boolean, unable to interpret input");
                None
            }
        }
    }

    /// One of `allowed`.
    pub fn literal(&mut self, name: &str, allowed: &[&str]) -> Option<String> {
        let value = self.raw(name)?.to_owned();
        if allowed.contains(&value.as_str()) {
            return Some(value);
        }
        let quoted: Vec<String> = allowed.iter().map(|a| format!("'{a}'")).collect();
        self.error(name, "literal_error", &format!("Input should be {}", quoted.join(" or ")));
        None
    }

    /// Ends validation.
    ///
    /// # Errors
    /// Every recorded error, as one 400.
    pub fn finish(self) -> Result<(), ApiError> {
        if self.errors.is_empty() { Ok(()) } else { Err(ApiError::Validation(self.errors)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_parameters_decode_and_validate_like_fastapi() {
        let mut q = Query::parse(Some("uri=viking%3A%2F%2F~%2Fa+b.md&limit=abc&recursive=True&recursive=0&x"));
        assert_eq!(q.required("uri").as_deref(), Some("viking://~/a b.md"));
        assert_eq!(q.boolean("recursive"), Some(false), "the last value wins");
        assert_eq!(q.int("limit", None, None), None);
        assert_eq!(q.required("missing"), None);
        let ApiError::Validation(errors) = q.finish().expect_err("invalid") else { panic!("validation") };
        let locs: Vec<String> = errors.iter().map(|e| format!("{}.{}:{}", e.loc[0], e.loc[1], e.kind)).collect();
        assert_eq!(locs, ["\"query\".\"limit\":int_parsing", "\"query\".\"missing\":missing"]);
        let mut q = Query::parse(Some("n=5"));
        assert_eq!(q.int("n", Some(1), Some(4)), None);
        assert!(q.finish().is_err());
    }

    fn body(json: &str) -> Body {
        Body::parse(json.as_bytes(), &["a", "b", "c"]).expect("object")
    }

    #[test]
    fn unknown_fields_and_wrong_types_are_collected_with_their_loc() {
        let mut b = body(r#"{"a": "x", "b": 1.5, "zzz": 1}"#);
        assert_eq!(b.int("a", None, None), None);
        assert_eq!(b.int("b", Some(1), None), None);
        let ApiError::Validation(errors) = b.finish().expect_err("invalid") else { panic!("validation") };
        let locs: Vec<String> = errors.iter().map(|e| format!("{}:{}", e.loc[1], e.kind)).collect();
        assert_eq!(locs, ["\"zzz\":extra_forbidden", "\"a\":int_type", "\"b\":int_from_float"]);
    }

    #[test]
    fn null_is_absent_and_ranges_are_enforced() {
        let mut b = body(r#"{"a": null, "b": 0, "c": 10.0}"#);
        assert_eq!(b.string("a"), None);
        assert!(!b.sent("a"));
        assert_eq!(b.int("c", Some(1), Some(10)), Some(10));
        assert_eq!(b.int("b", Some(1), None), None);
        let ApiError::Validation(errors) = b.finish().expect_err("invalid") else { panic!("validation") };
        assert_eq!(errors[0].message, "Input should be greater than or equal to 1");
    }

    #[test]
    fn literals_list_their_choices_like_pydantic() {
        let mut b = body(r#"{"a": "nope"}"#);
        assert_eq!(b.literal("a", &["updated_at", "created_at"]), None);
        let ApiError::Validation(errors) = b.finish().expect_err("invalid") else { panic!("validation") };
        assert_eq!(errors[0].message, "Input should be 'updated_at' or 'created_at'");
    }

    #[test]
    fn bodies_that_are_not_objects_are_refused() {
        assert!(Body::parse(b"[1]", &[]).is_err());
        assert!(Body::parse(b"{", &[]).is_err());
        assert!(Body::parse(b"  ", &[]).is_ok());
    }
}
