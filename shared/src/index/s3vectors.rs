//! The Amazon S3 Vectors client of the `s3vectors` index backend
//! (`aws-sdk-s3vectors`): one vector bucket, one index per account
//! ([`super::remote`] names them and encodes records). Every call is a
//! round trip of its own; writes go in batches within the service's
//! limits. Feature `s3vectors`.
//!
//! Retries: the SDK's standard retry (3 attempts, with backoff) covers
//! throttling and transient errors. Writes are upserts and deletes by key,
//! so a retried or repeated call can neither duplicate nor lose a record;
//! a call that fails after its retries returns an error and its outcome is
//! unknown — some of its vectors may have been written — which the caller
//! settles by writing the same batch again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_s3vectors::Client;
use aws_sdk_s3vectors::error::ProvideErrorMetadata;
use aws_sdk_s3vectors::types::{
    DataType, DistanceMetric, IndexMode, MetadataConfiguration, PutInputVector, VectorData,
};
use aws_smithy_types::{Document, Number};
use futures_util::{StreamExt as _, TryStreamExt as _, stream};
use serde_json::Value;
use tokio::sync::OnceCell;

use super::IndexError;
use super::record::Record;
use super::remote::{self, MAX_GET_BATCH, MAX_TOP_K, MAX_WRITE_BATCH};

/// Reads in flight at once (a lookup's `GetVectors` batches, a request's
/// queries).
pub const READ_CONCURRENCY: usize = 8;
/// Vectors a second one index is written at by default: the service's
/// per-index limit (2,500 vectors a second).
pub const DEFAULT_WRITE_RATE: f64 = 2500.0;

/// A record as read back, with its vector when asked for.
pub type Stored = (Record, Option<Vec<f32>>);

/// A vector bucket and the client that reaches it, built on the first
/// call (building it reads the AWS configuration chain). Cheap to clone;
/// clones share the client.
#[derive(Debug, Clone)]
pub struct VectorBucket {
    shared: Arc<Shared>,
    bucket: String,
}

#[derive(Debug)]
struct Shared {
    client: OnceCell<Client>,
    prefix: String,
    region: Option<String>,
    endpoint_url: Option<String>,
}

impl VectorBucket {
    /// The bucket `bucket`, its accounts' indexes named with `prefix`,
    /// reached with a client from the standard AWS chain (region: `region`,
    /// else the environment's, else `us-east-1`) and an optional endpoint
    /// override (a local emulator). Cost: none until the first call.
    #[must_use]
    pub fn new(bucket: &str, prefix: &str, region: Option<&str>, endpoint_url: Option<&str>) -> Self {
        let shared = Shared {
            client: OnceCell::new(),
            prefix: prefix.to_owned(),
            region: region.map(str::to_owned),
            endpoint_url: endpoint_url.map(str::to_owned),
        };
        Self { shared: Arc::new(shared), bucket: bucket.to_owned() }
    }

    /// The bucket over an already configured client.
    #[must_use]
    pub fn from_client(client: Client, bucket: &str, prefix: &str) -> Self {
        let shared =
            Shared { client: OnceCell::from(client), prefix: prefix.to_owned(), region: None, endpoint_url: None };
        Self { shared: Arc::new(shared), bucket: bucket.to_owned() }
    }

    async fn client(&self) -> &Client {
        self.shared
            .client
            .get_or_init(|| async {
                use aws_config::meta::region::RegionProviderChain;
                use aws_sdk_s3vectors::config::Region;

                let region = RegionProviderChain::first_try(self.shared.region.clone().map(Region::new))
                    .or_default_provider()
                    .or_else(Region::from_static("us-east-1"));
                let sdk_config =
                    aws_config::defaults(aws_config::BehaviorVersion::latest()).region(region).load().await;
                let mut builder = aws_sdk_s3vectors::config::Builder::from(&sdk_config);
                if let Some(url) = &self.shared.endpoint_url {
                    builder = builder.endpoint_url(url);
                }
                Client::from_conf(builder.build())
            })
            .await
    }

