//! Context mode: the session read, query expansion, the assembly line, the
//! digest rewrite and the ledger write.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use super::session::{LoadedSession, expand_query, load_session};
use super::{
    ContextParams, ContextResult, ContextStats, RetrievalError, Rewrite, expansion_enabled, with_planned_embeddings,
};
use crate::app::App;
use crate::assemble::{Assembled, assemble, assemble_over};
use crate::config::RetrievalConfig;
use crate::deadline::Deadline;
use crate::identity::Identity;
use crate::index::Exclusion;
use crate::ledger::DedupStatus;
use crate::llm::expansion::{Expansion, ExpansionStatus, SessionContext};
use crate::llm::rewrite::{self, RewriteStatus, Rewritten};
use crate::retrieval::{authorize_targets, checked_index, embed_queries};

/// Runs context mode: authorises `exclude_uris`, reads the session (ledger
/// and context) when one is given, expands the query, assembles (with the
/// reranker, when one is configured, within the deadline), rewrites,
/// records the ledger, and reports what each step did. The LLM stages and
/// the ledger write never fail the request and never run past `deadline`.
///
/// Cost: the assembly line's (one embedding call, the searches, the
/// planned reads; with a reranker, one bounded call); with a session that
/// needs it, the session read overlapping the index revalidation and the
/// original query's embedding;
/// at most two bounded model calls; with `dedup_turns`, one conditional
/// write of the ledger.
///
/// # Errors
/// [`RetrievalError::ExcludeOutsideTree`] for an `exclude_uris` entry
/// outside the caller's tree; the dependencies' errors otherwise.
pub async fn context(
    app: &App,
    identity: &Identity,
    params: &ContextParams,
    deadline: &Deadline,
) -> Result<ContextResult, RetrievalError> {
    authorize_targets(identity, &params.assemble.exclude).map_err(|_| RetrievalError::ExcludeOutsideTree)?;
    let subtrees = params.assemble.exclude.iter().map(|uri| identity.resolve_home(uri)).collect();
    let mut exclusion = Exclusion { subtrees, ..Exclusion::default() };
    let query = params.query.as_str();
    let wants_expansion = expansion_enabled(app, params.query_expansion);
    let wants_rewrite = match params.rewrite {
        Rewrite::Off => false,
        Rewrite::On => true,
        Rewrite::Auto => app.models.has_query_planner(),
    };
    let (loaded, prepared) = match &params.session_id {
        Some(id) if params.dedup_turns > 0 || wants_expansion || wants_rewrite => {
            // The index revalidation and the original query's embedding
            // need neither the session nor the plan: they go out with the
            // session read.
            let original = [query];
            let (loaded, index, original) = tokio::join!(
                load_session(app, identity, id, params.dedup_turns, wants_expansion || wants_rewrite),
                checked_index(app, identity),
                embed_queries(app, params.assemble.search_kind, &original),
            );
            (Some(loaded), Some((index?, original?)))
        }
        _ => (None, None),
    };
    let expansion = match &loaded {
        Some(loaded) if wants_expansion => expand_query(app, loaded, query, deadline).await,
        _ => Expansion::original(query, ExpansionStatus::Off, None),
    };
    let ledger = loaded.as_ref().and_then(|l| l.ledger.as_ref());
    if let Some(ledger) = ledger {
        exclusion.exact = ledger.cooled_uris();
    }
    let mut assemble_params = params.assemble.clone();
    assemble_params.queries.clone_from(&expansion.queries);
    if app.reranker.is_some() {
        let cap = RetrievalConfig::seconds(app.config.retrieval.rerank_timeout_s);
        let reserve = Duration::from_millis(app.config.retrieval.stage_reserve_ms);
        assemble_params.rerank_within = deadline.stage_budget(Instant::now(), cap, reserve);
    }
    let mut assembled = match prepared {
        Some((index, original)) => {
            let queries: Vec<&str> = assemble_params.queries.iter().map(String::as_str).collect();
            let vectors =
                with_planned_embeddings(app, params.assemble.search_kind, (query, original), &queries).await?;
            assemble_over(app, identity, &assemble_params, &exclusion, &index, vectors).await?
        }
        None => assemble(app, identity, &assemble_params, &exclusion).await?,
    };
    let empty = SessionContext::default();
    let session_context = loaded.as_ref().map_or(&empty, |l| &l.context);
    let rewritten = if wants_rewrite {
        rewrite_block(app, params, &assembled, session_context, deadline).await
    } else {
        Rewritten::without_digest(RewriteStatus::Off, None)
    };
    if rewritten.status == RewriteStatus::NoRelevant {
        assembled.rendered.clear();
    }
    for (stage, status, error) in [
        ("query expansion", expansion.status.as_str(), &expansion.error),
        ("rewrite", rewritten.status.as_str(), &rewritten.error),
    ] {
        if let Some(error) = error {
            tracing::warn!(stage, status, error, "llm stage degraded; the block is served without it");
        }
    }
    let dedup = record_ledger(loaded.as_ref(), params, &assembled, &rewritten, deadline).await;
    let Assembled { entries, rendered, stats } = assembled;
    let planned_queries = expansion.planned().to_vec();
    let stats = ContextStats {
        assembly: stats,
        query_expansion: expansion.status,
        planned_queries,
        query_expansion_error: expansion.error,
        rewrite: rewritten.status,
        rewrite_usage: rewritten.usage,
        rewrite_error: rewritten.error,
        dedup,
        ignored: params.ignored.clone(),
        deprecated: None,
    };
    Ok(ContextResult { entries, rendered, digest: rewritten.digest, stats })
}

