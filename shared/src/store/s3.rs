//! The S3 store: production's backend, built on `aws-sdk-s3`.
//!
//! Objects live at `{prefix}/{key}` in one bucket (just `{key}` when the
//! prefix is empty). Conditional writes use S3's own preconditions —
//! `If-None-Match: *` for [`PutMode::CreateNew`] and `If-Match: "<etag>"` for
//! [`PutMode::IfMatch`] — and every way the service says "precondition not
//! met" (412 `PreconditionFailed`, 409 `ConditionalRequestConflict`, and for
//! `If-Match` a 404 `NoSuchKey`, which some servers send for a missing object)
//! comes back as [`StoreError::Conflict`]. Etags are the service's ETag
//! without its surrounding quotes.
//!
//! A missing key is [`StoreError::NotFound`]; a missing bucket is a `Backend`
//! error, except for [`Store::head`], whose bare 404 cannot tell them apart.

use async_trait::async_trait;
use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use bytes::Bytes;

use super::{DirListing, Object, ObjectMeta, PutMode, Store, StoreError, cut_listing, validate_key};

/// The SDK this backend is built on, re-exported so that callers (tests,
/// tools) can build their own [`aws_sdk_s3::Client`] for
/// [`S3Store::from_client`] without depending on it themselves.
pub use aws_sdk_s3;

/// The region used when neither [`S3Options::region`] nor the environment
/// names one.
const DEFAULT_REGION: &str = "us-east-1";

/// How [`S3Store::connect`] builds its client; everything else (credentials,
/// retries, timeouts) comes from the standard AWS configuration chain.
#[derive(Debug, Clone, Default)]
pub struct S3Options {
    /// An endpoint to use instead of AWS's (a local S3-protocol server such
    /// as moto, or a gateway). Default: none, the regional AWS endpoint.
    pub endpoint_url: Option<String>,
    /// Address buckets as `endpoint/bucket/key` instead of
    /// `bucket.endpoint/key`; local servers usually need it. Default: false.
    pub force_path_style: bool,
    /// The region. Default: the one the environment or profile names, else
    /// `us-east-1`.
    pub region: Option<String>,
}

/// A store in an S3 bucket under a key prefix. Cheap to clone (the client is
/// reference-counted).
#[derive(Clone)]
pub struct S3Store {
    client: aws_sdk_s3::Client,
    bucket: String,
    /// Without leading or trailing slash; may be empty.
    prefix: String,
}

impl std::fmt::Debug for S3Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Store").field("bucket", &self.bucket).field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

impl S3Store {
    /// `ListObjectsV2` pages under `prefix` (store-relative), with
    /// `delimiter` when given, until the listing ends or at least `enough`
    /// objects and common prefixes came back: the objects (store-relative
    /// keys) and the common prefixes (relative to `prefix`, with their
    /// delimiter).
    async fn list_pages(
        &self,
        prefix: &str,
        delimiter: Option<&str>,
        enough: usize,
    ) -> Result<(Vec<ObjectMeta>, Vec<String>), StoreError> {
        let root = if self.prefix.is_empty() { String::new() } else { format!("{}/", self.prefix) };
        let full_prefix = format!("{root}{prefix}");
        let (mut objects, mut prefixes) = (Vec::new(), Vec::new());
        let mut token: Option<String> = None;
        loop {
            let output = self
                .client
                .list_objects_v2()
                .bucket(&self.bucket)
                .prefix(&full_prefix)
                .set_delimiter(delimiter.map(str::to_owned))
                .set_continuation_token(token.take())
                .send()
                .await
                .map_err(|e| backend("list", prefix, &e))?;
            for object in output.contents() {
                let Some(key) = object.key().and_then(|k| k.strip_prefix(&root)) else { continue };
                objects.push(ObjectMeta {
                    key: key.to_owned(),
                    etag: unquote(object.e_tag()),
                    size: size_of(object.size()),
                });
            }
            let common = output.common_prefixes().iter().filter_map(|c| c.prefix()?.strip_prefix(&full_prefix));
            prefixes.extend(common.map(str::to_owned));
            match output.next_continuation_token() {
                Some(next) if output.is_truncated() == Some(true) && objects.len() + prefixes.len() < enough => {
                    token = Some(next.to_owned());
                }
                _ => break,
            }
        }
        Ok((objects, prefixes))
    }

