//! `POST /api/v1/search/bootstrap`: a thin preset — exactly the search
//! route's `mode = "bootstrap"` path, with the mode fixed.

use bytes::Bytes;
use http::{Request, Response};
use serde_json::Value;

use super::error::ApiError;
use super::fields::Body;
use super::search::{Mode, all_fields, parse_fields};
use super::{Admitted, admit, error_response, ok, result_json, telemetry, within_deadline};
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
    let mut body = Body::parse(admitted.body, &all_fields())?;
    if body.contains("mode") {
        return Err(ApiError::field("mode", "extra_forbidden", "Extra inputs are not permitted"));
    }
    let request = parse_fields(&mut body, Some(Mode::Bootstrap), admitted.now, &app.config.retrieval.purpose_profiles);
    body.finish()?;
    let telemetry = request.common.telemetry;
    let result = crate::pipeline::bootstrap(app, &admitted.identity, &request.into_bootstrap(admitted.now)).await?;
    Ok((result_json(&result)?, telemetry))
}
