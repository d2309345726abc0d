//! An in-process Amazon S3 Vectors emulator for tests: the service's
//! REST-JSON protocol (`POST /<Operation>` with a JSON body) on a local
//! HTTP/1.1 port, so code using the real `aws-sdk-s3vectors` client is
//! exercised over HTTP without AWS.
//!
//! Operations: `CreateVectorBucket`, `GetVectorBucket`,
//! `DeleteVectorBucket`, `CreateIndex`, `GetIndex`, `DeleteIndex`,
//! `UpdateIndexMode`, `ListIndexes`, `PutVectors`, `GetVectors`, `DeleteVectors`,
//! `ListVectors` and `QueryVectors`. Anything else is a 404
//! `UnknownOperationException`. Requests are not authenticated.
//!
//! Behaviour follows the API reference and the "Limitations and
//! restrictions" page of the S3 User Guide:
//! - an index has dimension 1–4096, data type `float32`, distance metric
//!   `cosine` or `euclidean`, and at most 10 non-filterable metadata keys;
//! - `PutVectors` takes 1–500 vectors (an upsert by key, all or nothing)
//!   whose data has the index's dimension, with metadata of at most 50 keys
//!   and 40 KB in all, of which the filterable part (every key not declared
//!   non-filterable) is at most 2 KB; sizes are those of the compact JSON;
//! - `GetVectors` takes 1–100 keys, `DeleteVectors` 1–500, `ListVectors`
//!   pages of `maxResults` ≤ 1000 (default 500) in key order, with
//!   `segmentCount`/`segmentIndex` partitioning the keys by hash;
//! - `QueryVectors` takes `topK` 1–100 and searches exactly: `distance` is
//!   `1 − cos` (cosine) or the Euclidean distance, ascending, ties by key;
//!   its `filter` uses `$eq $ne $gt $gte $lt $lte $in $nin $exists $and
//!   $or` (a bare value is `$eq`) over the filterable metadata only. `$eq`
//!   and `$in` match a list value when any element matches; `$ne` and
//!   `$nin` are their negations, so they also match a vector without the
//!   key (as in MongoDB, whose syntax the service follows).
//!
//! Errors carry the code in `x-amzn-ErrorType` and a `{"message": …}`
//! body, which is what the SDK parses: `ValidationException` 400,
//! `NotFoundException` 404, `ConflictException` 409 (a name taken, or a
//! bucket that still has indexes), the statuses of the service model
//! (botocore's `s3vectors`; it also gives `ServiceQuotaExceededException`
//! 402, which the emulator never raises). The SDK picks the typed error by
//! the code, not the status. The suite `s3vectors_emulator` checks the
//! operations moto's s3vectors backend serves against it.
//!
//! ```no_run
//! # async fn demo() {
//! let emulator = skald_tests::s3vectors::start().await;
//! let client = skald_tests::s3vectors::client(&emulator.endpoint()).await;
//! client.create_vector_bucket().vector_bucket_name("bucket").send().await.expect("create");
//! # }
//! ```

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_s3vectors::config::retry::RetryConfig;
use aws_sdk_s3vectors::config::{BehaviorVersion, Credentials, Region};
use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Map, Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The account id in every ARN the emulator hands out.
pub const ACCOUNT: &str = "123456789012";
/// The region in every ARN, and the region of [`client`].
pub const REGION: &str = "us-east-1";

/// Vectors per `PutVectors` or `DeleteVectors` call.
pub const MAX_WRITE_VECTORS: usize = 500;
/// Keys per `GetVectors` call.
pub const MAX_GET_KEYS: usize = 100;
/// `topK` of a `QueryVectors` call.
pub const MAX_TOP_K: i64 = 100;
/// `maxResults` of a `ListVectors` call.
pub const MAX_LIST_VECTORS: i64 = 1000;
/// `maxResults` of a `ListIndexes` call.
pub const MAX_LIST_INDEXES: i64 = 500;
/// The largest dimension of an index.
pub const MAX_DIMENSION: i64 = 4096;
/// Non-filterable metadata keys of an index.
pub const MAX_NON_FILTERABLE_KEYS: usize = 10;
/// Metadata keys of one vector.
pub const MAX_METADATA_KEYS: usize = 50;
/// Bytes of one vector's metadata (compact JSON).
pub const MAX_METADATA_BYTES: usize = 40 * 1024;
/// Bytes of one vector's filterable metadata (compact JSON).
pub const MAX_FILTERABLE_BYTES: usize = 2 * 1024;

/// A running emulator; it stops serving when dropped.
pub struct Emulator {
    addr: SocketAddr,
    accept: JoinHandle<()>,
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for Emulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Emulator").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl Emulator {
    /// The endpoint to give the client, `http://127.0.0.1:PORT`.
    #[must_use]
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The operations called on `bucket` since the last take, in arrival
    /// order (e.g. `QueryVectors`), for tests that count round trips.
    #[must_use]
    pub fn take_calls(&self, bucket: &str) -> Vec<String> {
        take_calls(&self.state, bucket)
    }
}

