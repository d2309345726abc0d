//! The one place library errors become HTTP responses (`Error` in
//! `infra/openapi.json`): the reference's envelope, codes and statuses.

use serde::Serialize;
use serde_json::{Value, json};

use crate::content::ContentError;
use crate::embed::EmbedError;
use crate::index::IndexError;
use crate::memory::commit::CommitError;
use crate::retrieval::RetrievalError;
use crate::store::StoreError;

/// One invalid field, as the reference reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldError {
    /// Where: `["body", "<field>", …]`. Clients strip `loc[1]` and retry.
    pub loc: Vec<Value>,
    /// What is wrong (pydantic's wording where the reference has one).
    pub message: String,
    /// The pydantic error type (`extra_forbidden`, `int_type`, …).
    #[serde(rename = "type")]
    pub kind: String,
}

impl FieldError {
    /// An error on body field `field`.
    #[must_use]
    pub fn new(field: &str, kind: &str, message: impl Into<String>) -> Self {
        Self { loc: vec!["body".into(), field.into()], message: message.into(), kind: kind.to_owned() }
    }

    /// This error with an index or key appended to its location.
    #[must_use]
    pub fn at(mut self, item: impl Into<Value>) -> Self {
        self.loc.push(item.into());
        self
    }

    fn dotted_loc(&self) -> String {
        self.loc
            .iter()
            .map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect::<Vec<_>>()
            .join(".")
    }
}

