//! The retrieval toolkit that `find`, context assembly, bootstrap and the
//! search pipeline share: what retrieval fails with
//! ([`RetrievalError`]), which targets a caller may search
//! ([`default_targets`], [`authorize_targets`]), the caller's checked index
//! ([`checked_index`]) and the query embeddings a search needs
//! ([`embed_queries`], [`vectors_for`]).

use crate::app::App;
use crate::embed::EmbedError;
use crate::identity::{Identity, PeerId};
use crate::index::{AccountIndex, ContextType, EmbedderInfo, IndexError, SearchKind};
use crate::store::StoreError;
use crate::uri::VikingUri;

/// What retrieval — `find`, context assembly, bootstrap and the search
/// pipeline over them — can fail with. The HTTP layer maps it to a status
/// (`api::error`): the first three are 403, a mismatched index is 503 with
/// this message, the rest are the dependency's own 503.
#[derive(Debug, thiserror::Error)]
pub enum RetrievalError {
    /// A target in another peer's tree while an actor peer is set.
    #[error("target_uri {uri} belongs to another peer than the acting peer {actor}")]
    OtherPeer {
        /// The target, `viking://~/…` resolved.
        uri: VikingUri,
        /// The acting peer.
        actor: PeerId,
    },
    /// A target outside what the caller may see.
    #[error("target_uri {0} is outside the caller's tree")]
    OutsideTree(VikingUri),
    /// An `exclude_uris` entry outside what the caller may see.
    #[error("exclude_uris names a URI outside the caller's tree")]
    ExcludeOutsideTree,
    /// The account's index was built by another embedder than the
    /// configured one.
    #[error(
        "index of account {account} was built with embedder {built} but the configured embedder is {configured}; re-ingest to switch"
    )]
    EmbedderMismatch {
        /// The account.
        account: String,
        /// The embedder the index records.
        built: EmbedderInfo,
        /// The configured embedder.
        configured: EmbedderInfo,
    },
    /// The index could not be loaded.
    #[error(transparent)]
    Index(#[from] IndexError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The embedder failed.
    #[error(transparent)]
    Embed(#[from] EmbedError),
}

fn uri(path: &str) -> VikingUri {
    VikingUri::from_path(path).expect("validated names form a valid uri")
}

/// The reference's default search targets for a context type (`None`: all
/// types), with and without an actor peer.
#[must_use]
pub fn default_targets(identity: &Identity, context_type: Option<ContextType>) -> Vec<VikingUri> {
    let root = format!("user/{}", identity.user);
    let peer = identity.actor_peer.as_ref().map(|p| format!("{root}/peers/{p}"));
    let paths: Vec<String> = match (context_type, &peer) {
        (None, None) => vec![root, "resources".into()],
        (None, Some(p)) => vec![
            "resources".into(),
            format!("{root}/memories"),
            format!("{root}/resources"),
            format!("{root}/skills"),
            format!("{p}/memories"),
            format!("{p}/resources"),
        ],
        (Some(ContextType::Memory), None) => vec![root],
        (Some(ContextType::Memory), Some(p)) => vec![format!("{root}/memories"), format!("{p}/memories")],
        (Some(ContextType::Resource), None) => vec!["resources".into(), root],
        (Some(ContextType::Resource), Some(p)) => {
            vec!["resources".into(), format!("{root}/resources"), format!("{p}/resources")]
        }
        (Some(ContextType::Skill), _) => vec![format!("{root}/skills"), "agent/skills".into()],
    };
    paths.iter().map(|p| uri(p)).collect()
}

/// The targets a request may search: each explicit target (`viking://~/…`
/// resolved to the caller's own root) that lies inside
/// what the caller may see, narrowed to the visible roots when it is an
/// ancestor of them (`viking://` → the user's tree and the shared roots).
///
/// # Errors
/// [`RetrievalError::OutsideTree`] naming the target when it is outside
/// the caller's tree; [`RetrievalError::OtherPeer`] for another peer's tree
/// while an actor peer is set.
pub fn authorize_targets(identity: &Identity, targets: &[VikingUri]) -> Result<Vec<VikingUri>, RetrievalError> {
    let roots = identity.visible_roots();
    let mut out = Vec::new();
    for target in targets {
        let target = &identity.resolve_home(target);
        if let (true, Some(actor)) = (identity.is_other_peer(target), &identity.actor_peer) {
            return Err(RetrievalError::OtherPeer { uri: target.clone(), actor: actor.clone() });
        }
        if roots.iter().any(|r| target.is_under(r)) {
            out.push(target.clone());
        } else if roots.iter().any(|r| r.is_under(target)) {
            out.extend(roots.iter().filter(|r| r.is_under(target)).cloned());
        } else {
            return Err(RetrievalError::OutsideTree(target.clone()));
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// The embeddings a search of `kind` needs for `queries`, one per query
/// in order: none are computed for keyword search (its vectors are empty).
///
/// # Errors
/// When the embedder fails.
pub async fn embed_queries(app: &App, kind: SearchKind, queries: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
    if kind.needs_vector() { app.embedder.embed_queries(queries).await } else { Ok(vec![Vec::new(); queries.len()]) }
}

/// The query embeddings `index` needs: `vectors` as [`embed_queries`]
/// computed them, and for a keyword search on S3 Vectors (whose queries
/// all need a vector: the records nearest it among those holding a query
/// term are the candidates) the embeddings it skipped.
///
/// # Errors
/// When the embedder fails.
pub async fn vectors_for(
    app: &App,
    index: &AccountIndex,
    queries: &[&str],
    vectors: Vec<Vec<f32>>,
) -> Result<Vec<Vec<f32>>, EmbedError> {
    if matches!(index, AccountIndex::Vectors { .. }) && vectors.iter().any(Vec::is_empty) && !queries.is_empty() {
        app.embedder.embed_queries(queries).await
    } else {
        Ok(vectors)
    }
}

/// The caller's account index — its loaded segments, warm when possible,
/// or its S3 Vectors index, as the manifest says — checked to be built by
/// the configured embedder.
///
/// Cost: one manifest HEAD (plus new segments when the index changed; the
/// manifest alone for an index in S3 Vectors).
///
/// # Errors
/// When the store fails ([`RetrievalError::Index`]) or the index was built
/// by another embedder ([`RetrievalError::EmbedderMismatch`]).
pub async fn checked_index(app: &App, identity: &Identity) -> Result<AccountIndex, RetrievalError> {
    let snapshot = app.index.snapshot(&identity.account).await?;
    let index = AccountIndex::open(&identity.account, snapshot, app.vector_bucket())?;
    let configured = app.embedder_info();
    if let Some(built) = index.embedder().filter(|b| **b != configured) {
        return Err(RetrievalError::EmbedderMismatch {
            account: identity.account.to_string(),
            built: built.clone(),
            configured,
        });
    }
    Ok(index)
}