fn take_calls(state: &Mutex<State>, bucket: &str) -> Vec<String> {
    let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
    let (mine, others): (Vec<_>, Vec<_>) = std::mem::take(&mut state.calls).into_iter().partition(|(_, b)| b == bucket);
    state.calls = others;
    mine.into_iter().map(|(op, _)| op).collect()
}

/// Starts an empty emulator on `127.0.0.1:0`, served on the current tokio
/// runtime.
///
/// # Panics
/// When no loopback port can be bound, or outside a tokio runtime.
pub async fn start() -> Emulator {
    let listener = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .expect("bind the S3 Vectors emulator to a loopback port");
    let addr = listener.local_addr().expect("the emulator's bound address");
    let state = Arc::new(Mutex::new(State::default()));
    let accept = tokio::spawn(accept_loop(listener, Arc::clone(&state)));
    Emulator { addr, accept, state }
}

/// An S3 Vectors client for `endpoint`: static credentials (`test`/`test`),
/// region `us-east-1`, no retries; it never consults the environment.
pub async fn client(endpoint: &str) -> aws_sdk_s3vectors::Client {
    let config = aws_sdk_s3vectors::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(REGION))
        .credentials_provider(Credentials::new("test", "test", None, None, "skald-tests"))
        .endpoint_url(endpoint)
        .retry_config(RetryConfig::disabled())
        .build();
    aws_sdk_s3vectors::Client::from_conf(config)
}

/// JSON ↔ smithy `Document` (metadata and filters are
/// documents in the SDK), as the library converts them.
pub use skald::index::s3vectors::{from_document, to_document};

#[derive(Default)]
struct State {
    buckets: BTreeMap<String, Bucket>,
    /// Operations called and the bucket each named, for
    /// [`Emulator::take_calls`].
    calls: Vec<(String, String)>,
}

struct Bucket {
    created: f64,
    indexes: BTreeMap<String, Index>,
}

struct Index {
    created: f64,
    /// `CLASSIC` (new indexes, as in a bucket created before September
    /// 2026) or `ENHANCED` (`UpdateIndexMode`); queries filter exactly in
    /// either.
    mode: &'static str,
    dimension: usize,
    metric: String,
    non_filterable: Vec<String>,
    vectors: BTreeMap<String, Stored>,
}

#[derive(Clone)]
struct Stored {
    data: Vec<f32>,
    metadata: Option<Map<String, Value>>,
}

/// A service error: HTTP status, error code and message.
struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

type Outcome = Result<Value, ApiError>;

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError { status: StatusCode::BAD_REQUEST, code: "ValidationException", message: message.into() }
}

fn not_found(message: impl Into<String>) -> ApiError {
    ApiError { status: StatusCode::NOT_FOUND, code: "NotFoundException", message: message.into() }
}

fn conflict(message: impl Into<String>) -> ApiError {
    ApiError { status: StatusCode::CONFLICT, code: "ConflictException", message: message.into() }
}

async fn accept_loop(listener: TcpListener, state: Arc<Mutex<State>>) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Transient (e.g. too many open files): back off briefly.
                eprintln!("s3vectors emulator: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let state = Arc::clone(&state);
        tokio::spawn(async move {
            let service = service_fn(move |req| handle(Arc::clone(&state), req));
            // A client that goes away mid-request is not the server's error.
            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

async fn handle(state: Arc<Mutex<State>>, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = req.into_parts();
    let outcome = match body.collect().await {
        Err(e) => Err(invalid(format!("unreadable request body: {e}"))),
        Ok(collected) => {
            let bytes = collected.to_bytes();
            let body = if bytes.is_empty() { Ok(json!({})) } else { serde_json::from_slice::<Value>(&bytes) };
            match body {
                Err(e) => Err(invalid(format!("the request body is not JSON: {e}"))),
                Ok(body) if !body.is_object() => Err(invalid("the request body is not a JSON object")),
                Ok(body) if parts.method != Method::POST => {
                    let _ = body;
                    Err(ApiError {
                        status: StatusCode::METHOD_NOT_ALLOWED,
                        code: "UnknownOperationException",
                        message: format!("{} is not supported", parts.method),
                    })
                }
                Ok(body) => {
                    let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
                    let bucket = body.get("vectorBucketName").and_then(Value::as_str).unwrap_or_default().to_owned();
                    state.calls.push((parts.uri.path().trim_start_matches('/').to_owned(), bucket));
                    dispatch(&mut state, parts.uri.path(), &body)
                }
            }
        }
    };
    let (status, body, code) = match outcome {
        Ok(value) => (StatusCode::OK, value, None),
        Err(e) => (e.status, json!({ "message": e.message }), Some(e.code)),
    };
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(code) = code {
        response.headers_mut().insert("x-amzn-errortype", HeaderValue::from_static(code));
    }
    Ok(response)
}

fn dispatch(state: &mut State, path: &str, body: &Value) -> Outcome {
    match path {
        "/CreateVectorBucket" => create_vector_bucket(state, body),
        "/GetVectorBucket" => get_vector_bucket(state, body),
        "/DeleteVectorBucket" => delete_vector_bucket(state, body),
        "/CreateIndex" => create_index(state, body),
        "/GetIndex" => get_index(state, body),
        "/DeleteIndex" => delete_index(state, body),
        "/UpdateIndexMode" => update_index_mode(state, body),
        "/ListIndexes" => list_indexes(state, body),
        "/PutVectors" => put_vectors(state, body),
        "/GetVectors" => get_vectors(state, body),
        "/DeleteVectors" => delete_vectors(state, body),
        "/ListVectors" => list_vectors(state, body),
        "/QueryVectors" => query_vectors(state, body),
        other => Err(ApiError {
            status: StatusCode::NOT_FOUND,
            code: "UnknownOperationException",
            message: format!("unknown operation {other}"),
        }),
    }
}

fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64().floor())
}

fn bucket_arn(bucket: &str) -> String {
    format!("arn:aws:s3vectors:{REGION}:{ACCOUNT}:bucket/{bucket}")
}

fn index_arn(bucket: &str, index: &str) -> String {
    format!("{}/index/{index}", bucket_arn(bucket))
}

fn string_field<'a>(body: &'a Value, name: &str) -> Result<Option<&'a str>, ApiError> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(invalid(format!("{name} must be a string"))),
    }
}