    /// A store in `bucket` under `prefix`, with a client configured from the
    /// standard AWS chain (environment, profile, container or instance
    /// credentials) and `options`. Loading the configuration does no network
    /// I/O beyond what the credential chain itself needs lazily on the first
    /// request.
    ///
    /// # Errors
    /// Currently none; the `Result` leaves room for configuration checks.
    pub async fn connect(bucket: &str, prefix: &str, options: &S3Options) -> Result<Self, StoreError> {
        use aws_config::meta::region::RegionProviderChain;
        use aws_sdk_s3::config::Region;

        let region = RegionProviderChain::first_try(options.region.clone().map(Region::new))
            .or_default_provider()
            .or_else(Region::from_static(DEFAULT_REGION));
        let sdk_config = aws_config::defaults(aws_config::BehaviorVersion::latest()).region(region).load().await;
        let mut builder = aws_sdk_s3::config::Builder::from(&sdk_config).force_path_style(options.force_path_style);
        if let Some(url) = &options.endpoint_url {
            builder = builder.endpoint_url(url);
        }
        Ok(Self::from_client(aws_sdk_s3::Client::from_conf(builder.build()), bucket, prefix))
    }

    /// A store in `bucket` under `prefix` (leading and trailing slashes are
    /// ignored) using an already configured client.
    #[must_use]
    pub fn from_client(client: aws_sdk_s3::Client, bucket: &str, prefix: &str) -> Self {
        Self { client, bucket: bucket.to_owned(), prefix: prefix.trim_matches('/').to_owned() }
    }