/// Everything a request can fail with, mapped to status and code in
/// [`ApiError::status`] and [`ApiError::code`].
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Field validation failed: 400 `INVALID_ARGUMENT` with
    /// `details.validation_errors`.
    #[error("Invalid request parameters: {}", .0.iter().map(|e| format!("{}: {}", e.dotted_loc(), e.message)).collect::<Vec<_>>().join("; "))]
    Validation(Vec<FieldError>),
    /// A request that is well-formed but not acceptable: 400.
    #[error("{0}")]
    InvalidArgument(String),
    /// No usable credentials: 401.
    #[error("{0}")]
    Unauthenticated(String),
    /// Outside the caller's tree: 403.
    #[error("{0}")]
    PermissionDenied(String),
    /// No such thing (or route): 404.
    #[error("{0}")]
    NotFound(String),
    /// Wrong method for the route (the method sent, the one allowed): 405.
    #[error("method {0} is not allowed here; use {1}")]
    MethodNotAllowed(String, String),
    /// The body is over the limit: 413.
    #[error("request body is {size} bytes; the limit is {limit} bytes")]
    PayloadTooLarge {
        /// Bytes received.
        size: usize,
        /// The configured limit.
        limit: usize,
    },
    /// A file, an upload or an archive over its cap: 413, the message
    /// naming it and the cap.
    #[error("{0}")]
    TooLarge(String),
    /// A conflicting write: 409.
    #[error("{0}")]
    Conflict(String),
    /// Crowded out by concurrent writes, nothing applied: 429
    /// `RESOURCE_EXHAUSTED` with `Retry-After: {retry_after_s}`.
    #[error("{message}")]
    Busy {
        /// What was busy, for the client.
        message: String,
        /// Seconds the client should wait before retrying.
        retry_after_s: u64,
    },
    /// A dependency failed and nothing useful can be returned: 503.
    #[error("{0}")]
    Unavailable(String),
    /// A dependency (the store, the stored data, the embedder) failed: 503
    /// `UNAVAILABLE` with a short message saying what failed; `detail`
    /// (store keys, the SDK's error chain) goes to the log only.
    #[error("{what}")]
    Dependency {
        /// What failed, for the client: lowercase, no keys, no chains.
        what: &'static str,
        /// The library error, for the log.
        detail: String,
    },
    /// A bug: 500.
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    /// A validation error on one field.
    #[must_use]
    pub fn field(field: &str, kind: &str, message: impl Into<String>) -> Self {
        Self::Validation(vec![FieldError::new(field, kind, message)])
    }

    /// The HTTP status.
    #[must_use]
    pub fn status(&self) -> u16 {
        match self {
            Self::Validation(_) | Self::InvalidArgument(_) => 400,
            Self::Unauthenticated(_) => 401,
            Self::PermissionDenied(_) => 403,
            Self::NotFound(_) => 404,
            Self::MethodNotAllowed(..) => 405,
            Self::Conflict(_) => 409,
            Self::PayloadTooLarge { .. } | Self::TooLarge(_) => 413,
            Self::Busy { .. } => 429,
            Self::Internal(_) => 500,
            Self::Unavailable(_) | Self::Dependency { .. } => 503,
        }
    }

    /// The envelope's `error.code`.
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            Self::Validation(_) | Self::InvalidArgument(_) => "INVALID_ARGUMENT",
            Self::Unauthenticated(_) => "UNAUTHENTICATED",
            Self::PermissionDenied(_) => "PERMISSION_DENIED",
            Self::NotFound(_) => "NOT_FOUND",
            Self::MethodNotAllowed(..) => "METHOD_NOT_ALLOWED",
            Self::Conflict(_) => "CONFLICT",
            Self::PayloadTooLarge { .. } | Self::TooLarge(_) => "PAYLOAD_TOO_LARGE",
            Self::Busy { .. } => "RESOURCE_EXHAUSTED",
            Self::Internal(_) => "INTERNAL",
            Self::Unavailable(_) | Self::Dependency { .. } => "UNAVAILABLE",
        }
    }

    /// A dependency failure: `what` for the client, `detail` for the log.
    #[must_use]
    pub fn dependency(what: &'static str, detail: impl std::fmt::Display) -> Self {
        Self::Dependency { what, detail: detail.to_string() }
    }

    /// What the log gets beyond the client's message (store keys, SDK error
    /// chains), if anything.
    #[must_use]
    pub fn detail(&self) -> Option<&str> {
        match self {
            Self::Dependency { detail, .. } => Some(detail),
            _ => None,
        }
    }

    /// The envelope: `{"status":"error","error":{code,message,details?,request_id?}}`
    /// (`request_id` when the request has one: see
    /// [`super::request_id`]).
    #[must_use]
    pub fn body(&self) -> Value {
        let mut error = json!({ "code": self.code(), "message": self.to_string() });
        if let Self::Validation(errors) = self {
            error["details"] = json!({ "validation_errors": errors });
        }
        if let Some(id) = super::request_id() {
            error["request_id"] = Value::String(id);
        }
        json!({ "status": "error", "error": error })
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            // A key a route derived itself is missing: the store changed
            // underneath (a client's own 404s are decided before this).
            StoreError::NotFound(_) => Self::dependency("stored data is missing or changing; retry", e),
            StoreError::Conflict(_) => Self::Conflict("a concurrent update won; retry".into()),
            StoreError::InvalidKey(_) => Self::InvalidArgument("the path is not a valid store path".into()),
            StoreError::Backend { .. } => Self::dependency("the store is unavailable; retry", e),
        }
    }
}

impl From<IndexError> for ApiError {
    fn from(e: IndexError) -> Self {
        match e {
            IndexError::Store(s) => s.into(),
            IndexError::EmbedderMismatch { .. } => Self::Unavailable(e.to_string()),
            IndexError::Contention(_) => Self::dependency("the index is busy; retry", e),
            IndexError::SegmentMissing { .. } => Self::dependency("the index is being rewritten; retry", e),
            IndexError::Corrupt(_) => Self::dependency("the index data is unreadable", e),
            IndexError::Vectors { .. } => Self::dependency("the vector index is unavailable; retry", e),
            IndexError::VectorsUnavailable(_) => Self::Unavailable(e.to_string()),
            IndexError::Moved(_) => Self::dependency("the index is being migrated; retry", e),
            IndexError::OutcomeUnknown(_) => Self::dependency("the index is busy; retry", e),
        }
    }
}