fn bool_field(body: &Value, name: &str) -> Result<bool, ApiError> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(invalid(format!("{name} must be a boolean"))),
    }
}

fn int_field(body: &Value, name: &str) -> Result<Option<i64>, ApiError> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_i64().map(Some).ok_or_else(|| invalid(format!("{name} must be an integer"))),
    }
}

/// A name of 3–63 characters: lowercase letters, digits, hyphens (and dots
/// for index names), starting and ending with a letter or digit.
fn check_name(kind: &str, name: &str, dots: bool) -> Result<(), ApiError> {
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || (dots && c == '.');
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if !(3..=63).contains(&name.len())
        || !name.chars().all(allowed)
        || !edge(name.chars().next())
        || !edge(name.chars().last())
    {
        return Err(invalid(format!("invalid {kind} name {name:?}")));
    }
    Ok(())
}

/// The bucket a request names, by `vectorBucketName` or `vectorBucketArn`.
fn bucket_name(body: &Value) -> Result<String, ApiError> {
    if let Some(name) = string_field(body, "vectorBucketName")? {
        return Ok(name.to_owned());
    }
    let arn = string_field(body, "vectorBucketArn")?
        .ok_or_else(|| invalid("vectorBucketName or vectorBucketArn is required"))?;
    let prefix = bucket_arn("");
    arn.strip_prefix(&prefix)
        .filter(|rest| !rest.is_empty() && !rest.contains('/'))
        .map(str::to_owned)
        .ok_or_else(|| invalid(format!("invalid vector bucket ARN {arn:?}")))
}

/// The bucket and index a request names, by names or by `indexArn`.
fn index_names(body: &Value) -> Result<(String, String), ApiError> {
    if let Some(arn) = string_field(body, "indexArn")? {
        let prefix = bucket_arn("");
        let parsed = arn.strip_prefix(&prefix).and_then(|rest| rest.split_once("/index/"));
        return match parsed {
            Some((bucket, index)) if !bucket.is_empty() && !index.is_empty() && !index.contains('/') => {
                Ok((bucket.to_owned(), index.to_owned()))
            }
            _ => Err(invalid(format!("invalid index ARN {arn:?}"))),
        };
    }
    let bucket =
        string_field(body, "vectorBucketName")?.ok_or_else(|| invalid("vectorBucketName or indexArn is required"))?;
    let index = string_field(body, "indexName")?.ok_or_else(|| invalid("indexName or indexArn is required"))?;
    Ok((bucket.to_owned(), index.to_owned()))
}

fn bucket<'a>(state: &'a mut State, name: &str) -> Result<&'a mut Bucket, ApiError> {
    state.buckets.get_mut(name).ok_or_else(|| not_found(format!("vector bucket {name} not found")))
}

fn index<'a>(state: &'a mut State, body: &Value) -> Result<(String, String, &'a mut Index), ApiError> {
    let (bucket_name, index_name) = index_names(body)?;
    let found = bucket(state, &bucket_name)?
        .indexes
        .get_mut(&index_name)
        .ok_or_else(|| not_found(format!("index {index_name} not found in vector bucket {bucket_name}")))?;
    Ok((bucket_name, index_name, found))
}

