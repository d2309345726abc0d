//! The tasks routes (served by the `sessions` function), shapes as the
//! reference:
//!
//! - `GET /api/v1/tasks/{id}` — one of the caller's tasks (a commit's
//!   `task_id`): what became of the conversation
//! - `GET /api/v1/tasks?task_type=&status=&resource_id=&limit=50` — the
//!   caller's tasks, newest first
//!
//! Tasks live under their owner ([`crate::memory::tasks`]), so another
//! user's task id is simply not found (404).

use bytes::Bytes;
use http::{Method, Request, Response};
use serde_json::Value;

use super::error::ApiError;
use super::fields::Query;
use super::payload::respond;
use super::{Admitted, admit_method, error_response, within_deadline};
use crate::app::App;
use crate::memory::tasks::{self, TaskStatus};

/// The path every tasks route starts with.
pub const PREFIX: &str = "/api/v1/tasks";

/// The statuses a task can be in, as `status` filters them.
const STATUSES: &[&str] = &["pending", "running", "completed", "failed"];

/// The route a path names.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    List,
    Get(String),
}

fn route(method: &Method, path: &str) -> Result<Route, ApiError> {
    let rest = path.trim_end_matches('/').strip_prefix("/api/v1/tasks").unwrap_or("\u{0}");
    let parts: Vec<&str> = rest.split('/').skip(1).collect();
    let want = |m: &Method, r: Route| {
        if method == m { Ok(r) } else { Err(ApiError::MethodNotAllowed(method.to_string(), m.to_string())) }
    };
    match (rest, parts.as_slice()) {
        ("", _) => want(&Method::GET, Route::List),
        (_, [id]) => want(&Method::GET, Route::Get((*id).to_owned())),
        _ => Err(ApiError::NotFound(format!("no route {method} {path}"))),
    }
}

/// Handles every tasks route.
pub async fn handle(app: &App, request: Request<Bytes>) -> Response<String> {
    let route = match route(request.method(), request.uri().path()) {
        Ok(r) => r,
        Err(e) => return error_response(&e),
    };
    let admitted = match admit_method(app, &request, &Method::GET).await {
        Ok(a) => a,
        Err(e) => return error_response(&e),
    };
    let query = Query::parse(request.uri().query());
    match within_deadline(&admitted.deadline, run(app, &admitted, route, query)).await {
        Ok(result) => respond(result, None, false),
        Err(e) => error_response(&e),
    }
}

async fn run(app: &App, admitted: &Admitted<'_>, route: Route, mut query: Query) -> Result<Value, ApiError> {
    match route {
        Route::Get(task_id) => {
            query.finish()?;
            let task = tasks::get(&app.store, &admitted.identity, &task_id)
                .await?
                .ok_or_else(|| ApiError::NotFound(format!("Task not found or expired: {task_id}")))?;
            Ok(serde_json::to_value(&task).unwrap_or(Value::Null))
        }
        Route::List => {
            let task_type = query.literal("task_type", &["session_commit"]);
            let status = query.literal("status", STATUSES).and_then(|text| TaskStatus::parse(&text));
            let resource_id = query.raw("resource_id").map(str::to_owned);
            if let Some(id) = &resource_id
                && let Err(e) = crate::sessions::SessionId::new(id)
            {
                query.value_error("resource_id", &e);
            }
            let limit = query.int("limit", Some(1), Some(1000)).unwrap_or(50);
            query.finish()?;
            let listed = tasks::list(
                &app.store,
                &admitted.identity,
                task_type.as_deref(),
                status,
                resource_id.as_deref(),
                usize::try_from(limit).unwrap_or(50),
            )
            .await?;
            Ok(serde_json::to_value(&listed).unwrap_or(Value::Null))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_to_routes() {
        let get = Method::GET;
        assert_eq!(route(&get, "/api/v1/tasks").ok(), Some(Route::List));
        assert_eq!(route(&get, "/api/v1/tasks/").ok(), Some(Route::List));
        assert_eq!(route(&get, "/api/v1/tasks/abc").ok(), Some(Route::Get("abc".into())));
        assert!(matches!(route(&get, "/api/v1/tasks/a/b"), Err(ApiError::NotFound(_))));
        assert!(matches!(route(&Method::POST, "/api/v1/tasks/abc"), Err(ApiError::MethodNotAllowed(..))));
    }
}
