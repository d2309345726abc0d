//! The local directory store: the embedded default. One file per key under
//! the root; writes go to a temporary file and are renamed into place
//! (atomic), etags are content hashes, and conditional writes hold a
//! per-key file lock, so they are safe across threads and processes.

use std::fs;
use std::io::{ErrorKind, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use bytes::Bytes;

use super::{DirListing, Object, ObjectMeta, PutMode, Store, StoreError, content_etag, cut_listing, validate_key};

/// Directory (under the root) for temporary files; never listed.
const TMP_DIR: &str = ".tmp";
/// Directory (under the root) for per-key lock files; never listed.
const LOCK_DIR: &str = ".locks";

/// A store in a local directory. Cheap to clone the path; all I/O runs on
/// tokio's blocking pool.
#[derive(Debug, Clone)]
pub struct LocalStore {
    root: PathBuf,
}

impl LocalStore {
    /// A store rooted at `root`, created if missing.
    ///
    /// # Errors
    /// `Backend` when the directory cannot be created.
    pub fn open(root: impl Into<PathBuf>) -> Result<Self, StoreError> {
        let root = root.into();
        for dir in [root.clone(), root.join(TMP_DIR), root.join(LOCK_DIR)] {
            fs::create_dir_all(&dir).map_err(|e| backend("open", &dir.display().to_string(), &e))?;
        }
        Ok(Self { root })
    }

    /// The root directory.
    #[must_use]
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path_of(&self, key: &str) -> Result<PathBuf, StoreError> {
        validate_key(key)?;
        let first = key.split('/').next().unwrap_or_default();
        if first == TMP_DIR || first == LOCK_DIR {
            return Err(StoreError::InvalidKey(key.to_owned()));
        }
        Ok(self.root.join(key))
    }

    async fn blocking<T: Send + 'static>(
        op: &'static str,
        key: &str,
        f: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        tokio::task::spawn_blocking(f).await.map_err(|e| StoreError::Backend {
            op,
            key: key.to_owned(),
            message: e.to_string(),
        })?
    }
}

fn backend(op: &'static str, key: &str, e: &std::io::Error) -> StoreError {
    StoreError::Backend { op, key: key.to_owned(), message: e.to_string() }
}

fn read_file(op: &'static str, key: &str, path: &Path) -> Result<Vec<u8>, StoreError> {
    match fs::read(path) {
        Ok(body) => Ok(body),
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::IsADirectory | ErrorKind::NotADirectory) => {
            Err(StoreError::NotFound(key.to_owned()))
        }
        Err(e) => Err(backend(op, key, &e)),
    }
}

/// Whether the directory `path` holds a file at any depth (stops at the
/// first one).
fn holds_a_file(path: &Path) -> bool {
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            match entry.file_type() {
                Ok(kind) if kind.is_dir() => stack.push(entry.path()),
                Ok(_) => return true,
                Err(_) => {}
            }
        }
    }
    false
}

/// Whether `mode` allows a write over the object whose etag is `current`
/// (`None`: there is none).
fn allowed(mode: &PutMode, current: Option<&str>) -> bool {
    match (mode, current) {
        (PutMode::Overwrite, _) | (PutMode::CreateNew, None) => true,
        (PutMode::IfMatch(want), Some(have)) => want == have,
        (PutMode::CreateNew, Some(_)) | (PutMode::IfMatch(_), None) => false,
    }
}

/// Refuses a write to `key` (at `path`) that `mode` does not allow over
/// what is there now; call it holding the key's lock.
fn check_mode(key: &str, path: &Path, mode: &PutMode) -> Result<(), StoreError> {
    let current = match read_file("put", key, path) {
        Ok(existing) => Some(content_etag(&existing)),
        Err(StoreError::NotFound(_)) => None,
        Err(e) => return Err(e),
    };
    if allowed(mode, current.as_deref()) { Ok(()) } else { Err(StoreError::Conflict(key.to_owned())) }
}