fn create_vector_bucket(state: &mut State, body: &Value) -> Outcome {
    let name = string_field(body, "vectorBucketName")?.ok_or_else(|| invalid("vectorBucketName is required"))?;
    check_name("vector bucket", name, false)?;
    if state.buckets.contains_key(name) {
        return Err(conflict(format!("vector bucket {name} already exists")));
    }
    state.buckets.insert(name.to_owned(), Bucket { created: now(), indexes: BTreeMap::new() });
    Ok(json!({ "vectorBucketArn": bucket_arn(name) }))
}

fn get_vector_bucket(state: &mut State, body: &Value) -> Outcome {
    let name = bucket_name(body)?;
    let found = bucket(state, &name)?;
    Ok(json!({ "vectorBucket": {
        "vectorBucketName": name,
        "vectorBucketArn": bucket_arn(&name),
        "creationTime": found.created,
        "encryptionConfiguration": { "sseType": "AES256" },
    }}))
}

fn delete_vector_bucket(state: &mut State, body: &Value) -> Outcome {
    let name = bucket_name(body)?;
    if !bucket(state, &name)?.indexes.is_empty() {
        return Err(conflict(format!("vector bucket {name} is not empty: delete its indexes first")));
    }
    state.buckets.remove(&name);
    Ok(json!({}))
}

fn create_index(state: &mut State, body: &Value) -> Outcome {
    let index_name = string_field(body, "indexName")?.ok_or_else(|| invalid("indexName is required"))?;
    check_name("index", index_name, true)?;
    match string_field(body, "dataType")? {
        Some("float32") => {}
        other => return Err(invalid(format!("dataType must be float32, not {other:?}"))),
    }
    let dimension = int_field(body, "dimension")?.ok_or_else(|| invalid("dimension is required"))?;
    if !(1..=MAX_DIMENSION).contains(&dimension) {
        return Err(invalid(format!("dimension must be between 1 and {MAX_DIMENSION}, not {dimension}")));
    }
    let metric = match string_field(body, "distanceMetric")? {
        Some(m @ ("cosine" | "euclidean")) => m.to_owned(),
        other => return Err(invalid(format!("distanceMetric must be cosine or euclidean, not {other:?}"))),
    };
    let mut non_filterable = Vec::new();
    if let Some(config) = body.get("metadataConfiguration").filter(|c| !c.is_null()) {
        let keys = config
            .get("nonFilterableMetadataKeys")
            .and_then(Value::as_array)
            .ok_or_else(|| invalid("metadataConfiguration.nonFilterableMetadataKeys must be a list"))?;
        if keys.is_empty() || keys.len() > MAX_NON_FILTERABLE_KEYS {
            return Err(invalid(format!(
                "metadataConfiguration.nonFilterableMetadataKeys must have 1 to {MAX_NON_FILTERABLE_KEYS} keys, not {}",
                keys.len()
            )));
        }
        for key in keys {
            match key.as_str() {
                Some(k) if (1..=63).contains(&k.len()) => non_filterable.push(k.to_owned()),
                _ => return Err(invalid(format!("invalid non-filterable metadata key {key}"))),
            }
        }
    }
    let bucket_name = bucket_name(body)?;
    let found = bucket(state, &bucket_name)?;
    if found.indexes.contains_key(index_name) {
        return Err(conflict(format!("index {index_name} already exists in vector bucket {bucket_name}")));
    }
    let dimension = usize::try_from(dimension).map_err(|_| invalid("dimension out of range"))?;
    found.indexes.insert(
        index_name.to_owned(),
        Index { created: now(), mode: "CLASSIC", dimension, metric, non_filterable, vectors: BTreeMap::new() },
    );
    Ok(json!({ "indexArn": index_arn(&bucket_name, index_name) }))
}

fn get_index(state: &mut State, body: &Value) -> Outcome {
    let (bucket_name, index_name, found) = index(state, body)?;
    let mut index = json!({
        "vectorBucketName": bucket_name,
        "indexName": index_name,
        "indexArn": index_arn(&bucket_name, &index_name),
        "creationTime": found.created,
        "dataType": "float32",
        "dimension": found.dimension,
        "distanceMetric": found.metric,
        "indexMode": found.mode,
    });
    if !found.non_filterable.is_empty() {
        index["metadataConfiguration"] = json!({ "nonFilterableMetadataKeys": found.non_filterable });
    }
    Ok(json!({ "index": index }))
}

fn update_index_mode(state: &mut State, body: &Value) -> Outcome {
    let mode = match string_field(body, "indexMode")? {
        Some("CLASSIC") => "CLASSIC",
        Some("ENHANCED") => "ENHANCED",
        Some(other) => return Err(invalid(format!("indexMode must be CLASSIC or ENHANCED, not {other}"))),
        None => return Err(invalid("indexMode is required")),
    };
    let (_, _, found) = index(state, body)?;
    found.mode = mode;
    Ok(json!({}))
}

fn delete_index(state: &mut State, body: &Value) -> Outcome {
    let (bucket_name, index_name) = index_names(body)?;
    let found = bucket(state, &bucket_name)?;
    if found.indexes.remove(&index_name).is_none() {
        return Err(not_found(format!("index {index_name} not found in vector bucket {bucket_name}")));
    }
    Ok(json!({}))
}

