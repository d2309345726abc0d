//! A [`Store`] that injects the faults a deployed S3 store meets and
//! loopback never shows, over any other store (the local directory or S3 on
//! moto), so tests can drive the library's writes through them and check
//! what survives.
//!
//! Faults are scripted: each [`Rule`] names an operation, a key pattern and
//! which of the matching calls it hits (by count), and what happens to them
//! ([`Fault`]). Rules are checked in order; the first that hits a call
//! decides it. For soak tests, [`FaultyStore::random`] also injects faults
//! at given rates from a seeded generator. Both are deterministic for a
//! given sequence of calls.
//!
//! What each fault does to a write mirrors what S3 and its SDK do:
//! [`Fault::LandThenTimeout`] is a PUT that reached the bucket but whose
//! response was lost (the SDK gives up with a timeout, or retries and its
//! retry fails); [`Fault::LandThenConflict`] is the SDK's retry of a
//! conditional PUT whose first attempt landed, answered 412 because the
//! object is now the one it wrote.

use std::sync::Mutex;
use std::sync::PoisonError;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use skald::store::{DirListing, Object, ObjectMeta, PutMode, SharedStore, Store, StoreError};

/// Which store operation a rule matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `get`.
    Get,
    /// `head`.
    Head,
    /// `put`, any mode.
    Put,
    /// `list` and `list_dir`.
    List,
    /// `delete`.
    Delete,
    /// Every operation.
    Any,
}

/// What happens to a call a rule hits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// A write lands, then the call fails as a timeout (outcome unknown to
    /// the caller).
    LandThenTimeout,
    /// A write lands, then the call reports a precondition failure
    /// ([`StoreError::Conflict`]): the SDK's retry of a landed conditional
    /// write.
    LandThenConflict,
    /// The call fails before reaching the store (a connection reset, a 500
    /// before the write): nothing lands.
    FailBeforeLanding,
    /// 503 `SlowDown`: throttled, nothing lands.
    SlowDown,
    /// The call passes through after this much added latency.
    Latency(Duration),
    /// A read returns the first half of the object's bytes.
    TruncatedBody,
    /// A read returns bytes of something else (an HTML error page).
    ForeignBody,
    /// A listing leaves out the most recently written key under its prefix
    /// (S3's listings may lag behind its writes).
    ListMissingNewest,
    /// The call waits at `Gate` until the test opens it, then passes
    /// through: a test orders another writer's work between two calls of
    /// a held one, deterministically.
    Wait(Gate),
}

/// Where a [`Fault::Wait`] call stops: the test awaits
/// [`Gate::reached`], does what must happen meanwhile, then
/// [`Gate::open`]s it. Clones share the gate; it holds one call.
#[derive(Debug, Clone, Default)]
pub struct Gate {
    reached: std::sync::Arc<tokio::sync::Notify>,
    opened: std::sync::Arc<tokio::sync::Notify>,
}

impl PartialEq for Gate {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.reached, &other.reached)
    }
}

impl Eq for Gate {}

impl Gate {
    /// Returns once a call is held at the gate (at once if one already is).
    pub async fn reached(&self) {
        self.reached.notified().await;
    }

    /// Lets the held call through (or the next one to arrive).
    pub fn open(&self) {
        self.opened.notify_one();
    }

    async fn pass(&self) {
        self.reached.notify_one();
        self.opened.notified().await;
    }
}

impl Fault {
    fn applies_to(&self, op: Op) -> bool {
        match self {
            Self::LandThenTimeout | Self::LandThenConflict => op == Op::Put,
            Self::TruncatedBody | Self::ForeignBody => op == Op::Get,
            Self::ListMissingNewest => op == Op::List,
            Self::FailBeforeLanding | Self::SlowDown | Self::Latency(_) | Self::Wait(_) => true,
        }
    }
}

/// One scripted fault: calls of `op` whose key contains `pattern`, counted
/// from 1 in the order they arrive; calls `first..=last` of them are hit.
#[derive(Debug, Clone)]
pub struct Rule {
    /// The operation.
    pub op: Op,
    /// A substring of the key (or prefix) the call names; `""` matches all.
    pub pattern: String,
    /// The first matching call hit (1-based).
    pub first: u64,
    /// The last matching call hit (inclusive; `u64::MAX`: every later one).
    pub last: u64,
    /// What happens to it.
    pub fault: Fault,
    seen: u64,
}

impl Rule {
    /// The `nth` (1-based) call of `op` on keys containing `pattern`.
    #[must_use]
    pub fn nth(op: Op, pattern: &str, nth: u64, fault: Fault) -> Self {
        Self { op, pattern: pattern.to_owned(), first: nth, last: nth, fault, seen: 0 }
    }

    /// Every call of `op` on keys containing `pattern`.
    #[must_use]
    pub fn every(op: Op, pattern: &str, fault: Fault) -> Self {
        Self { op, pattern: pattern.to_owned(), first: 1, last: u64::MAX, fault, seen: 0 }
    }

