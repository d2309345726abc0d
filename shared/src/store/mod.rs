//! The object store: one trait, two backends — a local
//! directory (the embedded default) and S3 — with the same conditional-write
//! guarantees: create-if-absent and compare-and-swap, whose conflicts come
//! back as [`StoreError::Conflict`].

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

pub mod local;
#[cfg(feature = "s3")]
pub mod s3;

/// What the store failed to do. Messages name the key.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No object under the key.
    #[error("no object at key {0:?}")]
    NotFound(String),
    /// A conditional put whose precondition did not hold (the object exists
    /// for [`PutMode::CreateNew`]; its etag differs or it is gone for
    /// [`PutMode::IfMatch`]).
    #[error("conditional write to {0:?} lost: the object changed")]
    Conflict(String),
    /// The key is not a valid store key (empty, `..`, backslash, …).
    #[error("invalid store key {0:?}")]
    InvalidKey(String),
    /// The backend failed (I/O, network, service error).
    #[error("store {op} {key:?} failed: {message}")]
    Backend {
        /// The operation (`get`, `put`, …).
        op: &'static str,
        /// The key or prefix.
        key: String,
        /// The backend's own description.
        message: String,
    },
}

/// Metadata of one stored object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    /// The key under the store's root.
    pub key: String,
    /// An opaque version tag, without quotes: equal etags mean equal content
    /// (local: a content hash; S3: the service's ETag).
    pub etag: String,
    /// Size in bytes.
    pub size: u64,
}

/// An object's bytes and metadata.
#[derive(Debug, Clone)]
pub struct Object {
    /// The body.
    pub body: Bytes,
    /// Its metadata.
    pub meta: ObjectMeta,
    /// Whether the etag is a digest of the body as stored, so that a body
    /// can be checked against it ([`etag_matches`]): the local store's
    /// content hash; S3's MD5 of a single-part upload stored unencrypted or
    /// with SSE-S3 (not of a multipart or KMS-encrypted one).
    pub etag_is_digest: bool,
}

/// How a put treats an existing object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutMode {
    /// Replace whatever is there.
    Overwrite,
    /// Create only if no object exists (`If-None-Match: *`).
    CreateNew,
    /// Replace only if the current etag equals this one (`If-Match`).
    IfMatch(String),
}

/// One level of a directory listing ([`Store::list_dir`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DirListing {
    /// The objects directly under the directory, sorted by key.
    pub files: Vec<ObjectMeta>,
    /// The names (one segment each) of its subdirectories, sorted.
    pub dirs: Vec<String>,
    /// Whether the directory holds more entries than were asked for.
    pub truncated: bool,
}

/// The object store every function reads and writes through.
///
/// Keys are relative `/`-separated paths without empty, `.` or `..`
/// segments and without backslashes ([`validate_key`]).
#[async_trait]
pub trait Store: Send + Sync + std::fmt::Debug {
    /// The object under `key`.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] when there is none; `Backend` on failure.
    async fn get(&self, key: &str) -> Result<Object, StoreError>;

    /// The metadata of the object under `key` (no body transfer).
    ///
    /// # Errors
    /// [`StoreError::NotFound`] when there is none; `Backend` on failure.
    async fn head(&self, key: &str) -> Result<ObjectMeta, StoreError>;

    /// Writes `body` under `key` as `mode` allows; returns the new metadata.
    ///
    /// # Errors
    /// [`StoreError::Conflict`] when `mode`'s precondition does not hold.
    async fn put(&self, key: &str, body: Bytes, mode: PutMode) -> Result<ObjectMeta, StoreError>;

    /// Writes the body `parts` yields, in order, under `key` as `mode`
    /// allows, without holding more than a part or two of it: how a body
    /// the size of an account's index (a compaction's merged segment) is
    /// written. Parts other than the last must be at least [`PART_BYTES`]
    /// (S3's multipart minimum); an iterator whose `size_hint` says at
    /// most one part is written by one put.
    ///
    /// Cost (S3): one `PutObject` for at most one part; else a multipart
    /// upload, one request per part (one part in memory at a time) and two
    /// more, aborted on failure. The
    /// local store streams the parts to a temporary file. The default
    /// joins the parts and calls [`Store::put`] (the whole body in memory).
    ///
    /// Unknown outcomes: as [`Store::put`]; an upload that fails before it
    /// completes leaves nothing under `key`.
    ///
    /// # Errors
    /// As [`Store::put`].
    async fn put_parts(
        &self,
        key: &str,
        parts: &mut (dyn Iterator<Item = Bytes> + Send),
        mode: PutMode,
    ) -> Result<ObjectMeta, StoreError> {
        let mut body = bytes::BytesMut::new();
        for part in parts {
            body.extend_from_slice(&part);
        }
        self.put(key, body.freeze(), mode).await
    }

    /// Every object whose key starts with `prefix`, sorted by key.
    ///
    /// # Errors
    /// `Backend` on failure.
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StoreError>;

