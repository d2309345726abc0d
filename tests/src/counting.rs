//! A [`Store`] that passes every call through to another store and records
//! it, in order, so a test can assert the store round trips a route makes
//! (each call is one HTTP request on S3).

use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use bytes::Bytes;
use skald::store::{DirListing, Object, ObjectMeta, PutMode, SharedStore, Store, StoreError};

/// One recorded store call: the operation and its key (or prefix).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// `GET`, `HEAD`, `PUT`, `PUT if-none-match`, `PUT if-match`, `LIST` or
    /// `DELETE`.
    pub op: &'static str,
    /// The key (the prefix for `LIST`).
    pub key: String,
}

/// The wrapper: every call is recorded before it is passed on.
#[derive(Debug)]
pub struct CountingStore {
    inner: SharedStore,
    calls: Mutex<Vec<Call>>,
}

impl CountingStore {
    /// Wraps `inner`.
    #[must_use]
    pub fn new(inner: SharedStore) -> Arc<Self> {
        Arc::new(Self { inner, calls: Mutex::new(Vec::new()) })
    }

    /// The calls recorded since the last [`CountingStore::take`], and
    /// forgets them.
    pub fn take(&self) -> Vec<Call> {
        std::mem::take(&mut *self.calls.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn record(&self, op: &'static str, key: &str) {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner).push(Call { op, key: key.to_owned() });
    }
}

#[async_trait]
impl Store for CountingStore {
    async fn get(&self, key: &str) -> Result<Object, StoreError> {
        self.record("GET", key);
        self.inner.get(key).await
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta, StoreError> {
        self.record("HEAD", key);
        self.inner.head(key).await
    }

    async fn put(&self, key: &str, body: Bytes, mode: PutMode) -> Result<ObjectMeta, StoreError> {
        let op = match mode {
            PutMode::Overwrite => "PUT",
            PutMode::CreateNew => "PUT if-none-match",
            PutMode::IfMatch(_) => "PUT if-match",
        };
        self.record(op, key);
        self.inner.put(key, body, mode).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StoreError> {
        self.record("LIST", prefix);
        self.inner.list(prefix).await
    }

    async fn list_dir(&self, dir: &str, limit: usize) -> Result<DirListing, StoreError> {
        self.record("LIST /", dir);
        self.inner.list_dir(dir, limit).await
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.record("DELETE", key);
        self.inner.delete(key).await
    }

    async fn delete_if(&self, key: &str, etag: &str) -> Result<(), StoreError> {
        self.record("DELETE", key);
        self.inner.delete_if(key, etag).await
    }
}