/// A page size: `maxResults` in 1..=`max`, else `default`.
fn page_size(body: &Value, max: i64, default: usize) -> Result<usize, ApiError> {
    match int_field(body, "maxResults")? {
        None => Ok(default),
        Some(n) if (1..=max).contains(&n) => usize::try_from(n).map_err(|_| invalid("maxResults out of range")),
        Some(n) => Err(invalid(format!("maxResults must be between 1 and {max}, not {n}"))),
    }
}

/// A page token: the hex of the last key of the previous page.
fn encode_token(key: &str) -> String {
    key.bytes().map(|b| format!("{b:02x}")).collect()
}

fn decode_token(body: &Value) -> Result<Option<String>, ApiError> {
    let Some(token) = string_field(body, "nextToken")? else { return Ok(None) };
    let bad = || invalid(format!("invalid nextToken {token:?}"));
    if token.len() % 2 != 0 {
        return Err(bad());
    }
    let bytes: Option<Vec<u8>> =
        (0..token.len()).step_by(2).map(|i| u8::from_str_radix(token.get(i..i + 2)?, 16).ok()).collect();
    String::from_utf8(bytes.ok_or_else(bad)?).map(Some).map_err(|_| bad())
}

fn list_indexes(state: &mut State, body: &Value) -> Outcome {
    let bucket_name = bucket_name(body)?;
    let size = page_size(body, MAX_LIST_INDEXES, MAX_LIST_INDEXES as usize)?;
    let after = decode_token(body)?;
    let prefix = string_field(body, "prefix")?.unwrap_or("").to_owned();
    let found = bucket(state, &bucket_name)?;
    let matching: Vec<(&String, &Index)> = found
        .indexes
        .iter()
        .filter(|(name, _)| name.starts_with(&prefix) && after.as_ref().is_none_or(|a| *name > a))
        .take(size + 1)
        .collect();
    let more = matching.len() > size;
    let page = &matching[..matching.len().min(size)];
    let indexes: Vec<Value> = page
        .iter()
        .map(|(name, index)| {
            json!({
                "vectorBucketName": bucket_name,
                "indexName": name,
                "indexArn": index_arn(&bucket_name, name),
                "creationTime": index.created,
            })
        })
        .collect();
    let mut out = json!({ "indexes": indexes });
    if more && let Some((last, _)) = page.last() {
        out["nextToken"] = Value::String(encode_token(last));
    }
    Ok(out)
}

/// The float32 data of a `VectorData` union (`{"float32": [...]}`) of
/// `dimension` values.
fn vector_data(value: Option<&Value>, dimension: usize, what: &str) -> Result<Vec<f32>, ApiError> {
    let values = value
        .and_then(|v| v.get("float32"))
        .and_then(Value::as_array)
        .ok_or_else(|| invalid(format!("{what} must be a float32 vector")))?;
    if values.len() != dimension {
        return Err(invalid(format!("{what} has dimension {}, the index has dimension {dimension}", values.len())));
    }
    #[allow(clippy::cast_possible_truncation)] // the service stores float32
    values
        .iter()
        .map(|v| {
            v.as_f64()
                .filter(|f| f.is_finite())
                .map(|f| f as f32)
                .ok_or_else(|| invalid(format!("{what} has a non-finite value")))
        })
        .collect()
}

fn compact_len(map: &Map<String, Value>) -> usize {
    Value::Object(map.clone()).to_string().len()
}

/// Checks a vector's metadata against the limits.
fn check_metadata(key: &str, metadata: &Map<String, Value>, non_filterable: &[String]) -> Result<(), ApiError> {
    if metadata.len() > MAX_METADATA_KEYS {
        return Err(invalid(format!("vector {key}: {} metadata keys, at most {MAX_METADATA_KEYS}", metadata.len())));
    }
    let total = compact_len(metadata);
    if total > MAX_METADATA_BYTES {
        return Err(invalid(format!("vector {key}: metadata of {total} bytes, at most {MAX_METADATA_BYTES}")));
    }
    let filterable: Map<String, Value> =
        metadata.iter().filter(|(k, _)| !non_filterable.contains(k)).map(|(k, v)| (k.clone(), v.clone())).collect();
    let size = compact_len(&filterable);
    if size > MAX_FILTERABLE_BYTES {
        return Err(invalid(format!(
            "vector {key}: filterable metadata of {size} bytes, at most {MAX_FILTERABLE_BYTES}"
        )));
    }
    Ok(())
}