    /// The same client on another bucket (one a manifest names).
    #[must_use]
    pub fn in_bucket(&self, bucket: &str) -> Self {
        Self { shared: Arc::clone(&self.shared), bucket: bucket.to_owned() }
    }

    /// The vector bucket's name.
    #[must_use]
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The index name of `account` ([`remote::index_name`]).
    #[must_use]
    pub fn index_name(&self, account: &crate::identity::AccountId) -> String {
        remote::index_name(&self.shared.prefix, account)
    }

    /// Creates `index` (float32, cosine, `dimension`, the record JSON
    /// non-filterable) in index mode `ENHANCED` (the filter applies before
    /// the nearest-neighbour search, so a selective filter — one account's
    /// subtree — still gets `topK` matches; the service's default in
    /// buckets made before September 2026 is `CLASSIC`) unless it exists;
    /// an existing index must have `dimension`.
    ///
    /// Cost: a `CreateIndex` and an `UpdateIndexMode`; a `CreateIndex` and
    /// a `GetIndex` when it existed in `ENHANCED` mode.
    ///
    /// # Errors
    /// [`IndexError::Vectors`]; [`IndexError::Corrupt`] when the existing
    /// index has another dimension.
    pub async fn ensure_index(&self, index: &str, dimension: usize) -> Result<(), IndexError> {
        let metadata = MetadataConfiguration::builder()
            .set_non_filterable_metadata_keys(Some(
                remote::NON_FILTERABLE_KEYS.iter().map(|k| (*k).to_owned()).collect(),
            ))
            .build()
            .map_err(|e| IndexError::Corrupt(e.to_string()))?;
        let created = self
            .client()
            .await
            .create_index()
            .vector_bucket_name(&self.bucket)
            .index_name(index)
            .data_type(DataType::Float32)
            .dimension(i32::try_from(dimension).unwrap_or(i32::MAX))
            .distance_metric(DistanceMetric::Cosine)
            .metadata_configuration(metadata)
            .send()
            .await;
        let mode = match created {
            Ok(_) => None,
            Err(e) if e.code() == Some("ConflictException") => {
                let got = self
                    .client()
                    .await
                    .get_index()
                    .vector_bucket_name(&self.bucket)
                    .index_name(index)
                    .send()
                    .await
                    .map_err(|e| failed("GetIndex", &e))?;
                let found = got.index().map(|i| i.dimension());
                if found != i32::try_from(dimension).ok() {
                    return Err(IndexError::Corrupt(format!(
                        "vector index {index} has dimension {found:?}, not the embedder's {dimension}"
                    )));
                }
                got.index().and_then(|i| i.index_mode().cloned())
            }
            Err(e) => return Err(failed("CreateIndex", &e)),
        };
        // A new index, or one whose creation did not get this far before.
        if mode != Some(IndexMode::Enhanced) {
            self.client()
                .await
                .update_index_mode()
                .vector_bucket_name(&self.bucket)
                .index_name(index)
                .index_mode(IndexMode::Enhanced)
                .send()
                .await
                .map_err(|e| failed("UpdateIndexMode", &e))?;
        }
        Ok(())
    }

    /// Deletes `index` (nothing when it does not exist). Cost: one call.
    ///
    /// # Errors
    /// [`IndexError::Vectors`].
    pub async fn delete_index(&self, index: &str) -> Result<(), IndexError> {
        match self.client().await.delete_index().vector_bucket_name(&self.bucket).index_name(index).send().await {
            Ok(_) => Ok(()),
            Err(e) if e.code() == Some("NotFoundException") => Ok(()),
            Err(e) => Err(failed("DeleteIndex", &e)),
        }
    }

