//! API keys: the deployment-wide key table in the store (`keys/{id}.json`)
//! and the warm function's cache of it.
//!
//! A key is `skald_{id}_{secret}`: a 64-bit id (16 hex digits) that names
//! its record and a 256-bit secret (64 hex digits) from the operating
//! system's random source. The record holds the account, user, role and
//! creation time, a random 128-bit salt and SHA-256(salt ‖ secret); the
//! secret itself is shown once, by [`create`], and stored nowhere. A
//! salted fast hash is enough: the secret is random, so there is no
//! dictionary to try.
//!
//! Revoking deletes the record. A function caches each record it reads
//! (and each id it found no record for) for
//! [`crate::config::IdentityConfig::key_revalidate_ms`], so a revoked key
//! stops working within that time.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::identity::{AccountId, UserId};
use crate::store::{PutMode, SharedStore, StoreError};

/// The store prefix of the key table.
pub const KEYS_PREFIX: &str = "keys/";

/// What a key may act as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Its own user only: a request naming any other account or user is a
    /// 403.
    User,
    /// Any user of its own account (`X-OpenViking-User`).
    Admin,
    /// Any account and user (`X-OpenViking-Account`, `X-OpenViking-User`).
    Root,
}

impl Role {
    /// The role's name (`user`, `admin`, `root`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Admin => "admin",
            Self::Root => "root",
        }
    }

    /// The role named `text`.
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "user" => Some(Self::User),
            "admin" => Some(Self::Admin),
            "root" => Some(Self::Root),
            _ => None,
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A key's id: 16 lowercase hex digits, public (it names the record, and
/// `skald keys list` shows it).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyId(String);

impl KeyId {
    /// Validates `text` as a key id.
    ///
    /// # Errors
    /// [`KeyError::BadId`] naming the text when it is not 16 lowercase hex
    /// digits.
    pub fn new(text: &str) -> Result<Self, KeyError> {
        if text.len() == ID_HEX && text.bytes().all(is_lower_hex) {
            Ok(Self(text.to_owned()))
        } else {
            Err(KeyError::BadId(text.to_owned()))
        }
    }

    /// The id as text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn store_key(&self) -> String {
        format!("{KEYS_PREFIX}{}.json", self.0)
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One key's stored record: who it acts as and how to check its secret.
/// Never holds the secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRecord {
    /// The key's id.
    pub id: String,
    /// The account it belongs to.
    pub account: String,
    /// The user it acts as (by default, for admin and root keys).
    pub user: String,
    /// What it may act as.
    pub role: Role,
    /// Creation time, RFC 3339 UTC.
    pub created_at: String,
    /// The salt, 32 hex digits.
    pub salt: String,
    /// SHA-256(salt ‖ secret), 64 hex digits.
    pub hash: String,
}

impl KeyRecord {
    /// Whether `secret` is this record's secret (constant time in the
    /// secret's content).
    #[must_use]
    pub fn matches(&self, secret: &str) -> bool {
        let Ok(salt) = hex::decode(&self.salt) else { return false };
        let Ok(stored) = hex::decode(&self.hash) else { return false };
        let computed = hash_secret(&salt, secret);
        stored.len() == computed.len() && stored.iter().zip(&computed).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }
}

/// A key just created: its record and the key itself, which exists
/// nowhere else.
#[derive(Debug)]
pub struct NewKey {
    /// The stored record.
    pub record: KeyRecord,
    /// The key to hand to the client (`skald_{id}_{secret}`).
    pub key: String,
}