fn put_vectors(state: &mut State, body: &Value) -> Outcome {
    let vectors = body.get("vectors").and_then(Value::as_array).ok_or_else(|| invalid("vectors is required"))?;
    if vectors.is_empty() || vectors.len() > MAX_WRITE_VECTORS {
        return Err(invalid(format!("vectors must have 1 to {MAX_WRITE_VECTORS} members, not {}", vectors.len())));
    }
    let (_, _, index) = index(state, body)?;
    let mut parsed = Vec::with_capacity(vectors.len());
    for vector in vectors {
        let key = vector.get("key").and_then(Value::as_str).ok_or_else(|| invalid("every vector needs a key"))?;
        if !(1..=1024).contains(&key.len()) {
            return Err(invalid(format!("vector key of {} bytes, must be 1 to 1024", key.len())));
        }
        let data = vector_data(vector.get("data"), index.dimension, &format!("vector {key}"))?;
        if index.metric == "cosine" && data.iter().all(|x| *x == 0.0) {
            return Err(invalid(format!("vector {key}: a zero vector has no cosine distance")));
        }
        let metadata = match vector.get("metadata") {
            None | Some(Value::Null) => None,
            Some(Value::Object(map)) => {
                check_metadata(key, map, &index.non_filterable)?;
                Some(map.clone())
            }
            Some(_) => return Err(invalid(format!("vector {key}: metadata must be a JSON object"))),
        };
        parsed.push((key.to_owned(), Stored { data, metadata }));
    }
    index.vectors.extend(parsed);
    Ok(json!({}))
}

/// The `keys` list of a request, 1..=`max` strings.
fn keys(body: &Value, max: usize) -> Result<Vec<&str>, ApiError> {
    let keys = body.get("keys").and_then(Value::as_array).ok_or_else(|| invalid("keys is required"))?;
    if keys.is_empty() || keys.len() > max {
        return Err(invalid(format!("keys must have 1 to {max} members, not {}", keys.len())));
    }
    keys.iter()
        .map(|k| k.as_str().filter(|k| !k.is_empty()).ok_or_else(|| invalid("every key must be a non-empty string")))
        .collect()
}

/// A vector as GetVectors and ListVectors return it.
fn output_vector(key: &str, stored: &Stored, data: bool, metadata: bool) -> Value {
    let mut out = json!({ "key": key });
    if data {
        out["data"] = json!({ "float32": stored.data });
    }
    if metadata && let Some(m) = &stored.metadata {
        out["metadata"] = Value::Object(m.clone());
    }
    out
}

fn get_vectors(state: &mut State, body: &Value) -> Outcome {
    let keys = keys(body, MAX_GET_KEYS)?;
    let (data, metadata) = (bool_field(body, "returnData")?, bool_field(body, "returnMetadata")?);
    let (_, _, index) = index(state, body)?;
    let vectors: Vec<Value> = keys
        .iter()
        .filter_map(|k| index.vectors.get(*k).map(|stored| output_vector(k, stored, data, metadata)))
        .collect();
    Ok(json!({ "vectors": vectors }))
}

fn delete_vectors(state: &mut State, body: &Value) -> Outcome {
    let keys = keys(body, MAX_WRITE_VECTORS)?;
    let (_, _, index) = index(state, body)?;
    for key in keys {
        index.vectors.remove(key);
    }
    Ok(json!({}))
}