    /// The `top_k` (at most 100) records nearest `vector` among those
    /// `filter` lets through, nearest first, each with its dot product with
    /// `vector`: the cosine similarity (`1 − distance`; stored vectors are
    /// unit length) times `vector`'s length, which is 1 but for a fused
    /// embedder's queries ([`crate::embed::ensemble`]). Vectors that carry
    /// no Skald record are skipped. Cost: one `QueryVectors`.
    ///
    /// # Errors
    /// [`IndexError::Vectors`].
    pub async fn query(
        &self,
        index: &str,
        vector: &[f32],
        top_k: usize,
        filter: Option<&Value>,
    ) -> Result<Vec<(Record, f64)>, IndexError> {
        let out = self
            .client()
            .await
            .query_vectors()
            .vector_bucket_name(&self.bucket)
            .index_name(index)
            .query_vector(VectorData::Float32(vector.to_vec()))
            .top_k(i32::try_from(top_k.clamp(1, MAX_TOP_K)).unwrap_or(1))
            .set_filter(filter.map(to_document))
            .return_metadata(true)
            .return_distance(true)
            .send()
            .await
            .map_err(|e| failed("QueryVectors", &e))?;
        let length = f64::from(crate::embed::dot(vector, vector).sqrt());
        Ok(out
            .vectors()
            .iter()
            .filter_map(|v| {
                let record = remote::record_of(&from_document(v.metadata()?))?;
                Some((record, (1.0 - f64::from(v.distance()?)) * length))
            })
            .collect())
    }

    /// The records stored under `keys` (missing keys are left out), with
    /// their vectors when `with_data`.
    ///
    /// Cost: one `GetVectors` per 100 keys, [`READ_CONCURRENCY`] at once.
    ///
    /// # Errors
    /// [`IndexError::Vectors`].
    pub async fn get(&self, index: &str, keys: &[String], with_data: bool) -> Result<Vec<Stored>, IndexError> {
        let batches: Vec<Vec<String>> = keys.chunks(MAX_GET_BATCH).map(<[String]>::to_vec).collect();
        let pages: Vec<Vec<Stored>> = stream::iter(batches)
            .map(|batch| async move {
                let out = self
                    .client()
                    .await
                    .get_vectors()
                    .vector_bucket_name(&self.bucket)
                    .index_name(index)
                    .set_keys(Some(batch))
                    .return_data(with_data)
                    .return_metadata(true)
                    .send()
                    .await
                    .map_err(|e| failed("GetVectors", &e))?;
                Ok::<_, IndexError>(
                    out.vectors()
                        .iter()
                        .filter_map(|v| {
                            let record = remote::record_of(&from_document(v.metadata()?))?;
                            let data = v.data().and_then(|d| d.as_float32().ok()).cloned();
                            Some((record, data))
                        })
                        .collect(),
                )
            })
            .buffered(READ_CONCURRENCY)
            .try_collect()
            .await?;
        Ok(pages.into_iter().flatten().collect())
    }