/// Records the served entries in the ledger (unless the rewrite found
/// nothing relevant: nothing was injected), within the deadline's soft
/// stop, and says what happened as `stats.dedup`.
async fn record_ledger(
    loaded: Option<&LoadedSession<'_>>,
    params: &ContextParams,
    assembled: &Assembled,
    rewritten: &Rewritten,
    deadline: &Deadline,
) -> DedupStatus {
    let turns = u64::from(params.dedup_turns);
    let ledger_failed = loaded.is_some_and(|l| l.ledger_failed);
    match loaded.and_then(|l| l.ledger.as_ref()) {
        None if ledger_failed => DedupStatus { status: "write_failed", ..DedupStatus::off(turns) },
        None => DedupStatus::off(turns),
        Some(ledger) => {
            let status = if rewritten.status == RewriteStatus::NoRelevant {
                // Nothing was injected: nothing is recorded.
                ledger.status
            } else {
                let served: Vec<(String, String)> = assembled
                    .entries
                    .iter()
                    .map(|e| (e.candidate.uri.to_string(), e.tier.as_str().to_owned()))
                    .collect();
                let until = tokio::time::Instant::from_std(deadline.soft_stop());
                tokio::time::timeout_at(until, ledger.record(&served)).await.unwrap_or("write_failed")
            };
            DedupStatus { turns, status, cooled: ledger.cooled.len(), turn: Some(ledger.turn()) }
        }
    }
}

/// The rewrite stage over the assembled block, bounded by the deadline.
///
/// Cost: at most one model call, within `retrieval.recall_rewrite_timeout_s`
/// and the time the deadline leaves after a stage reserve.
async fn rewrite_block(
    app: &App,
    params: &ContextParams,
    assembled: &Assembled,
    context: &SessionContext,
    deadline: &Deadline,
) -> Rewritten {
    let Some(model) = app.models.stage_model() else {
        return Rewritten::without_digest(RewriteStatus::Failed, Some("no model is configured for the rewrite".into()));
    };
    let uris: Vec<String> = assembled.entries.iter().map(|e| e.candidate.uri.to_string()).collect();
    let served: HashSet<&str> = uris.iter().map(String::as_str).collect();
    let slice = rewrite::session_slice(context, &served);
    let cap = RetrievalConfig::seconds(app.config.retrieval.recall_rewrite_timeout_s);
    let reserve = Duration::from_millis(app.config.retrieval.stage_reserve_ms);
    let budget = deadline.stage_budget(Instant::now(), cap, reserve);
    rewrite::rewrite(
        model.as_ref(),
        &params.query,
        &assembled.rendered,
        &slice,
        params.rewrite_max_bullets,
        &served,
        budget,
    )
    .await
}