/// FNV-1a, for the segments of a parallel ListVectors.
fn fnv1a(key: &str) -> u64 {
    key.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

fn list_vectors(state: &mut State, body: &Value) -> Outcome {
    let size = page_size(body, MAX_LIST_VECTORS, 500)?;
    let after = decode_token(body)?;
    let (data, metadata) = (bool_field(body, "returnData")?, bool_field(body, "returnMetadata")?);
    let segments = match (int_field(body, "segmentCount")?, int_field(body, "segmentIndex")?) {
        (None, None) => None,
        (Some(count), Some(index)) if (1..=16).contains(&count) && (0..count).contains(&index) => {
            Some((count.unsigned_abs(), index.unsigned_abs()))
        }
        _ => return Err(invalid("segmentCount (1 to 16) and segmentIndex (below it) go together")),
    };
    let (_, _, index) = index(state, body)?;
    let matching: Vec<(&String, &Stored)> = index
        .vectors
        .iter()
        .filter(|(key, _)| after.as_ref().is_none_or(|a| *key > a))
        .filter(|(key, _)| segments.is_none_or(|(count, i)| fnv1a(key) % count == i))
        .take(size + 1)
        .collect();
    let more = matching.len() > size;
    let page = &matching[..matching.len().min(size)];
    let vectors: Vec<Value> = page.iter().map(|(key, stored)| output_vector(key, stored, data, metadata)).collect();
    let mut out = json!({ "vectors": vectors });
    if more && let Some((last, _)) = page.last() {
        out["nextToken"] = Value::String(encode_token(last));
    }
    Ok(out)
}

fn distance(metric: &str, a: &[f32], b: &[f32]) -> f64 {
    let pairs = a.iter().zip(b).map(|(x, y)| (f64::from(*x), f64::from(*y)));
    if metric == "euclidean" {
        pairs.map(|(x, y)| (x - y) * (x - y)).sum::<f64>().sqrt()
    } else {
        let (mut dot, mut na, mut nb) = (0.0, 0.0, 0.0);
        for (x, y) in pairs {
            dot += x * y;
            na += x * x;
            nb += y * y;
        }
        1.0 - dot / (na.sqrt() * nb.sqrt())
    }
}

fn query_vectors(state: &mut State, body: &Value) -> Outcome {
    let top_k = int_field(body, "topK")?.ok_or_else(|| invalid("topK is required"))?;
    if !(1..=MAX_TOP_K).contains(&top_k) {
        return Err(invalid(format!("topK must be between 1 and {MAX_TOP_K}, not {top_k}")));
    }
    let top_k = usize::try_from(top_k).map_err(|_| invalid("topK out of range"))?;
    let (want_metadata, want_distance) = (bool_field(body, "returnMetadata")?, bool_field(body, "returnDistance")?);
    let filter = match body.get("filter") {
        None | Some(Value::Null) => None,
        Some(f) => Some(Filter::parse(f)?),
    };
    let (_, _, index) = index(state, body)?;
    let empty = Map::new();
    let query = vector_data(body.get("queryVector"), index.dimension, "queryVector")?;
    let mut hits: Vec<(f64, &String, &Stored)> = index
        .vectors
        .iter()
        .filter(|(_, stored)| {
            filter.as_ref().is_none_or(|f| {
                let metadata = stored.metadata.as_ref().unwrap_or(&empty);
                f.matches(&|k: &str| if index.non_filterable.iter().any(|n| n == k) { None } else { metadata.get(k) })
            })
        })
        .map(|(key, stored)| (distance(&index.metric, &query, &stored.data), key, stored))
        .collect();
    hits.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(b.1)));
    hits.truncate(top_k);
    let vectors: Vec<Value> = hits
        .iter()
        .map(|(d, key, stored)| {
            let mut out = json!({ "key": key });
            if want_distance {
                out["distance"] = json!(d);
            }
            if want_metadata && let Some(m) = &stored.metadata {
                out["metadata"] = Value::Object(m.clone());
            }
            out
        })
        .collect();
    Ok(json!({ "vectors": vectors, "distanceMetric": index.metric }))
}

/// A parsed metadata filter.
enum Filter {
    And(Vec<Filter>),
    Or(Vec<Filter>),
    Field(String, Condition),
}

/// One operator applied to one field.
enum Condition {
    Eq(Value),
    Ne(Value),
    Cmp(&'static str, f64),
    In(Vec<Value>),
    Nin(Vec<Value>),
    Exists(bool),
}

fn is_primitive(v: &Value) -> bool {
    matches!(v, Value::String(_) | Value::Number(_) | Value::Bool(_))
}

fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

/// Whether a stored value equals `v`, or (a list) has an element equal to it.
fn holds(stored: &Value, v: &Value) -> bool {
    match stored {
        Value::Array(items) => items.iter().any(|item| same(item, v)),
        other => same(other, v),
    }
}

impl Filter {
    fn parse(value: &Value) -> Result<Self, ApiError> {
        let map = value.as_object().ok_or_else(|| invalid("a filter must be a JSON object"))?;
        if map.is_empty() {
            return Err(invalid("a filter must not be empty"));
        }
        let mut all = Vec::with_capacity(map.len());
        for (key, v) in map {
            all.push(match key.as_str() {
                "$and" | "$or" => {
                    let items = v
                        .as_array()
                        .filter(|a| !a.is_empty())
                        .ok_or_else(|| invalid(format!("{key} takes a non-empty list of filters")))?;
                    let parsed = items.iter().map(Self::parse).collect::<Result<Vec<_>, _>>()?;
                    if key == "$and" { Self::And(parsed) } else { Self::Or(parsed) }
                }
                k if k.starts_with('$') => return Err(invalid(format!("unknown filter operator {k}"))),
                field => Self::parse_field(field, v)?,
            });
        }
        Ok(if all.len() == 1 { all.remove(0) } else { Self::And(all) })
    }

