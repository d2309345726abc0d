//! Candidate providers over an account's index: flat (one cross-domain
//! search per query, merged by URI) and bucketed (one search per quota
//! bucket over its own subtree). The query vectors are given; the searches
//! go out together (in memory on segments, concurrent queries on S3
//! Vectors). Other peers' memories (`peer_scope = all`) are searched
//! separately, over-fetched and penalised; `profile.md` never appears.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

use super::candidate::{Candidate, Origin};
use super::neighbours;
use super::params::{AssembleParams, OTHER_PEER_OVERFETCH, PeerScope};
use super::{Named, Origins};
use crate::identity::Identity;
use crate::index::account::IndexStats;
use crate::index::filter::FilterExpr;
use crate::index::lexical::query_terms;
use crate::index::{
    AccountIndex, Category, ContextType, Exclusion, Filter, IndexError, Record, SearchKind, SearchParams, Searched,
};
use crate::uri::VikingUri;

/// What the providers found.
#[derive(Debug, Clone, Default)]
pub struct Gathered {
    /// Candidates, best first.
    pub candidates: Vec<Candidate>,
    /// Hits per bucket (`all` in flat mode), before quotas or limit.
    pub searched: Named<usize>,
    /// Hits left out by `exclude_uris` or the ledger.
    pub excluded: usize,
    /// How the searches went on an S3 Vectors index (`None` on segments).
    pub index: Option<IndexStats>,
}

/// Candidates per origin, as `stats.origins`.
#[must_use]
pub fn origins_of(candidates: &[Candidate]) -> Origins {
    let count = |o: Origin| candidates.iter().filter(|c| c.origin == o).count();
    Origins { actor_peer: count(Origin::ActorPeer), own: count(Origin::Own), other_peer: count(Origin::OtherPeer) }
}

fn uri(text: &str) -> VikingUri {
    VikingUri::from_path(text).expect("validated names form a valid uri")
}

/// Where `record` sits relative to the caller.
#[must_use]
pub fn origin_of(identity: &Identity, record_uri: &VikingUri) -> Origin {
    let mut segs = record_uri.segments();
    match (segs.next(), segs.next(), segs.next(), segs.next()) {
        (Some("user"), Some(u), Some("peers"), Some(peer)) if u == identity.user.as_str() => {
            if identity.actor_peer.as_ref().is_some_and(|a| a.as_str() == peer) {
                Origin::ActorPeer
            } else {
                Origin::OtherPeer
            }
        }
        _ => Origin::Own,
    }
}

/// One search scope: targets, exclusions, types and an extra condition.
struct Scope {
    targets: Vec<VikingUri>,
    not_under: Vec<VikingUri>,
    context_types: Vec<ContextType>,
    category: Option<Category>,
    want: usize,
}

fn root(identity: &Identity) -> String {
    format!("user/{}", identity.user)
}

fn actor_tree(identity: &Identity) -> Option<String> {
    identity.actor_peer.as_ref().map(|p| format!("{}/peers/{p}", root(identity)))
}

/// The scope of the caller's own nodes (and the acting peer's) in flat mode:
/// its memories, resources and skills and both shared roots.
fn own_scope(identity: &Identity, want: usize) -> Scope {
    let r = root(identity);
    let mut targets: Vec<VikingUri> = [
        format!("{r}/memories"),
        format!("{r}/resources"),
        format!("{r}/skills"),
        "resources".into(),
        "agent/skills".into(),
    ]
    .iter()
    .map(|p| uri(p))
    .collect();
    targets.extend(actor_tree(identity).map(|a| uri(&a)));
    Scope { targets, not_under: Vec::new(), context_types: Vec::new(), category: None, want }
}

/// Other peers' memories (`peer_scope = all`), over-fetched.
fn other_peers_scope(identity: &Identity, category: Option<Category>, want: usize) -> Scope {
    Scope {
        targets: vec![uri(&format!("{}/peers", root(identity)))],
        not_under: actor_tree(identity).map(|a| uri(&a)).into_iter().collect(),
        context_types: vec![ContextType::Memory],
        category,
        want: want.saturating_mul(OTHER_PEER_OVERFETCH).max(want),
    }
}

/// The subtree of one quota bucket (the caller's and the acting peer's).
fn bucket_scope(identity: &Identity, bucket: Category, want: usize) -> Scope {
    let r = root(identity);
    let actor = actor_tree(identity);
    let paths: Vec<String> = match bucket {
        Category::Resources => {
            let mut p = vec!["resources".to_owned(), format!("{r}/resources")];
            p.extend(actor.map(|a| format!("{a}/resources")));
            p
        }
        Category::Skills => vec![format!("{r}/skills"), "agent/skills".to_owned()],
        memory => {
            let mut p = vec![format!("{r}/memories/{}", memory.as_str())];
            p.extend(actor.map(|a| format!("{a}/memories/{}", memory.as_str())));
            p
        }
    };
    Scope {
        targets: paths.iter().map(|p| uri(p)).collect(),
        not_under: Vec::new(),
        context_types: Vec::new(),
        category: Some(bucket),
        want,
    }
}