    /// Calls `first..=last` (1-based) of `op` on keys containing `pattern`.
    #[must_use]
    pub fn calls(op: Op, pattern: &str, first: u64, last: u64, fault: Fault) -> Self {
        Self { op, pattern: pattern.to_owned(), first, last, fault, seen: 0 }
    }

    fn hits(&mut self, op: Op, key: &str) -> Option<Fault> {
        if (self.op != Op::Any && self.op != op) || !key.contains(&self.pattern) || !self.fault.applies_to(op) {
            return None;
        }
        self.seen += 1;
        (self.first..=self.last).contains(&self.seen).then(|| self.fault.clone())
    }
}

/// Random faults for soak tests: each rate is the chance, out of 1000, that
/// a call of that kind gets one of the faults of its kind.
#[derive(Debug, Clone, Copy, Default)]
pub struct Rates {
    /// Writes: [`Fault::LandThenTimeout`], [`Fault::LandThenConflict`],
    /// [`Fault::FailBeforeLanding`] or [`Fault::SlowDown`], equally likely.
    pub write_per_mille: u64,
    /// Reads (get, head): [`Fault::FailBeforeLanding`] or [`Fault::SlowDown`].
    pub read_per_mille: u64,
    /// Reads of a body: [`Fault::TruncatedBody`] or [`Fault::ForeignBody`].
    pub corrupt_per_mille: u64,
    /// Listings: [`Fault::ListMissingNewest`].
    pub list_per_mille: u64,
}

/// One injected fault, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Injected {
    /// The operation.
    pub op: Op,
    /// The key or prefix.
    pub key: String,
    /// The fault.
    pub fault: Fault,
}

/// The wrapper.
#[derive(Debug)]
pub struct FaultyStore {
    inner: SharedStore,
    rules: Mutex<Vec<Rule>>,
    random: Option<(Rates, Mutex<u64>)>,
    /// Keys written, newest last (for [`Fault::ListMissingNewest`]).
    written: Mutex<Vec<String>>,
    injected: Mutex<Vec<Injected>>,
    calls: AtomicU64,
}

/// A deterministic 64-bit generator (SplitMix64).
fn next_random(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl FaultyStore {
    /// Wraps `inner` with the scripted `rules` (checked in order).
    #[must_use]
    pub fn new(inner: SharedStore, rules: Vec<Rule>) -> Self {
        Self {
            inner,
            rules: Mutex::new(rules),
            random: None,
            written: Mutex::new(Vec::new()),
            injected: Mutex::new(Vec::new()),
            calls: AtomicU64::new(0),
        }
    }

    /// Wraps `inner` with random faults at `rates`, drawn from `seed`.
    #[must_use]
    pub fn random(inner: SharedStore, rates: Rates, seed: u64) -> Self {
        Self { random: Some((rates, Mutex::new(seed))), ..Self::new(inner, Vec::new()) }
    }

    /// Adds a rule after the existing ones.
    pub fn push(&self, rule: Rule) {
        lock(&self.rules).push(rule);
    }

    /// Adds rules after the existing ones.
    pub fn extend(&self, rules: impl IntoIterator<Item = Rule>) {
        lock(&self.rules).extend(rules);
    }

    /// Removes every rule (random faults stay).
    pub fn clear(&self) {
        lock(&self.rules).clear();
    }

    /// The faults injected so far, in order.
    #[must_use]
    pub fn injected(&self) -> Vec<Injected> {
        lock(&self.injected).clone()
    }

    /// Calls made so far.
    #[must_use]
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// The store under the faults.
    #[must_use]
    pub fn inner(&self) -> &SharedStore {
        &self.inner
    }

    fn decide(&self, op: Op, key: &str) -> Option<Fault> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let scripted = lock(&self.rules).iter_mut().find_map(|r| r.hits(op, key));
        let fault = scripted.or_else(|| self.random_fault(op));
        if let Some(fault) = &fault {
            lock(&self.injected).push(Injected { op, key: key.to_owned(), fault: fault.clone() });
        }
        fault
    }

    fn random_fault(&self, op: Op) -> Option<Fault> {
        let (rates, state) = self.random.as_ref()?;
        let mut state = lock(state);
        let roll = next_random(&mut state) % 1000;
        let pick = next_random(&mut state);
        match op {
            Op::Put | Op::Delete if roll < rates.write_per_mille => Some(match (op, pick % 4) {
                (Op::Put, 0) => Fault::LandThenTimeout,
                (Op::Put, 1) => Fault::LandThenConflict,
                (_, 2) => Fault::SlowDown,
                _ => Fault::FailBeforeLanding,
            }),
            Op::Get | Op::Head if roll < rates.read_per_mille => {
                Some(if pick.is_multiple_of(2) { Fault::SlowDown } else { Fault::FailBeforeLanding })
            }
            Op::Get if roll < rates.read_per_mille + rates.corrupt_per_mille => {
                Some(if pick.is_multiple_of(2) { Fault::TruncatedBody } else { Fault::ForeignBody })
            }
            Op::List if roll < rates.list_per_mille => Some(Fault::ListMissingNewest),
            _ => None,
        }
    }

    fn failure(op: &'static str, key: &str, fault: &Fault) -> StoreError {
        let message = match fault {
            Fault::SlowDown => "service error: 503 SlowDown: Please reduce your request rate.".to_owned(),
            Fault::LandThenTimeout => "dispatch failure: timeout: operation timed out after 3 attempts".to_owned(),
            _ => "dispatch failure: io error: connection reset by peer".to_owned(),
        };
        StoreError::Backend { op, key: key.to_owned(), message }
    }
}

