//! A tool's arguments as sent: checked against the tool's own schema (no
//! unknown argument, every required one present; `null` is absent), then
//! taken one by one by the tool's mapping onto its REST route.

use serde_json::{Map, Value};

/// A tool's arguments being mapped.
#[derive(Debug)]
pub(crate) struct Args {
    map: Map<String, Value>,
}

impl Args {
    /// The arguments of a call to a tool with `schema`.
    ///
    /// # Errors
    /// The caller-facing message for an argument the schema does not name
    /// or a required one that is missing.
    pub(crate) fn parse(arguments: Option<Map<String, Value>>, schema: &Map<String, Value>) -> Result<Self, String> {
        let mut map = arguments.unwrap_or_default();
        map.retain(|_, v| !v.is_null());
        let properties = schema.get("properties").and_then(Value::as_object);
        let known = |name: &str| properties.is_some_and(|p| p.contains_key(name));
        let mut problems: Vec<String> = map
            .keys()
            .filter(|k| !known(k))
            .map(|k| format!("{k}: Extra inputs are not permitted (unknown argument)"))
            .collect();
        let required = schema.get("required").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        problems.extend(
            required
                .iter()
                .filter_map(Value::as_str)
                .filter(|name| !map.contains_key(*name))
                .map(|name| format!("{name}: Field required")),
        );
        if problems.is_empty() { Ok(Self { map }) } else { Err(invalid(&problems.join("; "))) }
    }

    /// Takes argument `name` (`None` when absent or null).
    pub(crate) fn take(&mut self, name: &str) -> Option<Value> {
        self.map.remove(name)
    }

    /// Drops argument `name` when `drop` says so of its value.
    pub(crate) fn drop_if(&mut self, name: &str, drop: impl FnOnce(&Value) -> bool) {
        if self.map.get(name).is_some_and(drop) {
            self.map.remove(name);
        }
    }

    /// Moves each of `names` that was sent into `body` unchanged.
    pub(crate) fn pass(&mut self, body: &mut Map<String, Value>, names: &[&str]) {
        for name in names {
            if let Some(value) = self.take(name) {
                body.insert((*name).to_owned(), value);
            }
        }
    }

    /// Takes `name`, which must be a string.
    ///
    /// # Errors
    /// The message for a value that is not a string.
    pub(crate) fn string(&mut self, name: &str) -> Result<Option<String>, String> {
        match self.take(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(invalid(&format!("{name}: Input should be a valid string"))),
        }
    }

    /// Takes `name`, which must be a boolean.
    ///
    /// # Errors
    /// The message for a value that is not a boolean.
    pub(crate) fn boolean(&mut self, name: &str) -> Result<Option<bool>, String> {
        match self.take(name) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(b)),
            Some(_) => Err(invalid(&format!("{name}: Input should be a valid boolean"))),
        }
    }

    /// Takes `name`: a string or a list of strings (a portable schema can
    /// only say "array of strings"; a plain string is accepted too).
    ///
    /// # Errors
    /// The message for any other value, naming the bad element.
    pub(crate) fn string_or_list(&mut self, name: &str) -> Result<Option<Vec<String>>, String> {
        match self.take(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(vec![s])),
            Some(Value::Array(items)) => items
                .into_iter()
                .enumerate()
                .map(|(i, item)| match item {
                    Value::String(s) => Ok(s),
                    _ => Err(invalid(&format!("{name}.{i}: Input should be a valid string"))),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(_) => Err(invalid(&format!("{name}: Input should be a string or a list of strings"))),
        }
    }
}

/// The caller-facing message for invalid arguments (REST's code).
pub(crate) fn invalid(details: &str) -> String {
    format!("INVALID_ARGUMENT: Invalid arguments: {details}")
}