fn is_profile(record: &Record) -> bool {
    record.context_type == ContextType::Memory && record.uri.file_name() == Some("profile.md")
}

/// The searches of one request: the caller, the parameters, the query
/// vectors and their terms.
struct Searcher<'a> {
    identity: &'a Identity,
    params: &'a AssembleParams,
    vectors: &'a [Vec<f32>],
    /// Each query's keyword terms, in the order of `vectors`.
    terms: &'a [Vec<String>],
}

impl Searcher<'_> {
    /// The filter `scope` searches with.
    fn filter(&self, scope: &Scope) -> Filter {
        let (identity, params) = (self.identity, self.params);
        let category_expr = scope
            .category
            .map(|c| FilterExpr::Must(crate::index::filter::Field::Category, vec![c.as_str().to_owned()]));
        let expr = match (params.expr.clone(), category_expr) {
            (Some(a), Some(b)) => Some(FilterExpr::And(vec![a, b])),
            (a, b) => a.or(b),
        };
        // The caller's profile is never a candidate (other peers' profiles are
        // dropped below; their scope is over-fetched).
        let mut not_under = scope.not_under.clone();
        not_under.push(uri(&format!("{}/memories/profile.md", root(identity))));
        not_under.extend(actor_tree(identity).map(|a| uri(&format!("{a}/memories/profile.md"))));
        Filter {
            targets: scope.targets.clone(),
            not_under,
            context_types: scope.context_types.clone(),
            levels: Vec::new(),
            tags: params.tags.clone(),
            time: params.time,
            expr,
        }
    }

    /// One search per query vector for `scope` under `filter`.
    fn requests<'r>(&'r self, scope: &Scope, filter: &'r Filter) -> impl Iterator<Item = SearchParams<'r>> {
        let no_terms: &'r [String] = &[];
        let (params, want) = (self.params, scope.want);
        self.vectors.iter().enumerate().map(move |(k, vector)| SearchParams {
            kind: params.search_kind,
            vector,
            terms: self.terms.get(k).map_or(no_terms, Vec::as_slice),
            filter,
            // A directory has two records (abstract and overview) that
            // merge into one candidate: fetch enough for `want` nodes.
            limit: want.saturating_mul(2),
            score_threshold: Some(params.score_threshold),
            decay: None,
        })
    }

    /// A scope's hits (one list per query vector) merged by URI (best
    /// score), as candidates of category `bucket` (or their own).
    fn candidates(&self, found: Vec<Searched<'_>>, bucket: Option<Category>) -> Vec<Candidate> {
        let (identity, params) = (self.identity, self.params);
        let mut merged: BTreeMap<(VikingUri, Option<u32>), Candidate> = BTreeMap::new();
        for hit in found.into_iter().flat_map(|f| f.hits).filter(|h| !is_profile(&h.record)) {
            let origin = origin_of(identity, &hit.record.uri);
            let category = bucket.unwrap_or(hit.record.category);
            let penalty =
                if origin == Origin::OtherPeer { params.penalties.get(&category).copied().unwrap_or(0.0) } else { 0.0 };
            let candidate = Candidate::from_record(&hit.record, hit.score, hit.score - penalty, origin, category);
            match merged.entry(candidate.key()) {
                Entry::Vacant(slot) => {
                    slot.insert(candidate);
                }
                Entry::Occupied(mut slot) if slot.get().score < candidate.score => {
                    slot.insert(candidate);
                }
                Entry::Occupied(_) => {}
            }
        }
        merged.into_values().collect()
    }
}

/// Best first: rank score, then origin (acting peer, own, other peers),
/// then URI and passage, so equal inputs give equal orders. A file whose
/// own passage ranks above it goes: the passage speaks for it.
fn sort(candidates: &mut Vec<Candidate>) {
    candidates.sort_by(|a, b| {
        b.rank_score
            .total_cmp(&a.rank_score)
            .then(a.origin.cmp(&b.origin))
            .then_with(|| a.uri.cmp(&b.uri))
            .then_with(|| a.span.map(|s| s.start).cmp(&b.span.map(|s| s.start)))
    });
    let mut passed: std::collections::HashSet<VikingUri> = std::collections::HashSet::new();
    candidates.retain(|c| {
        if c.span.is_some() {
            passed.insert(c.uri.clone());
            true
        } else {
            !passed.contains(&c.uri)
        }
    });
}

/// Merges lists by node (and passage), keeping the higher score.
fn merge(lists: Vec<Vec<Candidate>>) -> Vec<Candidate> {
    let mut merged: BTreeMap<(VikingUri, Option<u32>), Candidate> = BTreeMap::new();
    for candidate in lists.into_iter().flatten() {
        match merged.entry(candidate.key()) {
            Entry::Vacant(slot) => {
                slot.insert(candidate);
            }
            Entry::Occupied(mut slot) if slot.get().rank_score < candidate.rank_score => {
                slot.insert(candidate);
            }
            Entry::Occupied(_) => {}
        }
    }
    merged.into_values().collect()
}