    /// Every record of `index`, with vectors when `with_data`, in key order.
    ///
    /// Cost: one `ListVectors` per 500 vectors (sequential pages).
    ///
    /// # Errors
    /// [`IndexError::Vectors`].
    pub async fn list(&self, index: &str, with_data: bool) -> Result<Vec<Stored>, IndexError> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page = self
                .client()
                .await
                .list_vectors()
                .vector_bucket_name(&self.bucket)
                .index_name(index)
                .max_results(500)
                .return_data(with_data)
                .return_metadata(true)
                .set_next_token(token.take())
                .send()
                .await
                .map_err(|e| failed("ListVectors", &e))?;
            out.extend(page.vectors().iter().filter_map(|v| {
                let record = remote::record_of(&from_document(v.metadata()?))?;
                Some((record, v.data().and_then(|d| d.as_float32().ok()).cloned()))
            }));
            match page.next_token() {
                Some(next) if !next.is_empty() => token = Some(next.to_owned()),
                _ => return Ok(out),
            }
        }
    }

    /// Upserts `records` (each with its vector) in batches of 500, paced
    /// to `rate` vectors a second at most.
    ///
    /// Cost: one `PutVectors` per 500 records, one at a time.
    ///
    /// Unknown outcomes: a batch that fails may have been written in part;
    /// writing it again is harmless (an upsert by key), which is what the
    /// caller does after the error.
    ///
    /// # Errors
    /// [`IndexError::Vectors`].
    pub async fn put(&self, index: &str, records: &[(&Record, &[f32])], rate: f64) -> Result<(), IndexError> {
        for batch in records.chunks(MAX_WRITE_BATCH) {
            let started = Instant::now();
            let vectors: Vec<PutInputVector> = batch
                .iter()
                .map(|(record, vector)| {
                    PutInputVector::builder()
                        .key(remote::vector_key(&record.uri, record.level))
                        .data(VectorData::Float32(vector.to_vec()))
                        .metadata(to_document(&remote::metadata(record)))
                        .build()
                        .map_err(|e| IndexError::Corrupt(e.to_string()))
                })
                .collect::<Result<_, _>>()?;
            self.client()
                .await
                .put_vectors()
                .vector_bucket_name(&self.bucket)
                .index_name(index)
                .set_vectors(Some(vectors))
                .send()
                .await
                .map_err(|e| failed("PutVectors", &e))?;
            pace(started, batch.len(), rate).await;
        }
        Ok(())
    }

    /// Deletes `keys` (missing ones are no error) in batches of 500.
    ///
    /// Cost: one `DeleteVectors` per 500 keys.
    ///
    /// # Errors
    /// [`IndexError::Vectors`].
    pub async fn delete(&self, index: &str, keys: &[String]) -> Result<(), IndexError> {
        for batch in keys.chunks(MAX_WRITE_BATCH) {
            self.client()
                .await
                .delete_vectors()
                .vector_bucket_name(&self.bucket)
                .index_name(index)
                .set_keys(Some(batch.to_vec()))
                .send()
                .await
                .map_err(|e| failed("DeleteVectors", &e))?;
        }
        Ok(())
    }
}

/// Sleeps so that `count` vectors written since `started` keep to `rate`.
async fn pace(started: Instant, count: usize, rate: f64) {
    if rate > 0.0 {
        let due = Duration::from_secs_f64(count as f64 / rate);
        if let Some(left) = due.checked_sub(started.elapsed()) {
            tokio::time::sleep(left).await;
        }
    }
}

fn failed<E: ProvideErrorMetadata + std::fmt::Display>(operation: &'static str, error: &E) -> IndexError {
    IndexError::Vectors {
        operation,
        code: error.code().map(str::to_owned),
        message: error.message().map_or_else(|| error.to_string(), str::to_owned),
    }
}

/// JSON as a smithy [`Document`] (the SDK's metadata and filter type):
/// integers stay integers, other numbers become floats.
#[must_use]
pub fn to_document(value: &Value) -> Document {
    match value {
        Value::Null => Document::Null,
        Value::Bool(b) => Document::Bool(*b),
        Value::Number(n) => Document::Number(if let Some(u) = n.as_u64() {
            Number::PosInt(u)
        } else if let Some(i) = n.as_i64() {
            Number::NegInt(i)
        } else {
            Number::Float(n.as_f64().unwrap_or(0.0))
        }),
        Value::String(s) => Document::String(s.clone()),
        Value::Array(items) => Document::Array(items.iter().map(to_document).collect()),
        Value::Object(map) => Document::Object(map.iter().map(|(k, v)| (k.clone(), to_document(v))).collect()),
    }
}

/// A smithy [`Document`] as JSON (the inverse of [`to_document`]; object
/// keys sorted, as a `Document` object is a hash map).
#[must_use]
pub fn from_document(document: &Document) -> Value {
    match document {
        Document::Null => Value::Null,
        Document::Bool(b) => Value::Bool(*b),
        Document::Number(Number::PosInt(u)) => Value::from(*u),
        Document::Number(Number::NegInt(i)) => Value::from(*i),
        Document::Number(Number::Float(f)) => Value::from(*f),
        Document::String(s) => Value::String(s.clone()),
        Document::Array(items) => Value::Array(items.iter().map(from_document).collect()),
        Document::Object(map) => {
            let sorted: std::collections::BTreeMap<&String, &Document> = map.iter().collect();
            Value::Object(sorted.into_iter().map(|(k, v)| (k.clone(), from_document(v))).collect())
        }
    }
}