    /// One level below the directory `dir` (a key prefix without its
    /// trailing `/`): the objects directly under `dir/` and the names of
    /// its subdirectories, at most `limit` entries in all (files and
    /// directories merged in name order), `truncated` when there are more.
    /// A directory that holds nothing lists empty.
    ///
    /// Cost (S3): one `ListObjectsV2` with a delimiter per 1000 entries; the
    /// default implementation lists the whole subtree.
    ///
    /// # Errors
    /// `Backend` on failure.
    async fn list_dir(&self, dir: &str, limit: usize) -> Result<DirListing, StoreError> {
        let prefix = format!("{dir}/");
        let mut files = Vec::new();
        let mut dirs: Vec<String> = Vec::new();
        for object in self.list(&prefix).await? {
            match object.key[prefix.len()..].split_once('/') {
                Some((name, _)) => {
                    if dirs.last().map(String::as_str) != Some(name) {
                        dirs.push(name.to_owned());
                    }
                }
                None => files.push(object),
            }
        }
        dirs.dedup();
        Ok(cut_listing(&prefix, files, dirs, limit))
    }

    /// Removes the object under `key`; removing a missing object succeeds.
    ///
    /// # Errors
    /// `Backend` on failure.
    async fn delete(&self, key: &str) -> Result<(), StoreError>;

    /// Removes the object under `key` only while its etag is `etag` (S3's
    /// conditional delete, `If-Match`): a compare-and-swap delete, so a
    /// write that landed since the caller read the object is never
    /// removed. A missing object succeeds (it is gone either way).
    ///
    /// Unknown outcomes: the caller reads the key again; gone means the
    /// delete landed (or another one did).
    ///
    /// # Errors
    /// [`StoreError::Conflict`] when the object holds another version;
    /// `Backend` on failure.
    async fn delete_if(&self, key: &str, etag: &str) -> Result<(), StoreError>;
}

/// `files` and `dirs` (both under `prefix`, each sorted) cut to the first
/// `limit` entries in S3's listing order: keys compared as bytes, a
/// directory as its name with the trailing `/` (so `a-b.md` comes before
/// the directory `a`, as S3 pages them).
#[must_use]
pub fn cut_listing(prefix: &str, mut files: Vec<ObjectMeta>, mut dirs: Vec<String>, limit: usize) -> DirListing {
    let total = files.len() + dirs.len();
    if total > limit {
        let mut names: Vec<String> = files
            .iter()
            .map(|f| f.key[prefix.len()..].to_owned())
            .chain(dirs.iter().map(|d| format!("{d}/")))
            .collect();
        names.sort_unstable();
        if let Some(last) = names.get(limit.saturating_sub(1)).filter(|_| limit > 0).cloned() {
            files.retain(|f| f.key[prefix.len()..] <= *last);
            dirs.retain(|d| format!("{d}/") <= last);
        } else {
            files.clear();
            dirs.clear();
        }
    }
    DirListing { files, dirs, truncated: total > limit }
}

/// A shared store handle.
pub type SharedStore = Arc<dyn Store>;

/// Checks that `key` is a relative `/`-separated path with no empty, `.` or
/// `..` segment, no backslash and no control character.
///
/// # Errors
/// [`StoreError::InvalidKey`] naming the key.
pub fn validate_key(key: &str) -> Result<(), StoreError> {
    let bad = key.is_empty()
        || key.len() > 1024
        || key.contains('\\')
        || key.chars().any(char::is_control)
        || key.split('/').any(|s| s.is_empty() || s == "." || s == "..");
    if bad { Err(StoreError::InvalidKey(key.to_owned())) } else { Ok(()) }
}

/// The etag the local backend gives `body`: the first 32 hex digits of its
/// SHA-256.
#[must_use]
pub fn content_etag(body: &[u8]) -> String {
    use sha2::Digest as _;
    content_etag_of(sha2::Sha256::digest(body).as_slice())
}

/// [`content_etag`] from the SHA-256 `digest` of the body (hashed as it
/// streams by).
fn content_etag_of(digest: &[u8]) -> String {
    hex::encode(&digest[..16])
}

/// The size a body written in parts ([`Store::put_parts`]) is cut into:
/// 5 MiB, S3's minimum part, so a writer holds as little as it can.
pub const PART_BYTES: usize = 5 << 20;

/// Whether `body` is the content `etag` names: the local backend's etag
/// ([`content_etag`]) or S3's, the MD5 of a single-part upload. `false`
/// for a body cut short or replaced in transit (and for any etag that is
/// no digest of the content: see [`Object::etag_is_digest`]). Cost: one
/// SHA-256 and at most one MD5 of `body`.
#[must_use]
pub fn etag_matches(etag: &str, body: &[u8]) -> bool {
    use md5::Digest as _;
    etag == content_etag(body) || etag == hex::encode(md5::Md5::digest(body))
}

