//! Resolving a request's identity: the API Gateway authorizer's claims
//! (JWT), an API key checked against the store's key table, or — only in
//! `dev` mode — the reference's `X-OpenViking-*` headers.
//!
//! | mode | credential | identity |
//! |---|---|---|
//! | `authorizer` (`jwt`) | the authorizer's claims | `sub` and the account claim; no account claim: `jwt_default_account` or 401 |
//! | `api_key` | `X-API-Key`, or `Authorization: Bearer` | the key's record; identity headers within its role, else 403 |
//! | `dev` | none (claims if present) | the identity headers, else the defaults |
//!
//! A presented key never appears in a response or a log line.

use std::time::Instant;

use http::HeaderMap;
use serde_json::{Map, Value};

use super::error::ApiError;
use crate::config::{IdentityConfig, IdentityMode};
use crate::identity::{AccountId, Identity, PeerId, UserId};
use crate::keys::{KeyRecord, KeyTable, Role};

/// The authorizer's claims, attached to a request as an extension by the
/// function edge (JWT claims, or a Lambda authorizer's context).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AuthorizerClaims(pub Map<String, Value>);

/// Header naming the account (dev mode; admin and root keys).
pub const ACCOUNT_HEADER: &str = "x-openviking-account";
/// Header naming the user (dev mode; admin and root keys).
pub const USER_HEADER: &str = "x-openviking-user";
/// Header naming the acting peer.
pub const ACTOR_PEER_HEADER: &str = "x-openviking-actor-peer";
/// Header carrying an API key (OpenViking's SDK).
pub const API_KEY_HEADER: &str = "x-api-key";

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, ApiError> {
    match headers.get(name) {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .map(|s| Some(s.trim()).filter(|s| !s.is_empty()))
            .map_err(|_| ApiError::InvalidArgument(format!("header {name} is not valid text"))),
    }
}

fn claim<'a>(claims: &'a AuthorizerClaims, name: &str) -> Option<&'a str> {
    claims.0.get(name).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// The API key a request presents: `X-API-Key`, else the token of
/// `Authorization: Bearer …`. A value that is not text counts as a wrong
/// key (it is never echoed).
fn presented_key(headers: &HeaderMap) -> Option<&str> {
    if let Some(v) = headers.get(API_KEY_HEADER) {
        return Some(v.to_str().map(str::trim).unwrap_or(""));
    }
    let auth = headers.get(http::header::AUTHORIZATION)?.to_str().unwrap_or("");
    let (scheme, token) = auth.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

fn account_of(text: &str, source: &str) -> Result<AccountId, ApiError> {
    AccountId::new(text).map_err(|e| ApiError::InvalidArgument(format!("{source}: {e}")))
}

fn user_of(text: &str, source: &str) -> Result<UserId, ApiError> {
    UserId::new(text).map_err(|e| ApiError::InvalidArgument(format!("{source}: {e}")))
}

/// The identity an API key's `record` acts as, given the identity headers
/// the request sent: a user key acts as its own user only (a header naming
/// anyone else is a 403), an admin key as any user of its own account, a
/// root key as any account and user; what no header names is the key's
/// own.
///
/// # Errors
/// 403 naming the header a key's role does not allow; 400 when a header is
/// not a valid name.
pub fn identity_for_key(
    record: &KeyRecord,
    account_header: Option<&str>,
    user_header: Option<&str>,
    actor_peer: Option<PeerId>,
) -> Result<Identity, ApiError> {
    let account = account_of(account_header.unwrap_or(&record.account), "header X-OpenViking-Account")?;
    let user = user_of(user_header.unwrap_or(&record.user), "header X-OpenViking-User")?;
    if record.role != Role::Root && account.as_str() != record.account {
        return Err(ApiError::PermissionDenied(format!(
            "a {} key acts only within its own account; X-OpenViking-Account names {account}",
            record.role
        )));
    }
    if record.role == Role::User && user.as_str() != record.user {
        return Err(ApiError::PermissionDenied(format!(
            "a user key acts only as its own user; X-OpenViking-User names {user}"
        )));
    }
    Ok(Identity { account, user, actor_peer })
}

/// Who a request acts as, and with which role: an API key's own role; a
/// token's claims act as [`Role::User`]; dev mode's headers as
/// [`Role::Admin`] (dev mode trusts its caller).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The identity.
    pub identity: Identity,
    /// The role: what it may write beyond its own tree
    /// ([`crate::write::may_write`]).
    pub role: Role,
}

