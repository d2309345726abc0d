//! List mode: `find`, or `find` over an expanded query plan.

use super::session::{expand_query, load_session};
use super::{ListParams, ListResult, RetrievalError, expansion_enabled, with_planned_embeddings};
use crate::app::App;
use crate::deadline::Deadline;
use crate::find::{find, find_over};
use crate::identity::Identity;
use crate::llm::expansion::ExpansionStatus;
use crate::retrieval::{authorize_targets, checked_index, embed_queries, vectors_for};

/// Runs list mode: exactly `find`, unless a session with context is given
/// and a model is configured; then the query is expanded (the same bounded
/// stage as context mode), every planned query searches too, hits merge by
/// node, and the result adds the reference's `query_plan`. A failed or late
/// expansion falls back to plain `find`. `now` (Unix seconds) is the
/// request's.
///
/// Cost: as `find`; with a session and a model, the session read (the
/// meta, the last messages and the latest archive overview) overlapping
/// the index revalidation and the original query's embedding, one bounded
/// model call, and one embedding call and one scan per planned query.
///
/// # Errors
/// [`RetrievalError::OutsideTree`] or [`RetrievalError::OtherPeer`] for a
/// target the caller may not search; the dependencies' errors otherwise.
pub async fn list(
    app: &App,
    identity: &Identity,
    params: &ListParams,
    now: i64,
    deadline: &Deadline,
) -> Result<ListResult, RetrievalError> {
    let mut find_params = params.find.clone();
    if !find_params.targets.is_empty() {
        find_params.targets = authorize_targets(identity, &find_params.targets)?;
    }
    let session = match &params.session_id {
        Some(id) if expansion_enabled(app, true) => id,
        _ => return Ok(ListResult { found: find(app, identity, &find_params, now).await?, query_plan: None }),
    };
    // The session read, the index revalidation and the original query's
    // embedding go out together.
    let original = [find_params.query.as_str()];
    let (loaded, index, original) = tokio::join!(
        load_session(app, identity, session, 0, true),
        checked_index(app, identity),
        embed_queries(app, find_params.search_kind, &original),
    );
    let (index, original) = (index?, original?);
    let expansion = expand_query(app, &loaded, &find_params.query, deadline).await;
    let plan = expansion.plan.as_ref().filter(|_| expansion.status == ExpansionStatus::Used);
    if plan.is_none()
        && let Some(error) = &expansion.error
    {
        tracing::warn!(status = expansion.status.as_str(), error, "list-mode query expansion fell back to find");
    }
    // A failed or late expansion searches the original query alone: `find`.
    let queries: Vec<&str> = match plan {
        Some(_) => expansion.queries.iter().map(String::as_str).collect(),
        None => vec![find_params.query.as_str()],
    };
    let vectors =
        with_planned_embeddings(app, find_params.search_kind, (&find_params.query, original), &queries).await?;
    let vectors = vectors_for(app, &index, &queries, vectors).await?;
    let found = find_over(app, identity, &find_params, &queries, &index, &vectors, now).await?;
    Ok(ListResult { found, query_plan: plan.cloned() })
}