/// Holds the exclusive lock of one key until dropped.
struct KeyLock(#[allow(dead_code)] fs::File);

fn lock_key(root: &Path, key: &str) -> Result<KeyLock, StoreError> {
    let path = root.join(LOCK_DIR).join(content_etag(key.as_bytes()));
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| backend("lock", key, &e))?;
    file.lock().map_err(|e| backend("lock", key, &e))?;
    Ok(KeyLock(file))
}

fn temp_path(root: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    root.join(TMP_DIR).join(format!("{}-{n}-{nanos}", std::process::id()))
}

fn write_atomically(root: &Path, key: &str, path: &Path, body: &[u8]) -> Result<(), StoreError> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(|e| backend("put", key, &e))?;
    }
    let tmp = temp_path(root);
    let result = (|| {
        let mut file = fs::File::create(&tmp)?;
        file.write_all(body)?;
        file.sync_data()?;
        fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(backend("put", key, &e));
    }
    Ok(())
}

#[async_trait]
impl Store for LocalStore {
    async fn get(&self, key: &str) -> Result<Object, StoreError> {
        let path = self.path_of(key)?;
        let owned = key.to_owned();
        Self::blocking("get", key, move || {
            let body = read_file("get", &owned, &path)?;
            let meta = ObjectMeta { etag: content_etag(&body), size: body.len() as u64, key: owned };
            Ok(Object { body: Bytes::from(body), meta, etag_is_digest: true })
        })
        .await
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta, StoreError> {
        self.get(key).await.map(|o| o.meta)
    }

    async fn put(&self, key: &str, body: Bytes, mode: PutMode) -> Result<ObjectMeta, StoreError> {
        let path = self.path_of(key)?;
        let root = self.root.clone();
        let owned = key.to_owned();
        Self::blocking("put", key, move || {
            let _lock = lock_key(&root, &owned)?;
            check_mode(&owned, &path, &mode)?;
            write_atomically(&root, &owned, &path, &body)?;
            Ok(ObjectMeta { etag: content_etag(&body), size: body.len() as u64, key: owned })
        })
        .await
    }

    async fn put_parts(
        &self,
        key: &str,
        parts: &mut (dyn Iterator<Item = Bytes> + Send),
        mode: PutMode,
    ) -> Result<ObjectMeta, StoreError> {
        use sha2::Digest as _;
        let path = self.path_of(key)?;
        let tmp = temp_path(&self.root);
        let owned = key.to_owned();
        let created = tmp.clone();
        let written = async {
            let mut file =
                Self::blocking("put", key, move || fs::File::create(&created).map_err(|e| backend("put", &owned, &e)))
                    .await?;
            let (mut hasher, mut size) = (sha2::Sha256::new(), 0u64);
            // Each part is hashed and written on the blocking pool, the
            // file and the hasher passed along.
            for part in &mut *parts {
                size += part.len() as u64;
                let owned = key.to_owned();
                (file, hasher) = Self::blocking("put", key, move || {
                    hasher.update(&part);
                    file.write_all(&part).map_err(|e| backend("put", &owned, &e))?;
                    Ok((file, hasher))
                })
                .await?;
            }
            Ok::<_, StoreError>((file, super::content_etag_of(hasher.finalize().as_slice()), size))
        };
        let (root, owned, moved) = (self.root.clone(), key.to_owned(), tmp.clone());
        let finished = match written.await {
            Ok((file, etag, size)) => {
                Self::blocking("put", key, move || {
                    file.sync_data().map_err(|e| backend("put", &owned, &e))?;
                    drop(file);
                    let _lock = lock_key(&root, &owned)?;
                    check_mode(&owned, &path, &mode)?;
                    if let Some(parent) = path.parent() {
                        fs::create_dir_all(parent).map_err(|e| backend("put", &owned, &e))?;
                    }
                    fs::rename(&moved, &path).map_err(|e| backend("put", &owned, &e))?;
                    Ok(ObjectMeta { etag, size, key: owned })
                })
                .await
            }
            Err(e) => Err(e),
        };
        if finished.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        finished
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StoreError> {
        let root = self.root.clone();
        let prefix = prefix.to_owned();
        Self::blocking("list", &prefix.clone(), move || {
            // Walk from the deepest directory the prefix names, then filter.
            let dir_part = prefix.rsplit_once('/').map_or("", |(d, _)| d);
            let start = if dir_part.is_empty() { root.clone() } else { root.join(dir_part) };
            let mut out = Vec::new();
            let mut stack = vec![start];
            while let Some(dir) = stack.pop() {
                let entries = match fs::read_dir(&dir) {
                    Ok(entries) => entries,
                    Err(e) if e.kind() == ErrorKind::NotFound || e.kind() == ErrorKind::NotADirectory => continue,
                    Err(e) => return Err(backend("list", &prefix, &e)),
                };
                for entry in entries {
                    let entry = entry.map_err(|e| backend("list", &prefix, &e))?;
                    let path = entry.path();
                    let Ok(rel) = path.strip_prefix(&root) else { continue };
                    let Some(key) = rel.to_str().map(|k| k.replace(std::path::MAIN_SEPARATOR, "/")) else {
                        continue;
                    };
                    if key == TMP_DIR || key == LOCK_DIR {
                        continue;
                    }
                    let kind = entry.file_type().map_err(|e| backend("list", &prefix, &e))?;
                    if kind.is_dir() {
                        if prefix.starts_with(&format!("{key}/")) || key.starts_with(&prefix) || prefix.is_empty() {
                            stack.push(path);
                        }
                    } else if key.starts_with(&prefix) {
                        let body = read_file("list", &key, &path)?;
                        out.push(ObjectMeta { etag: content_etag(&body), size: body.len() as u64, key });
                    }
                }
            }
            out.sort_by(|a, b| a.key.cmp(&b.key));
            Ok(out)
        })
        .await
    }

    async fn list_dir(&self, dir: &str, limit: usize) -> Result<DirListing, StoreError> {
        let path = self.path_of(dir)?;
        let owned = dir.to_owned();
        Self::blocking("list", dir, move || {
            let entries = match fs::read_dir(&path) {
                Ok(entries) => entries,
                Err(e) if e.kind() == ErrorKind::NotFound || e.kind() == ErrorKind::NotADirectory => {
                    return Ok(DirListing::default());
                }
                Err(e) => return Err(backend("list", &owned, &e)),
            };
            let (mut files, mut dirs) = (Vec::new(), Vec::new());
            for entry in entries {
                let entry = entry.map_err(|e| backend("list", &owned, &e))?;
                let Some(name) = entry.file_name().to_str().map(str::to_owned) else { continue };
                if entry.file_type().map_err(|e| backend("list", &owned, &e))?.is_dir() {
                    // As on S3, a directory exists only while it holds an
                    // object (a delete leaves empty folders on disk).
                    if holds_a_file(&entry.path()) {
                        dirs.push(name);
                    }
                } else {
                    let key = format!("{owned}/{name}");
                    let body = read_file("list", &key, &entry.path())?;
                    files.push(ObjectMeta { etag: content_etag(&body), size: body.len() as u64, key });
                }
            }
            files.sort_by(|a, b| a.key.cmp(&b.key));
            dirs.sort();
            Ok(cut_listing(&format!("{owned}/"), files, dirs, limit))
        })
        .await
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        let path = self.path_of(key)?;
        let root = self.root.clone();
        let owned = key.to_owned();
        Self::blocking("delete", key, move || {
            let _lock = lock_key(&root, &owned)?;
            match fs::remove_file(&path) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
                Err(e) => Err(backend("delete", &owned, &e)),
            }
        })
        .await
    }

    async fn delete_if(&self, key: &str, etag: &str) -> Result<(), StoreError> {
        let path = self.path_of(key)?;
        let root = self.root.clone();
        let (owned, etag) = (key.to_owned(), etag.to_owned());
        Self::blocking("delete", key, move || {
            let _lock = lock_key(&root, &owned)?;
            match read_file("delete", &owned, &path) {
                Ok(current) if content_etag(&current) == etag => {}
                Ok(_) => return Err(StoreError::Conflict(owned)),
                Err(StoreError::NotFound(_)) => return Ok(()),
                Err(e) => return Err(e),
            }
            match fs::remove_file(&path) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
                Err(e) => Err(backend("delete", &owned, &e)),
            }
        })
        .await
    }
}
