//! `POST /api/v1/search/bootstrap`: a thin preset — exactly the search
//! route's `mode = "bootstrap"` path, with `mode` filled in.

use bytes::Bytes;
use http::{Request, Response};
use serde_json::Value;

use super::error::ApiError;
use super::search::{bootstrap, parse};
use super::{Admitted, admit, error_response, ok, telemetry, within_deadline};
use crate::app::App;

/// Handles one bootstrap request.
pub async fn handle(app: &App, request: Request<Bytes>) -> Response<String> {
    let admitted = match admit(app, &request).await {
        Ok(a) => a,
        Err(e) => return error_response(&e),
    };
    match within_deadline(&admitted.deadline, run(app, &admitted)).await {
        Ok((result, wants_telemetry)) => ok(result, telemetry(wants_telemetry, "search.bootstrap", admitted.started)),
        Err(e) => error_response(&e),
    }
}

async fn run(app: &App, admitted: &Admitted<'_>) -> Result<(Value, bool), ApiError> {
    let mut map = super::fields::json_object(admitted.body)?;
    if map.contains_key("mode") {
        return Err(ApiError::field("mode", "extra_forbidden", "Extra inputs are not permitted"));
    }
    map.insert("mode".into(), Value::String("bootstrap".into()));
    let bytes = serde_json::to_vec(&map).map_err(|e| ApiError::Internal(e.to_string()))?;
    let request = parse(&bytes, admitted.now, &app.config.retrieval.purpose_profiles)?;
    let result = bootstrap(app, &admitted.identity, &request, admitted.now).await?;
    Ok((result, request.common.telemetry))
}