impl From<ContentError> for ApiError {
    fn from(e: ContentError) -> Self {
        match e {
            ContentError::NotFound { .. } => Self::NotFound(e.to_string()),
            ContentError::IsDirectory(_) | ContentError::NotDirectory(_) => Self::InvalidArgument(e.to_string()),
            ContentError::Forbidden(_) => Self::PermissionDenied(e.to_string()),
            ContentError::Store(s) => s.into(),
            ContentError::Index(i) => i.into(),
        }
    }
}

impl From<RetrievalError> for ApiError {
    fn from(e: RetrievalError) -> Self {
        match e {
            RetrievalError::OtherPeer { .. } | RetrievalError::OutsideTree(_) | RetrievalError::ExcludeOutsideTree => {
                Self::PermissionDenied(e.to_string())
            }
            RetrievalError::EmbedderMismatch { .. } => Self::Unavailable(e.to_string()),
            RetrievalError::Index(i) => i.into(),
            RetrievalError::Store(s) => s.into(),
            RetrievalError::Embed(x) => x.into(),
        }
    }
}

impl From<CommitError> for ApiError {
    fn from(e: CommitError) -> Self {
        match e {
            CommitError::NotFound(id) => Self::NotFound(format!("Session not found: {}", id.as_str())),
            CommitError::Memories(why) => {
                Self::dependency("the conversation's memories could not be written; retry the commit", why)
            }
            CommitError::Session(s) => s.into(),
        }
    }
}

impl From<EmbedError> for ApiError {
    fn from(e: EmbedError) -> Self {
        Self::dependency("the embedder is unavailable; retry", e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_errors_render_as_the_reference() {
        let err = ApiError::Validation(vec![
            FieldError::new("mode", "extra_forbidden", "Extra inputs are not permitted"),
            FieldError::new("tags", "value_error", "Value error, bad tag").at(1),
        ]);
        assert_eq!(err.status(), 400);
        let body = err.body();
        assert_eq!(
            body["error"]["message"],
            "Invalid request parameters: body.mode: Extra inputs are not permitted; body.tags.1: Value error, bad tag"
        );
        assert_eq!(body["error"]["code"], "INVALID_ARGUMENT");
        assert_eq!(body["error"]["details"]["validation_errors"][0]["loc"], json!(["body", "mode"]));
        assert_eq!(body["error"]["details"]["validation_errors"][1]["type"], "value_error");
        assert_eq!(body["status"], "error");
    }

    #[test]
    fn other_errors_have_no_details() {
        let err = ApiError::PayloadTooLarge { size: 300_000, limit: 262_144 };
        assert_eq!((err.status(), err.code()), (413, "PAYLOAD_TOO_LARGE"));
        assert!(err.body()["error"].get("details").is_none());
    }

    #[test]
    fn dependency_failures_tell_the_client_what_failed_and_keep_keys_for_the_log() {
        let err = ApiError::from(StoreError::Backend {
            op: "get",
            key: "accounts/acme/index/manifest.json".into(),
            message: "dispatch failure: io error: connection reset".into(),
        });
        assert_eq!((err.status(), err.code()), (503, "UNAVAILABLE"));
        let body = err.body().to_string();
        assert!(!body.contains("accounts/acme") && !body.contains("dispatch"), "{body}");
        assert!(err.detail().is_some_and(|d| d.contains("accounts/acme/index/manifest.json")));
        let missing = ApiError::from(IndexError::SegmentMissing { account: "acme".into(), key: "k.seg".into() });
        assert_eq!(missing.status(), 503);
        assert!(!missing.body().to_string().contains("k.seg"));
        assert_eq!(ApiError::from(StoreError::NotFound("k".into())).status(), 503);
        assert_eq!(
            ApiError::from(StoreError::Conflict("k".into())).body()["error"]["message"],
            "a concurrent update won; retry"
        );
    }
}