/// The object under `key`, its body checked against its etag when the
/// etag is a digest of it ([`Object::etag_is_digest`]) before anything is
/// built from it: a body that does not match is read once more, and kept
/// only when the second read matches. (An etag that is no digest — a
/// multipart or KMS-encrypted upload on S3 — cannot vouch for a body; the
/// SDK's own length and checksum checks are what stand then.)
///
/// Cost: one GET and a digest of the body; two GETs for a body cut in
/// transit.
///
/// # Errors
/// As [`Store::get`]; `Backend` when neither read matches its etag (a
/// retry reads it anew).
pub async fn get_checked(store: &dyn Store, key: &str) -> Result<Object, StoreError> {
    let whole = |object: &Object| !object.etag_is_digest || etag_matches(&object.meta.etag, &object.body);
    let first = store.get(key).await?;
    if whole(&first) {
        return Ok(first);
    }
    let second = store.get(key).await?;
    if whole(&second) {
        return Ok(second);
    }
    Err(StoreError::Backend {
        op: "get",
        key: key.to_owned(),
        message: "the body does not match its etag on two reads".to_owned(),
    })
}

/// Where a store lives, parsed from configuration: `s3://bucket/prefix` or a
/// directory path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// A local directory.
    Local(std::path::PathBuf),
    /// An S3 bucket and key prefix (without trailing slash; may be empty).
    S3 {
        /// Bucket name.
        bucket: String,
        /// Key prefix inside the bucket.
        prefix: String,
    },
}

impl StoreLocation {
    /// Parses `s3://bucket[/prefix]` or a filesystem path.
    ///
    /// # Errors
    /// A message naming the value when an `s3://` location has no bucket.
    pub fn parse(text: &str) -> Result<Self, String> {
        if let Some(rest) = text.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(format!("store location {text:?} has no bucket"));
            }
            Ok(Self::S3 { bucket: bucket.to_owned(), prefix: prefix.trim_matches('/').to_owned() })
        } else if text.is_empty() {
            Err("store location is empty".to_owned())
        } else {
            Ok(Self::Local(text.into()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_validated() {
        assert!(validate_key("accounts/a/tree/x.md").is_ok());
        for bad in ["", "/abs", "a//b", "a/../b", "./a", "a\\b", "a/", "a\0b"] {
            assert!(matches!(validate_key(bad), Err(StoreError::InvalidKey(k)) if k == bad), "{bad:?}");
        }
    }

    #[test]
    fn listings_are_cut_in_s3_order() {
        let file = |name: &str| ObjectMeta { key: format!("d/{name}"), etag: String::new(), size: 0 };
        // S3 pages `n-a.md` before the directory `n/` ('-' < '/').
        let cut = cut_listing("d/", vec![file("n-a.md"), file("o.md")], vec!["n".into()], 1);
        assert_eq!((cut.files.len(), cut.dirs.len(), cut.truncated), (1, 0, true));
        assert_eq!(cut.files[0].key, "d/n-a.md");
        let cut = cut_listing("d/", vec![file("n-a.md"), file("o.md")], vec!["n".into()], 2);
        assert_eq!((cut.files.len(), cut.dirs, cut.truncated), (1, vec!["n".to_owned()], true));
        let all = cut_listing("d/", vec![file("n-a.md")], vec!["n".into()], 2);
        assert!(!all.truncated && all.files.len() == 1 && all.dirs.len() == 1);
        assert!(cut_listing("d/", vec![file("a")], vec![], 0).files.is_empty());
    }

    #[test]
    fn locations_parse() {
        assert_eq!(
            StoreLocation::parse("s3://bucket/some/prefix/"),
            Ok(StoreLocation::S3 { bucket: "bucket".into(), prefix: "some/prefix".into() })
        );
        assert_eq!(StoreLocation::parse("s3://b"), Ok(StoreLocation::S3 { bucket: "b".into(), prefix: String::new() }));
        assert!(StoreLocation::parse("s3://").is_err());
        assert_eq!(StoreLocation::parse("./data"), Ok(StoreLocation::Local("./data".into())));
    }

    #[test]
    fn etags_vouch_for_whole_bodies_only() {
        let body = b"# Summary\nSoak file 0 at upload 36.\n";
        // The local backend's etag, and S3's for a single-part upload.
        let local = content_etag(body);
        let s3 = "9e107d9d372bb6826bd81d3542a419d6";
        assert_eq!(s3, hex::encode(<md5::Md5 as md5::Digest>::digest(b"The quick brown fox jumps over the lazy dog")));
        assert!(etag_matches(&local, body));
        assert!(etag_matches(s3, b"The quick brown fox jumps over the lazy dog"));
        for (etag, got) in [
            (local.as_str(), &body[..body.len() / 2]),
            (local.as_str(), b"<html><body>502 Bad Gateway</body></html>".as_slice()),
            // A multipart upload's etag is no digest of the content.
            ("d41d8cd98f00b204e9800998ecf8427e-2", b"".as_slice()),
            ("", body.as_slice()),
        ] {
            assert!(!etag_matches(etag, got), "{etag} {got:?}");
        }
    }
}
