//! Resolving a request's identity (CONTRACT §3): the API Gateway
//! authorizer's claims, or — only in `dev` mode — the reference's
//! `X-OpenViking-*` headers.

use http::HeaderMap;
use serde_json::{Map, Value};

use super::error::ApiError;
use crate::config::{IdentityConfig, IdentityMode};
use crate::identity::{AccountId, Identity, PeerId, UserId};

/// The authorizer's claims, attached to a request as an extension by the
/// function edge (JWT claims, or a Lambda authorizer's context).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AuthorizerClaims(pub Map<String, Value>);

/// Header naming the account (dev mode).
pub const ACCOUNT_HEADER: &str = "x-openviking-account";
/// Header naming the user (dev mode).
pub const USER_HEADER: &str = "x-openviking-user";
/// Header naming the acting peer.
pub const ACTOR_PEER_HEADER: &str = "x-openviking-actor-peer";

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

/// The identity of a request.
///
/// With claims: the user from `user_claim`, the account from
/// `account_claim` (else `default_account`). Without claims, in dev mode:
/// the headers, defaulting to `default_account` / `default_user`. The actor
/// peer always comes from `X-OpenViking-Actor-Peer`.
///
/// # Errors
/// 401 when there are no claims outside dev mode or a claim is not a valid
/// name; 400 when a dev header is not a valid name.
pub fn resolve_identity(
    config: &IdentityConfig,
    headers: &HeaderMap,
    claims: Option<&AuthorizerClaims>,
) -> Result<Identity, ApiError> {
    let actor_peer = header(headers, ACTOR_PEER_HEADER)?
        .map(|p| PeerId::new(p).map_err(|e| ApiError::InvalidArgument(format!("header X-OpenViking-Actor-Peer: {e}"))))
        .transpose()?;
    if let Some(claims) = claims.filter(|c| claim(c, &config.user_claim).is_some()) {
        let user = claim(claims, &config.user_claim).unwrap_or_default();
        let account = claim(claims, &config.account_claim).unwrap_or(&config.default_account);
        let user =
            UserId::new(user).map_err(|e| ApiError::Unauthenticated(format!("claim {}: {e}", config.user_claim)))?;
        let account = AccountId::new(account)
            .map_err(|e| ApiError::Unauthenticated(format!("claim {}: {e}", config.account_claim)))?;
        return Ok(Identity { account, user, actor_peer });
    }
    if config.mode != IdentityMode::Dev {
        return Err(ApiError::Unauthenticated("missing credentials: no authorizer claims on the request".into()));
    }
    let account = header(headers, ACCOUNT_HEADER)?.unwrap_or(&config.default_account);
    let user = header(headers, USER_HEADER)?.unwrap_or(&config.default_user);
    Ok(Identity {
        account: AccountId::new(account)
            .map_err(|e| ApiError::InvalidArgument(format!("header X-OpenViking-Account: {e}")))?,
        user: UserId::new(user).map_err(|e| ApiError::InvalidArgument(format!("header X-OpenViking-User: {e}")))?,
        actor_peer,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().expect("header value"));
        }
        h
    }

    fn dev() -> IdentityConfig {
        IdentityConfig { mode: IdentityMode::Dev, ..IdentityConfig::default() }
    }

    #[test]
    fn dev_mode_trusts_headers_and_defaults() {
        let id = resolve_identity(&dev(), &headers(&[]), None).expect("default identity");
        assert_eq!((id.account.as_str(), id.user.as_str()), ("default", "default"));
        let id = resolve_identity(
            &dev(),
            &headers(&[("x-openviking-user", "alice"), ("x-openviking-actor-peer", "p1")]),
            None,
        )
        .expect("header identity");
        assert_eq!(id.user.as_str(), "alice");
        assert_eq!(id.actor_peer.map(|p| p.to_string()).as_deref(), Some("p1"));
        let err = resolve_identity(&dev(), &headers(&[("x-openviking-user", "../x")]), None).expect_err("bad user");
        assert_eq!(err.status(), 400);
        assert!(err.to_string().contains("X-OpenViking-User"), "{err}");
    }

    #[test]
    fn authorizer_mode_ignores_headers_and_needs_claims() {
        let config = IdentityConfig::default();
        let err = resolve_identity(&config, &headers(&[("x-openviking-user", "alice")]), None).expect_err("no claims");
        assert_eq!(err.status(), 401);
        let mut claims = Map::new();
        claims.insert("sub".into(), "bob".into());
        claims.insert("custom:account".into(), "acme".into());
        let id =
            resolve_identity(&config, &headers(&[("x-openviking-user", "alice")]), Some(&AuthorizerClaims(claims)))
                .expect("claims");
        assert_eq!((id.account.as_str(), id.user.as_str()), ("acme", "bob"));
    }
}