/// The identity of a request, per the configured mode (see the module's
/// table), with its role ([`Caller`]). `keys` is the warm key table (`api_key` mode only); `now` the
/// caller's clock for its revalidation.
///
/// # Errors
/// 401 for missing, unknown or unusable credentials (a JWT without the
/// account claim, unless `jwt_default_account` is set); 403 for an identity
/// header an API key's role does not allow; 400 when a header is not a
/// valid name; 503 when the key table cannot be read.
pub async fn resolve_caller(
    config: &IdentityConfig,
    keys: &KeyTable,
    headers: &HeaderMap,
    claims: Option<&AuthorizerClaims>,
    now: Instant,
) -> Result<Caller, ApiError> {
    let actor_peer = header(headers, ACTOR_PEER_HEADER)?
        .map(|p| PeerId::new(p).map_err(|e| ApiError::InvalidArgument(format!("header X-OpenViking-Actor-Peer: {e}"))))
        .transpose()?;
    if config.mode == IdentityMode::ApiKey {
        let Some(key) = presented_key(headers).filter(|k| !k.is_empty()) else {
            return Err(ApiError::Unauthenticated(
                "missing api key: send it in X-API-Key or as Authorization: Bearer <key>".into(),
            ));
        };
        let record = keys
            .verify(key, now)
            .await
            .map_err(|e| ApiError::dependency("the key table is unavailable; retry", e))?
            .ok_or_else(|| ApiError::Unauthenticated("invalid api key".into()))?;
        let identity =
            identity_for_key(&record, header(headers, ACCOUNT_HEADER)?, header(headers, USER_HEADER)?, actor_peer)?;
        return Ok(Caller { identity, role: record.role });
    }
    if let Some(claims) = claims.filter(|c| claim(c, &config.user_claim).is_some()) {
        let user = claim(claims, &config.user_claim).unwrap_or_default();
        let account = claim(claims, &config.account_claim)
            .or(config.jwt_default_account.as_deref().filter(|_| config.mode == IdentityMode::Authorizer))
            .or(Some(config.default_account.as_str()).filter(|_| config.mode == IdentityMode::Dev))
            .ok_or_else(|| {
                ApiError::Unauthenticated(format!(
                    "the token has no {} claim naming its account, and this deployment has no single-tenant default account",
                    config.account_claim
                ))
            })?;
        let user =
            UserId::new(user).map_err(|e| ApiError::Unauthenticated(format!("claim {}: {e}", config.user_claim)))?;
        let account = AccountId::new(account)
            .map_err(|e| ApiError::Unauthenticated(format!("claim {}: {e}", config.account_claim)))?;
        return Ok(Caller { identity: Identity { account, user, actor_peer }, role: Role::User });
    }
    if config.mode != IdentityMode::Dev {
        return Err(ApiError::Unauthenticated("missing credentials: no authorizer claims on the request".into()));
    }
    let account = header(headers, ACCOUNT_HEADER)?.unwrap_or(&config.default_account);
    let user = header(headers, USER_HEADER)?.unwrap_or(&config.default_user);
    let identity = Identity {
        account: account_of(account, "header X-OpenViking-Account")?,
        user: user_of(user, "header X-OpenViking-User")?,
        actor_peer,
    };
    Ok(Caller { identity, role: Role::Admin })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::store::local::LocalStore;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().expect("header value"));
        }
        h
    }

    fn no_keys() -> KeyTable {
        let dir = std::env::temp_dir().join(format!("skald-auth-{:016x}", crate::index::unique()));
        KeyTable::new(Arc::new(LocalStore::open(dir).expect("store")), Duration::ZERO)
    }

    async fn resolve(
        config: &IdentityConfig,
        pairs: &[(&'static str, &str)],
        claims: Option<&AuthorizerClaims>,
    ) -> Result<Identity, ApiError> {
        resolve_caller(config, &no_keys(), &headers(pairs), claims, Instant::now()).await.map(|c| c.identity)
    }

    fn dev() -> IdentityConfig {
        IdentityConfig { mode: IdentityMode::Dev, ..IdentityConfig::default() }
    }

    fn claims(pairs: &[(&str, &str)]) -> AuthorizerClaims {
        AuthorizerClaims(pairs.iter().map(|(k, v)| ((*k).to_owned(), Value::from(*v))).collect())
    }

    /// What a caller may write beyond its own tree follows from how it
    /// came: dev mode's headers as an admin, a token's claims as a user.
    #[tokio::test]
    async fn callers_carry_the_role_of_their_credential() {
        let role = |config: IdentityConfig, with: Option<AuthorizerClaims>| async move {
            resolve_caller(&config, &no_keys(), &headers(&[]), with.as_ref(), Instant::now()).await.map(|c| c.role)
        };
        assert_eq!(role(dev(), None).await.ok(), Some(Role::Admin));
        let token = claims(&[("sub", "alice"), ("custom:account", "acme")]);
        assert_eq!(role(dev(), Some(token.clone())).await.ok(), Some(Role::User));
        let authorizer = IdentityConfig { mode: IdentityMode::Authorizer, ..IdentityConfig::default() };
        assert_eq!(role(authorizer, Some(token)).await.ok(), Some(Role::User));
    }

    #[tokio::test]
    async fn dev_mode_trusts_headers_and_defaults() {
        let id = resolve(&dev(), &[], None).await.expect("default identity");
        assert_eq!((id.account.as_str(), id.user.as_str()), ("default", "default"));
        let id = resolve(&dev(), &[("x-openviking-user", "alice"), ("x-openviking-actor-peer", "p1")], None)
            .await
            .expect("header identity");
        assert_eq!(id.user.as_str(), "alice");
        assert_eq!(id.actor_peer.map(|p| p.to_string()).as_deref(), Some("p1"));
        let err = resolve(&dev(), &[("x-openviking-user", "../x")], None).await.expect_err("bad user");
        assert_eq!(err.status(), 400);
        assert!(err.to_string().contains("X-OpenViking-User"), "{err}");
    }

    #[tokio::test]
    async fn authorizer_mode_ignores_headers_and_needs_claims() {
        let config = IdentityConfig::default();
        let err = resolve(&config, &[("x-openviking-user", "alice")], None).await.expect_err("no claims");
        assert_eq!(err.status(), 401);
        let with_account = claims(&[("sub", "bob"), ("custom:account", "acme")]);
        let id = resolve(&config, &[("x-openviking-user", "alice")], Some(&with_account)).await.expect("claims");
        assert_eq!((id.account.as_str(), id.user.as_str()), ("acme", "bob"));
    }

    #[tokio::test]
    async fn a_token_without_its_account_is_refused_unless_the_deployment_has_one_tenant() {
        let no_account = claims(&[("sub", "bob")]);
        let err = resolve(&IdentityConfig::default(), &[], Some(&no_account)).await.expect_err("no account claim");
        assert_eq!(err.status(), 401);
        assert!(err.to_string().contains("custom:account"), "{err}");
        let single = IdentityConfig { jwt_default_account: Some("solo".into()), ..IdentityConfig::default() };
        let id = resolve(&single, &[], Some(&no_account)).await.expect("single tenant");
        assert_eq!((id.account.as_str(), id.user.as_str()), ("solo", "bob"));
        // The dev default account never serves a token outside dev mode.
        let id = resolve(&dev(), &[], Some(&no_account)).await.expect("dev");
        assert_eq!(id.account.as_str(), "default");
    }

    #[test]
    fn keys_act_within_their_role() {
        let record = |role| KeyRecord {
            id: "0123456789abcdef".into(),
            account: "acme".into(),
            user: "alice".into(),
            role,
            created_at: String::new(),
            salt: String::new(),
            hash: String::new(),
        };
        // (role, X-OpenViking-Account, X-OpenViking-User, expected account/user or status)
        type Case = (Role, Option<&'static str>, Option<&'static str>, Result<(&'static str, &'static str), u16>);
        let cases: &[Case] = &[
            (Role::User, None, None, Ok(("acme", "alice"))),
            (Role::User, Some("acme"), Some("alice"), Ok(("acme", "alice"))),
            (Role::User, None, Some("bob"), Err(403)),
            (Role::User, Some("other"), None, Err(403)),
            (Role::Admin, None, None, Ok(("acme", "alice"))),
            (Role::Admin, None, Some("bob"), Ok(("acme", "bob"))),
            (Role::Admin, Some("acme"), Some("bob"), Ok(("acme", "bob"))),
            (Role::Admin, Some("other"), Some("bob"), Err(403)),
            (Role::Root, None, None, Ok(("acme", "alice"))),
            (Role::Root, Some("other"), Some("bob"), Ok(("other", "bob"))),
            (Role::Root, Some("other"), None, Ok(("other", "alice"))),
            (Role::Root, Some("../x"), None, Err(400)),
            (Role::Admin, None, Some("a b"), Err(400)),
        ];
        for (role, account, user, want) in cases {
            let got = identity_for_key(&record(*role), *account, *user, None)
                .map(|id| (id.account.to_string(), id.user.to_string()))
                .map_err(|e| e.status());
            let want = want.map(|(a, u)| (a.to_owned(), u.to_owned()));
            assert_eq!(got, want, "{role} {account:?} {user:?}");
        }
    }

    #[tokio::test]
    async fn api_key_mode_needs_a_key_and_never_echoes_it() {
        let config = IdentityConfig { mode: IdentityMode::ApiKey, ..IdentityConfig::default() };
        let err = resolve(&config, &[("x-openviking-user", "alice")], None).await.expect_err("no key");
        assert_eq!((err.status(), err.code()), (401, "UNAUTHENTICATED"));
        let secret = format!("skald_0123456789abcdef_{}", "a".repeat(64));
        let bearer = format!("Bearer {secret}");
        for pairs in [
            vec![("x-api-key", secret.as_str())],
            vec![("authorization", bearer.as_str())],
            vec![("x-api-key", "not-a-key")],
        ] {
            let err = resolve(&config, &pairs, None).await.expect_err("unknown key");
            assert_eq!(err.status(), 401);
            assert!(!err.body().to_string().contains(&secret) && !err.body().to_string().contains("not-a-key"));
        }
        // Claims do not stand in for a key.
        let err = resolve(&config, &[], Some(&claims(&[("sub", "bob"), ("custom:account", "acme")])))
            .await
            .expect_err("claims are not keys");
        assert_eq!(err.status(), 401);
    }
}