/// What a fault that delays a call does before the call passes through:
/// sleep ([`Fault::Latency`]) or wait at its gate ([`Fault::Wait`]).
async fn delay(fault: &Option<Fault>) {
    match fault {
        Some(Fault::Latency(d)) => tokio::time::sleep(*d).await,
        Some(Fault::Wait(gate)) => gate.pass().await,
        _ => {}
    }
}

#[async_trait]
impl Store for FaultyStore {
    async fn get(&self, key: &str) -> Result<Object, StoreError> {
        let fault = self.decide(Op::Get, key);
        delay(&fault).await;
        match fault {
            None | Some(Fault::Latency(_) | Fault::Wait(_)) => self.inner.get(key).await,
            Some(Fault::TruncatedBody) => {
                let mut object = self.inner.get(key).await?;
                object.body = object.body.slice(..object.body.len() / 2);
                object.meta.size = object.body.len() as u64;
                Ok(object)
            }
            Some(Fault::ForeignBody) => {
                let mut object = self.inner.get(key).await?;
                object.body = Bytes::from_static(b"<html><body>502 Bad Gateway</body></html>");
                object.meta.size = object.body.len() as u64;
                Ok(object)
            }
            Some(fault) => Err(Self::failure("get", key, &fault)),
        }
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta, StoreError> {
        let fault = self.decide(Op::Head, key);
        delay(&fault).await;
        match fault {
            None | Some(Fault::Latency(_) | Fault::Wait(_)) => self.inner.head(key).await,
            Some(fault) => Err(Self::failure("head", key, &fault)),
        }
    }

    async fn put(&self, key: &str, body: Bytes, mode: PutMode) -> Result<ObjectMeta, StoreError> {
        let fault = self.decide(Op::Put, key);
        delay(&fault).await;
        match fault {
            None | Some(Fault::Latency(_) | Fault::Wait(_)) => {
                let written = self.inner.put(key, body, mode).await?;
                lock(&self.written).push(key.to_owned());
                Ok(written)
            }
            Some(landing @ (Fault::LandThenTimeout | Fault::LandThenConflict)) => {
                // The write itself may lose its precondition: then nothing
                // landed and the caller hears exactly that.
                self.inner.put(key, body, mode).await?;
                lock(&self.written).push(key.to_owned());
                Err(match landing {
                    Fault::LandThenConflict => StoreError::Conflict(key.to_owned()),
                    _ => Self::failure("put", key, &landing),
                })
            }
            Some(fault) => Err(Self::failure("put", key, &fault)),
        }
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StoreError> {
        let fault = self.decide(Op::List, prefix);
        delay(&fault).await;
        match fault {
            None | Some(Fault::Latency(_) | Fault::Wait(_)) => self.inner.list(prefix).await,
            Some(Fault::ListMissingNewest) => {
                let mut listed = self.inner.list(prefix).await?;
                let newest = lock(&self.written).iter().rev().find(|k| k.starts_with(prefix)).cloned();
                listed.retain(|m| Some(&m.key) != newest.as_ref());
                Ok(listed)
            }
            Some(fault) => Err(Self::failure("list", prefix, &fault)),
        }
    }

    async fn list_dir(&self, dir: &str, limit: usize) -> Result<DirListing, StoreError> {
        let fault = self.decide(Op::List, dir);
        delay(&fault).await;
        match fault {
            None | Some(Fault::ListMissingNewest | Fault::Latency(_) | Fault::Wait(_)) => {
                self.inner.list_dir(dir, limit).await
            }
            Some(fault) => Err(Self::failure("list", dir, &fault)),
        }
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        let fault = self.decide(Op::Delete, key);
        delay(&fault).await;
        match fault {
            None | Some(Fault::Latency(_) | Fault::Wait(_)) => self.inner.delete(key).await,
            Some(fault) => Err(Self::failure("delete", key, &fault)),
        }
    }

    async fn delete_if(&self, key: &str, etag: &str) -> Result<(), StoreError> {
        let fault = self.decide(Op::Delete, key);
        delay(&fault).await;
        match fault {
            None | Some(Fault::Latency(_) | Fault::Wait(_)) => self.inner.delete_if(key, etag).await,
            // The delete lands, and the answer is lost.
            Some(Fault::LandThenTimeout) => {
                self.inner.delete_if(key, etag).await?;
                Err(Self::failure("delete", key, &Fault::LandThenTimeout))
            }
            Some(fault) => Err(Self::failure("delete", key, &fault)),
        }
    }
}