    fn parse_field(field: &str, value: &Value) -> Result<Self, ApiError> {
        if is_primitive(value) {
            return Ok(Self::Field(field.to_owned(), Condition::Eq(value.clone())));
        }
        let ops = value
            .as_object()
            .filter(|o| !o.is_empty())
            .ok_or_else(|| invalid(format!("invalid condition for {field}")))?;
        let mut all = Vec::with_capacity(ops.len());
        for (op, operand) in ops {
            let primitive = || {
                Some(operand.clone())
                    .filter(is_primitive)
                    .ok_or_else(|| invalid(format!("{op} takes a string, number or boolean")))
            };
            let number = || operand.as_f64().ok_or_else(|| invalid(format!("{op} takes a number")));
            let list = || {
                operand
                    .as_array()
                    .filter(|a| !a.is_empty() && a.iter().all(is_primitive))
                    .cloned()
                    .ok_or_else(|| invalid(format!("{op} takes a non-empty list of strings, numbers or booleans")))
            };
            let condition = match op.as_str() {
                "$eq" => Condition::Eq(primitive()?),
                "$ne" => Condition::Ne(primitive()?),
                "$gt" => Condition::Cmp("$gt", number()?),
                "$gte" => Condition::Cmp("$gte", number()?),
                "$lt" => Condition::Cmp("$lt", number()?),
                "$lte" => Condition::Cmp("$lte", number()?),
                "$in" => Condition::In(list()?),
                "$nin" => Condition::Nin(list()?),
                "$exists" => Condition::Exists(operand.as_bool().ok_or_else(|| invalid("$exists takes a boolean"))?),
                other => return Err(invalid(format!("unknown filter operator {other}"))),
            };
            all.push(Self::Field(field.to_owned(), condition));
        }
        Ok(if all.len() == 1 { all.remove(0) } else { Self::And(all) })
    }

    /// Whether metadata (`get` returns a filterable key's value) passes.
    fn matches<'a>(&self, get: &dyn Fn(&str) -> Option<&'a Value>) -> bool {
        match self {
            Self::And(all) => all.iter().all(|f| f.matches(get)),
            Self::Or(any) => any.iter().any(|f| f.matches(get)),
            Self::Field(field, condition) => {
                let stored = get(field);
                match condition {
                    Condition::Eq(v) => stored.is_some_and(|s| holds(s, v)),
                    Condition::Ne(v) => !stored.is_some_and(|s| holds(s, v)),
                    Condition::In(vs) => stored.is_some_and(|s| vs.iter().any(|v| holds(s, v))),
                    Condition::Nin(vs) => !stored.is_some_and(|s| vs.iter().any(|v| holds(s, v))),
                    Condition::Exists(want) => stored.is_some() == *want,
                    Condition::Cmp(op, bound) => stored.and_then(Value::as_f64).is_some_and(|x| match *op {
                        "$gt" => x > *bound,
                        "$gte" => x >= *bound,
                        "$lt" => x < *bound,
                        _ => x <= *bound,
                    }),
                }
            }
        }
    }
}

/// The endpoint of a process-wide emulator, started on first use on a
/// thread of its own (a test's runtime ends with the test; this one lives
/// as long as the process). Tests sharing it keep apart by bucket.
///
/// # Panics
/// When the emulator's thread or runtime cannot start.
#[must_use]
pub fn shared_endpoint() -> &'static str {
    &shared().0
}

/// The operations called on `bucket` of the [`shared_endpoint`] emulator
/// since the last take ([`Emulator::take_calls`]).
#[must_use]
pub fn take_shared_calls(bucket: &str) -> Vec<String> {
    take_calls(&shared().1, bucket)
}

fn shared() -> &'static (String, Arc<Mutex<State>>) {
    static SHARED: std::sync::OnceLock<(String, Arc<Mutex<State>>)> = std::sync::OnceLock::new();
    SHARED.get_or_init(|| {
        let (sent, received) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("s3vectors-emulator".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("the emulator's runtime");
                runtime.block_on(async move {
                    let emulator = start().await;
                    sent.send((emulator.endpoint(), Arc::clone(&emulator.state))).expect("hand over the endpoint");
                    // Serve until the process exits.
                    std::future::pending::<()>().await;
                    drop(emulator);
                });
            })
            .expect("the emulator's thread");
        received.recv().expect("the emulator's endpoint")
    })
}

/// A fresh, uniquely named vector bucket in the [`shared_endpoint`]
/// emulator, as the library's [`skald::index::s3vectors::VectorBucket`]
/// (accounts' indexes named `skald-…`). Synchronous: the bucket is
/// created on a thread of its own, so it can be called anywhere.
///
/// # Panics
/// When the bucket cannot be created.
#[must_use]
pub fn fresh_bucket() -> skald::index::s3vectors::VectorBucket {
    bucket_at(shared_endpoint())
}

/// [`fresh_bucket`] in the emulator at `endpoint` (which must be served
/// by a runtime other than the caller's: the caller's thread waits).
fn bucket_at(endpoint: &str) -> skald::index::s3vectors::VectorBucket {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = format!("skald-test-{}-{n}", std::process::id());
    let endpoint = endpoint.to_owned();
    let bucket = name.clone();
    let at = endpoint.clone();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        runtime.block_on(async {
            let client = client(&at).await;
            client.create_vector_bucket().vector_bucket_name(&bucket).send().await.expect("create a vector bucket");
        });
    })
    .join()
    .expect("the bucket's thread");
    let config = aws_sdk_s3vectors::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(REGION))
        .credentials_provider(Credentials::new("test", "test", None, None, "skald-tests"))
        .endpoint_url(&endpoint)
        .build();
    skald::index::s3vectors::VectorBucket::from_client(aws_sdk_s3vectors::Client::from_conf(config), &name, "skald-")
}
