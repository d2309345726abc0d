//! What context and list mode read of a session before retrieval, and the
//! expansion stage over it.

use std::time::{Duration, Instant};

use crate::app::App;
use crate::config::RetrievalConfig;
use crate::deadline::Deadline;
use crate::identity::Identity;
use crate::ledger::Ledger;
use crate::llm::expansion::{self, Expansion, ExpansionStatus, RECENT_MESSAGES, SessionContext};
use crate::sessions::{SessionId, Sessions};

/// What context and list mode read of a session before retrieval.
pub(super) struct LoadedSession<'a> {
    /// The dedup ledger (only with `dedup_turns > 0`, and only when the
    /// session's turn clock could be read).
    pub(super) ledger: Option<Ledger<'a>>,
    /// The ledger was asked for but the session's meta could not be read:
    /// the request goes on without dedup (`stats.dedup.status =
    /// write_failed`).
    pub(super) ledger_failed: bool,
    /// The context for the LLM stages (empty unless asked for).
    pub(super) context: SessionContext,
    /// Why the context could not be read (the stages then fail softly).
    pub(super) context_error: Option<String>,
}

/// Reads what a request needs of its session: three chains at once — the
/// meta then the last messages, the ledger, the archive listing then its
/// overview — so at most two store round trips in a row.
///
/// Never fails: a meta that cannot be read (unreachable, corrupt) leaves
/// the request without dedup ([`LoadedSession::ledger_failed`]), and a
/// context that cannot be read is reported in
/// [`LoadedSession::context_error`].
pub(super) async fn load_session<'a>(
    app: &'a App,
    identity: &Identity,
    id: &SessionId,
    dedup_turns: u32,
    want_context: bool,
) -> LoadedSession<'a> {
    let sessions = Sessions::new(&app.store, identity);
    let ledger_key = sessions.ledger_key(id);
    let want_ledger = dedup_turns > 0;
    let meta_then_messages = async {
        let meta = sessions.meta(id).await?.map(|(meta, _)| meta);
        let messages = match &meta {
            Some(meta) if want_context => Some(sessions.recent_messages(id, meta, RECENT_MESSAGES).await),
            _ => None,
        };
        Ok::<_, crate::sessions::SessionError>((meta, messages))
    };
    let (first, ledger_read, archive) = tokio::join!(
        meta_then_messages,
        async { if want_ledger { Some(app.store.get(&ledger_key).await) } else { None } },
        async { if want_context { Some(sessions.latest_archive_overview(id).await) } else { None } },
    );
    let mut context_error = None;
    let mut meta_failed = false;
    let mut context = SessionContext::default();
    let meta = match first {
        Ok((meta, messages)) => {
            match messages {
                Some(Ok(messages)) => {
                    context.messages = messages.iter().map(|m| (m.role.clone(), m.text())).collect();
                }
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "session messages unreadable");
                    context_error = Some("the session's messages could not be read".to_owned());
                }
                None => {}
            }
            meta
        }
        Err(e) => {
            tracing::warn!(error = %e, "session meta unreadable; serving without its turn clock");
            context_error = Some("the session's meta could not be read".to_owned());
            meta_failed = true;
            None
        }
    };
    let ledger_failed = want_ledger && meta_failed;
    match archive {
        Some(Ok(found)) => context.overview = found.map(|(_, text)| text),
        Some(Err(e)) => {
            tracing::warn!(error = %e, "session archive unreadable");
            context_error = Some("the session's archive could not be read".to_owned());
        }
        None => {}
    }
    let ledger = ledger_read.filter(|_| !ledger_failed).map(|read| {
        let turn = meta.as_ref().map_or(0, |m| m.user_turn_count);
        Ledger::from_read(&app.store, ledger_key, read, turn, u64::from(dedup_turns))
    });
    LoadedSession { ledger, ledger_failed, context, context_error }
}

/// The expansion stage for `query`, bounded by the deadline: `off` without
/// session context, `failed` when the context could not be read.
///
/// Cost: at most one model call, within `retrieval.recall_intent_timeout_s`
/// and the time the deadline leaves after two stage reserves.
pub(super) async fn expand_query(app: &App, loaded: &LoadedSession<'_>, query: &str, deadline: &Deadline) -> Expansion {
    if let Some(error) = &loaded.context_error {
        return Expansion::original(query, ExpansionStatus::Failed, Some(format!("session context: {error}")));
    }
    let Some(model) = app.models.stage_model().filter(|_| !loaded.context.is_empty()) else {
        return Expansion::original(query, ExpansionStatus::Off, None);
    };
    let retrieval = &app.config.retrieval;
    let cap = RetrievalConfig::seconds(retrieval.recall_intent_timeout_s);
    // Retrieval and the answer still follow expansion: keep two reserves.
    let reserve = Duration::from_millis(retrieval.stage_reserve_ms.saturating_mul(2));
    let budget = deadline.stage_budget(Instant::now(), cap, reserve);
    expansion::expand(model.as_ref(), &loaded.context, query, budget).await
}