/// What a key-table operation failed to do.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// Not a key id.
    #[error("key id must be 16 lowercase hex digits: {0:?}")]
    BadId(String),
    /// The operating system's random source failed.
    #[error("the random source failed: {0}")]
    Random(String),
    /// A stored record does not decode.
    #[error("key record {key:?} is unreadable: {message}")]
    Corrupt {
        /// The store key.
        key: String,
        /// The decoder's message.
        message: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

const ID_HEX: usize = 16;
const SECRET_HEX: usize = 64;
const KEY_PREFIX: &str = "skald_";

fn is_lower_hex(b: u8) -> bool {
    b.is_ascii_digit() || (b'a'..=b'f').contains(&b)
}

fn hash_secret(salt: &[u8], secret: &str) -> Vec<u8> {
    let mut hasher = Sha256::new();
    hasher.update(salt);
    hasher.update(secret.as_bytes());
    hasher.finalize().to_vec()
}

fn random_bytes(n: usize) -> Result<Vec<u8>, KeyError> {
    let mut buf = vec![0u8; n];
    getrandom::fill(&mut buf).map_err(|e| KeyError::Random(e.to_string()))?;
    Ok(buf)
}

fn random_hex(n: usize) -> Result<String, KeyError> {
    random_bytes(n).map(hex::encode)
}

/// The id and secret of a presented key, when it has the shape of one.
/// Nothing about the text is echoed anywhere.
#[must_use]
pub fn split_key(text: &str) -> Option<(KeyId, &str)> {
    let rest = text.strip_prefix(KEY_PREFIX)?;
    let (id, secret) = rest.split_once('_')?;
    let id = KeyId::new(id).ok()?;
    (secret.len() == SECRET_HEX && secret.bytes().all(is_lower_hex)).then_some((id, secret))
}

/// Creates a key for `user` of `account` with `role`, created at `now`
/// (Unix seconds), and stores its record (create-if-absent).
///
/// If the store leaves the write's outcome unknown, the record is read
/// back: ours (same salt) means it landed; absent means it did not, and
/// the write is tried again; anything else is the error. No key is ever
/// handed out whose record is not stored.
///
/// # Errors
/// [`KeyError`] when the random source or the store fails.
pub async fn create(
    store: &SharedStore,
    account: &AccountId,
    user: &UserId,
    role: Role,
    now: i64,
) -> Result<NewKey, KeyError> {
    const ATTEMPTS: usize = 3;
    let created_at = time::OffsetDateTime::from_unix_timestamp(now)
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_default();
    let mut last = None;
    for _ in 0..ATTEMPTS {
        let id = KeyId(random_hex(ID_HEX / 2)?);
        let secret = random_hex(SECRET_HEX / 2)?;
        let salt = random_bytes(16)?;
        let record = KeyRecord {
            id: id.0.clone(),
            account: account.to_string(),
            user: user.to_string(),
            role,
            created_at: created_at.clone(),
            hash: hex::encode(hash_secret(&salt, &secret)),
            salt: hex::encode(&salt),
        };
        let body = Bytes::from(serde_json::to_vec_pretty(&record).map_err(|e| KeyError::Random(e.to_string()))?);
        let key = format!("{KEY_PREFIX}{id}_{secret}");
        let outcome = match store.put(&id.store_key(), body, PutMode::CreateNew).await {
            Ok(_) => return Ok(NewKey { record, key }),
            // An SDK retry of a write that landed, or a 64-bit id taken
            // already; or a write whose outcome is unknown.
            Err(e @ (StoreError::Conflict(_) | StoreError::Backend { .. })) => e,
            Err(e) => return Err(e.into()),
        };
        match read(store, &id).await {
            Ok(Some(stored)) if stored.salt == record.salt => return Ok(NewKey { record, key }),
            // Not ours, or not there: draw a new id and write again.
            Ok(_) => last = Some(outcome),
            Err(_) => return Err(outcome.into()),
        }
    }
    Err(last.map_or_else(|| KeyError::Random("no attempt was made".into()), KeyError::Store))
}

/// The record of key `id`, `None` when there is none.
///
/// # Errors
/// [`KeyError::Store`] when the store fails, [`KeyError::Corrupt`] when the
/// record does not decode.
pub async fn read(store: &SharedStore, id: &KeyId) -> Result<Option<KeyRecord>, KeyError> {
    let key = id.store_key();
    match store.get(&key).await {
        Ok(object) => serde_json::from_slice(&object.body)
            .map(Some)
            .map_err(|e| KeyError::Corrupt { key, message: e.to_string() }),
        Err(StoreError::NotFound(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Every key's record, sorted by account, user and id.
///
/// # Errors
/// As [`read`].
pub async fn list(store: &SharedStore) -> Result<Vec<KeyRecord>, KeyError> {
    let mut records = Vec::new();
    for meta in store.list(KEYS_PREFIX).await? {
        let Some(id) = meta.key.strip_prefix(KEYS_PREFIX).and_then(|k| k.strip_suffix(".json")) else { continue };
        let Ok(id) = KeyId::new(id) else { continue };
        // Revoked between the listing and the read: not listed.
        if let Some(record) = read(store, &id).await? {
            records.push(record);
        }
    }
    records.sort_by(|a, b| (&a.account, &a.user, &a.id).cmp(&(&b.account, &b.user, &b.id)));
    Ok(records)
}

/// Revokes key `id` by deleting its record; whether there was one.
/// Deleting is idempotent, so a revoke whose outcome the store left
/// unknown is simply run again.
///
/// # Errors
/// As [`read`].
pub async fn revoke(store: &SharedStore, id: &KeyId) -> Result<bool, KeyError> {
    let existed = store.head(&id.store_key()).await.map(|_| true).or_else(|e| match e {
        StoreError::NotFound(_) => Ok(false),
        e => Err(e),
    })?;
    if existed {
        store.delete(&id.store_key()).await?;
    }
    Ok(existed)
}

/// The warm function's view of the key table: each record read on first
/// use and trusted for `revalidate`, absences too (so a flood of unknown
/// keys costs one read per id and period). Holds at most
/// [`KeyTable::CAPACITY`] entries.
#[derive(Debug)]
pub struct KeyTable {
    store: SharedStore,
    revalidate: Duration,
    cache: Mutex<HashMap<KeyId, Cached>>,
}

/// A record as read (or its absence), and when it was read.
type Cached = (Option<Arc<KeyRecord>>, Instant);

impl KeyTable {
    /// Most ids cached at once; past it, expired entries go, then all.
    pub const CAPACITY: usize = 4096;

    /// A table over `store`, trusting what it read for `revalidate`.
    #[must_use]
    pub fn new(store: SharedStore, revalidate: Duration) -> Self {
        Self { store, revalidate, cache: Mutex::new(HashMap::new()) }
    }

    /// The record of `key` when it is a valid, unrevoked key; `None` for
    /// anything else (malformed, unknown, wrong secret). `now` is the
    /// caller's clock. Costs one store read per id per revalidation period.
    ///
    /// # Errors
    /// [`KeyError`] when the record cannot be read.
    pub async fn verify(&self, key: &str, now: Instant) -> Result<Option<Arc<KeyRecord>>, KeyError> {
        let Some((id, secret)) = split_key(key) else { return Ok(None) };
        let cached = self.lock().get(&id).filter(|(_, at)| now.duration_since(*at) < self.revalidate).cloned();
        let record = match cached {
            Some((record, _)) => record,
            None => {
                let record = read(&self.store, &id).await?.map(Arc::new);
                let mut cache = self.lock();
                if cache.len() >= Self::CAPACITY {
                    cache.retain(|_, (_, at)| now.duration_since(*at) < self.revalidate);
                    if cache.len() >= Self::CAPACITY {
                        cache.clear();
                    }
                }
                cache.insert(id.clone(), (record.clone(), now));
                record
            }
        };
        Ok(record.filter(|r| r.id == id.as_str() && r.matches(secret)))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<KeyId, Cached>> {
        // A panic while holding the lock leaves only a cache behind.
        self.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(secret: &str) -> KeyRecord {
        let salt = [7u8; 16];
        KeyRecord {
            id: "0123456789abcdef".into(),
            account: "acme".into(),
            user: "alice".into(),
            role: Role::User,
            created_at: "2026-12-03T00:00:00Z".into(),
            salt: hex::encode(salt),
            hash: hex::encode(hash_secret(&salt, secret)),
        }
    }

    #[test]
    fn keys_split_only_in_their_own_shape() {
        let secret = "a".repeat(64);
        let key = format!("skald_0123456789abcdef_{secret}");
        let (id, s) = split_key(&key).expect("a key");
        assert_eq!((id.as_str(), s), ("0123456789abcdef", secret.as_str()));
        for bad in [
            String::new(),
            "skald_".into(),
            format!("sk_0123456789abcdef_{secret}"),
            format!("skald_0123456789ABCDEF_{secret}"),
            format!("skald_0123456789abcde_{secret}"),
            format!("skald_0123456789abcdef_{}", &secret[1..]),
            format!("skald_0123456789abcdef_{secret}x"),
            "eyJhbGciOi.eyJzdWIi.sig".into(),
        ] {
            assert!(split_key(&bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn only_the_secret_matches_its_record() {
        let secret = "b".repeat(64);
        let r = record(&secret);
        assert!(r.matches(&secret));
        assert!(!r.matches(&"c".repeat(64)));
        assert!(!KeyRecord { salt: "zz".into(), ..r.clone() }.matches(&secret));
        assert!(!KeyRecord { hash: String::new(), ..r }.matches(&secret));
    }

    #[test]
    fn roles_and_ids_parse() {
        for role in [Role::User, Role::Admin, Role::Root] {
            assert_eq!(Role::parse(role.as_str()), Some(role));
        }
        assert_eq!(Role::parse("owner"), None);
        assert!(KeyId::new("0123456789abcdef").is_ok());
        let err = KeyId::new("../x").expect_err("not an id");
        assert!(err.to_string().contains("\"../x\""), "{err}");
    }
}