    /// The bucket.
    #[must_use]
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The key prefix inside the bucket (no leading or trailing slash; may
    /// be empty).
    #[must_use]
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Creates the bucket unless it already exists (for tests and local
    /// runs; production buckets are provisioned by infrastructure code).
    /// Costs one `HeadBucket` request, plus a `CreateBucket` when missing.
    ///
    /// # Errors
    /// `Backend` when the bucket cannot be checked or created (including
    /// when another account owns the name).
    pub async fn ensure_bucket(&self) -> Result<(), StoreError> {
        use aws_sdk_s3::types::{BucketLocationConstraint, CreateBucketConfiguration};

        match self.client.head_bucket().bucket(&self.bucket).send().await {
            Ok(_) => return Ok(()),
            Err(e) if http_status(&e) == Some(404) => {}
            Err(e) => return Err(backend("head_bucket", &self.bucket, &e)),
        }
        let mut request = self.client.create_bucket().bucket(&self.bucket);
        // us-east-1 is the one region that rejects an explicit constraint.
        if let Some(region) = self.client.config().region().map(ToString::to_string)
            && region != DEFAULT_REGION
        {
            request = request.create_bucket_configuration(
                CreateBucketConfiguration::builder()
                    .location_constraint(BucketLocationConstraint::from(region.as_str()))
                    .build(),
            );
        }
        match request.send().await {
            Ok(_) => Ok(()),
            Err(e) if e.as_service_error().is_some_and(|s| s.is_bucket_already_owned_by_you()) => Ok(()),
            Err(e) => Err(backend("create_bucket", &self.bucket, &e)),
        }
    }

    /// The bucket key of store key `key` (already validated).
    fn full_key(&self, key: &str) -> String {
        if self.prefix.is_empty() { key.to_owned() } else { format!("{}/{key}", self.prefix) }
    }
}

/// The HTTP status of a service error, if a response arrived.
fn http_status<E>(err: &SdkError<E>) -> Option<u16> {
    err.raw_response().map(|r| r.status().as_u16())
}

/// A `Backend` error carrying the SDK's full error chain.
fn backend<E: std::error::Error + 'static>(op: &'static str, key: &str, err: &SdkError<E>) -> StoreError {
    StoreError::Backend { op, key: key.to_owned(), message: DisplayErrorContext(err).to_string() }
}

/// Whether a failed conditional put means "the precondition did not hold".
fn is_precondition_failure<E: ProvideErrorMetadata>(err: &SdkError<E>, mode: &PutMode) -> bool {
    let code = err.code();
    let failed =
        http_status(err) == Some(412) || matches!(code, Some("PreconditionFailed" | "ConditionalRequestConflict"));
    match mode {
        PutMode::Overwrite => false,
        PutMode::CreateNew => failed,
        PutMode::IfMatch(_) => failed || code == Some("NoSuchKey"),
    }
}

/// An etag as the store reports it: without the quotes S3 puts around it.
fn unquote(etag: Option<&str>) -> String {
    let etag = etag.unwrap_or_default();
    etag.strip_prefix("W/").unwrap_or(etag).trim_matches('"').to_owned()
}

/// A size as the store reports it (S3 sends a signed integer).
fn size_of(size: Option<i64>) -> u64 {
    size.and_then(|s| u64::try_from(s).ok()).unwrap_or_default()
}

impl S3Store {
    /// Uploads `parts` (numbered from 1) to the multipart upload `upload`
    /// of `key` and completes it as `mode` allows.
    async fn upload(
        &self,
        key: &str,
        upload: &str,
        parts: &mut (dyn Iterator<Item = Bytes> + Send),
        mode: &PutMode,
    ) -> Result<ObjectMeta, StoreError> {
        use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
        let full = self.full_key(key);
        let (mut done, mut size) = (Vec::new(), 0u64);
        // One part in memory at a time.
        for (number, part) in (1..).zip(parts) {
            size += part.len() as u64;
            let output = self
                .client
                .upload_part()
                .bucket(&self.bucket)
                .key(&full)
                .upload_id(upload)
                .part_number(number)
                .body(ByteStream::from(part))
                .send()
                .await
                .map_err(|e| backend("put", key, &e))?;
            done.push(CompletedPart::builder().part_number(number).set_e_tag(output.e_tag).build());
        }
        if done.is_empty() {
            // Nothing came: an upload needs a part, an empty body does not.
            return Err(StoreError::Backend { op: "put", key: key.to_owned(), message: "no part to upload".into() });
        }
        let mut request = self
            .client
            .complete_multipart_upload()
            .bucket(&self.bucket)
            .key(&full)
            .upload_id(upload)
            .multipart_upload(CompletedMultipartUpload::builder().set_parts(Some(done)).build());
        request = match mode {
            PutMode::Overwrite => request,
            PutMode::CreateNew => request.if_none_match("*"),
            PutMode::IfMatch(etag) => request.if_match(format!("\"{}\"", etag.trim_matches('"'))),
        };
        match request.send().await {
            Ok(output) => Ok(ObjectMeta { key: key.to_owned(), etag: unquote(output.e_tag()), size }),
            Err(e) if is_precondition_failure(&e, mode) => Err(StoreError::Conflict(key.to_owned())),
            Err(e) => Err(backend("put", key, &e)),
        }
    }
}

#[async_trait]
impl Store for S3Store {
    async fn get(&self, key: &str) -> Result<Object, StoreError> {
        validate_key(key)?;
        let output = match self.client.get_object().bucket(&self.bucket).key(self.full_key(key)).send().await {
            Ok(output) => output,
            Err(e)
                if e.as_service_error().is_some_and(|s| s.is_no_such_key())
                    || (http_status(&e) == Some(404) && e.code() != Some("NoSuchBucket")) =>
            {
                return Err(StoreError::NotFound(key.to_owned()));
            }
            Err(e) => return Err(backend("get", key, &e)),
        };
        let etag = unquote(output.e_tag());
        // S3's etag is the body's MD5 for a single-part upload stored
        // unencrypted or with SSE-S3; not for multipart ("…-N") or KMS.
        let etag_is_digest = !etag.contains('-')
            && output.sse_customer_algorithm().is_none()
            && output
                .server_side_encryption()
                .is_none_or(|sse| *sse == aws_sdk_s3::types::ServerSideEncryption::Aes256);
        let body = output.body.collect().await.map_err(|e| StoreError::Backend {
            op: "get",
            key: key.to_owned(),
            message: DisplayErrorContext(&e).to_string(),
        })?;
        let body = body.into_bytes();
        Ok(Object { meta: ObjectMeta { key: key.to_owned(), etag, size: body.len() as u64 }, body, etag_is_digest })
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta, StoreError> {
        validate_key(key)?;
        // A HEAD response has no body, so a missing key is a bare 404 — and
        // so is a missing bucket, which therefore also reads as NotFound here
        // (get and list report it as a Backend error).
        match self.client.head_object().bucket(&self.bucket).key(self.full_key(key)).send().await {
            Ok(output) => Ok(ObjectMeta {
                key: key.to_owned(),
                etag: unquote(output.e_tag()),
                size: size_of(output.content_length()),
            }),
            Err(e) if http_status(&e) == Some(404) => Err(StoreError::NotFound(key.to_owned())),
            Err(e) => Err(backend("head", key, &e)),
        }
    }

    async fn put(&self, key: &str, body: Bytes, mode: PutMode) -> Result<ObjectMeta, StoreError> {
        validate_key(key)?;
        let size = body.len() as u64;
        let mut request =
            self.client.put_object().bucket(&self.bucket).key(self.full_key(key)).body(ByteStream::from(body));
        request = match &mode {
            PutMode::Overwrite => request,
            PutMode::CreateNew => request.if_none_match("*"),
            PutMode::IfMatch(etag) => request.if_match(format!("\"{}\"", etag.trim_matches('"'))),
        };
        match request.send().await {
            Ok(output) => Ok(ObjectMeta { key: key.to_owned(), etag: unquote(output.e_tag()), size }),
            Err(e) if is_precondition_failure(&e, &mode) => Err(StoreError::Conflict(key.to_owned())),
            Err(e) => Err(backend("put", key, &e)),
        }
    }

    async fn put_parts(
        &self,
        key: &str,
        parts: &mut (dyn Iterator<Item = Bytes> + Send),
        mode: PutMode,
    ) -> Result<ObjectMeta, StoreError> {
        validate_key(key)?;
        if parts.size_hint().1.is_some_and(|n| n <= 1) {
            // One part at most: a plain put (joined all the same, should
            // the hint be wrong).
            let mut body = bytes::BytesMut::new();
            for part in parts {
                body.extend_from_slice(&part);
            }
            return self.put(key, body.freeze(), mode).await;
        }
        let full = self.full_key(key);
        let created = self
            .client
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(&full)
            .send()
            .await
            .map_err(|e| backend("put", key, &e))?;
        let Some(upload) = created.upload_id() else {
            return Err(StoreError::Backend { op: "put", key: key.to_owned(), message: "no upload id".into() });
        };
        let result = self.upload(key, upload, parts, &mode).await;
        if result.is_err() {
            // Nothing lands under `key` without the completion; the parts go.
            let abort = self.client.abort_multipart_upload().bucket(&self.bucket).key(&full).upload_id(upload);
            if let Err(e) = abort.send().await {
                tracing::debug!(key, error = %DisplayErrorContext(&e), "a failed multipart upload was not aborted");
            }
        }
        result
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StoreError> {
        let (mut out, _) = self.list_pages(prefix, None, usize::MAX).await?;
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    async fn list_dir(&self, dir: &str, limit: usize) -> Result<DirListing, StoreError> {
        validate_key(dir)?;
        let prefix = format!("{dir}/");
        // One entry past the limit is enough to know the listing is cut.
        let (mut files, dirs) = self.list_pages(&prefix, Some("/"), limit.saturating_add(1)).await?;
        let mut dirs: Vec<String> =
            dirs.iter().map(|d| d.trim_end_matches('/')).filter(|n| !n.is_empty()).map(str::to_owned).collect();
        files.sort_by(|a, b| a.key.cmp(&b.key));
        dirs.sort();
        Ok(cut_listing(&prefix, files, dirs, limit))
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        validate_key(key)?;
        // S3 answers 204 for a missing key; some servers answer 404.
        match self.client.delete_object().bucket(&self.bucket).key(self.full_key(key)).send().await {
            Ok(_) => Ok(()),
            Err(e) if e.code() == Some("NoSuchKey") => Ok(()),
            Err(e) => Err(backend("delete", key, &e)),
        }
    }

    async fn delete_if(&self, key: &str, etag: &str) -> Result<(), StoreError> {
        validate_key(key)?;
        let sent = self.client.delete_object().bucket(&self.bucket).key(self.full_key(key)).if_match(etag).send().await;
        match sent {
            Ok(_) => Ok(()),
            // Already gone: what the delete wanted.
            Err(e) if e.code() == Some("NoSuchKey") || http_status(&e) == Some(404) => Ok(()),
            Err(e) if http_status(&e) == Some(412) || e.code() == Some("PreconditionFailed") => {
                Err(StoreError::Conflict(key.to_owned()))
            }
            Err(e) => Err(backend("delete", key, &e)),
        }
    }
}