/// Gathers candidates for `params` (flat, or bucketed when quotas are set)
/// with one query vector per planned query, then the piece after each
/// ([`neighbours`]) where the searches' filters admit it; with quotas,
/// each bucket keeps its best `quota` entries, next pieces included.
///
/// Cost: one search per (scope × query), all sent at once
/// ([`AccountIndex::search`]); then one lookup of the next pieces
/// (segments: a hash lookup per node in the loaded index; S3 Vectors: one
/// `GetVectors` per 100 nodes, a failure of which only leaves them out).
///
/// # Errors
/// [`IndexError::Vectors`] when an S3 Vectors query fails.
pub async fn gather(
    index: &AccountIndex,
    identity: &Identity,
    params: &AssembleParams,
    vectors: &[Vec<f32>],
    exclusion: &Exclusion,
) -> Result<Gathered, IndexError> {
    let mut out = Gathered { index: IndexStats::of(index), ..Gathered::default() };
    let peers = params.peer_scope == PeerScope::All;
    let terms: Vec<Vec<String>> = match params.search_kind {
        SearchKind::Semantic => Vec::new(),
        SearchKind::Keywords | SearchKind::Hybrid => params.queries.iter().map(|q| query_terms(q)).collect(),
    };
    let searcher = Searcher { identity, params, vectors, terms: &terms };
    // Every scope, with its bucket and the group whose lists merge.
    let mut scopes: Vec<(Scope, Option<Category>, usize)> = Vec::new();
    match &params.quotas {
        None => {
            scopes.push((own_scope(identity, params.limit), None, 0));
            if peers {
                scopes.push((other_peers_scope(identity, None, params.limit), None, 0));
            }
        }
        Some(quotas) => {
            for (group, (&bucket, &quota)) in quotas.iter().filter(|(_, q)| **q > 0).enumerate() {
                scopes.push((bucket_scope(identity, bucket, quota), Some(bucket), group));
                let is_memory_bucket = !matches!(bucket, Category::Resources | Category::Skills);
                if peers && is_memory_bucket {
                    scopes.push((other_peers_scope(identity, Some(bucket), quota), Some(bucket), group));
                }
            }
        }
    }
    let filters: Vec<Filter> = scopes.iter().map(|(scope, _, _)| searcher.filter(scope)).collect();
    let requests: Vec<SearchParams<'_>> =
        scopes.iter().zip(&filters).flat_map(|((scope, _, _), filter)| searcher.requests(scope, filter)).collect();
    let mut searched = Box::pin(index.search(&requests, exclusion)).await?.into_iter();
    let mut lists: Vec<(Option<Category>, usize, Vec<Candidate>)> = Vec::new();
    for (_, bucket, group) in &scopes {
        let found: Vec<Searched<'_>> = searched.by_ref().take(vectors.len()).collect();
        out.excluded += found.iter().map(|f| f.excluded).sum::<usize>();
        if let Some(stats) = &mut out.index {
            found.iter().for_each(|f| stats.add(f));
        }
        lists.push((*bucket, *group, searcher.candidates(found, *bucket)));
    }
    match &params.quotas {
        None => {
            let mut all = merge(lists.into_iter().map(|(_, _, l)| l).collect());
            out.searched.0.push(("all", all.len()));
            neighbours::cohere(&mut all);
            sort(&mut all);
            all.truncate(params.limit);
            out.candidates = all;
        }
        Some(quotas) => {
            let mut buckets = Vec::new();
            for (group, (&bucket, &quota)) in quotas.iter().filter(|(_, q)| **q > 0).enumerate() {
                let group_lists: Vec<Vec<Candidate>> =
                    lists.iter_mut().filter(|(_, g, _)| *g == group).map(|(_, _, l)| std::mem::take(l)).collect();
                let mut found = merge(group_lists);
                out.searched.0.push((bucket.as_str(), found.len()));
                neighbours::cohere(&mut found);
                sort(&mut found);
                found.truncate(quota);
                buckets.push(found);
            }
            let mut all = merge(buckets);
            sort(&mut all);
            out.candidates = all;
        }
    }
    // The piece after each candidate, where the search would have found it.
    let nodes: Vec<_> = out.candidates.iter().flat_map(neighbours::next_nodes).collect();
    if !nodes.is_empty() {
        let found = match index.lookup(&nodes).await {
            Ok(found) => found,
            Err(error) => {
                tracing::warn!(%error, "next pieces not looked up; the block is served without them");
                Vec::new()
            }
        };
        let found: Vec<Record> = found
            .into_iter()
            .filter(|r| !is_profile(r) && !exclusion.excludes(&r.uri) && filters.iter().any(|f| f.matches(r)))
            .collect();
        neighbours::join(&mut out.candidates, &found);
        sort(&mut out.candidates);
        // A quota bounds its bucket's entries, next pieces included: the
        // best `quota` of each bucket stay.
        if let Some(quotas) = &params.quotas {
            let mut taken: BTreeMap<Category, usize> = BTreeMap::new();
            out.candidates.retain(|c| {
                let n = taken.entry(c.category).or_default();
                *n += 1;
                quotas.get(&c.category).is_none_or(|&quota| *n <= quota)
            });
        }
    }
    Ok(out)
}
