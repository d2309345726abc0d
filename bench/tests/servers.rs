//! The benches' network pieces through the S3 client they measure: the
//! in-process S3-protocol server (`start_s3_over`) over a local store,
//! behind the latency proxy (`start_proxy`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use skald::store::{PutMode, StoreError};
use skald_bench::{CallLog, TempStore, s3_at, start_proxy, start_s3_over};

const BUCKET: &str = "bench-servers";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_s3_client_works_through_the_proxy_and_the_in_process_server() {
    let local = TempStore::open(&format!("skald-bench-servers-{}", std::process::id()));
    let server = start_s3_over(Arc::clone(local.store()), BUCKET).await;
    let log = Arc::new(CallLog::default());
    let latency = Duration::from_millis(25);
    let proxy = start_proxy(server, latency, Arc::clone(&log)).await;
    let s3 = s3_at(proxy, BUCKET);
    let key = "a/b c.json";

    let created = s3.put(key, Bytes::from_static(b"{\"x\":1}"), PutMode::CreateNew).await.expect("create");
    let again = s3.put(key, Bytes::from_static(b"{}"), PutMode::CreateNew).await;
    assert!(matches!(again, Err(StoreError::Conflict(_))), "create over an object: {again:?}");

    let started = Instant::now();
    let meta = s3.head(key).await.expect("head");
    assert!(started.elapsed() >= latency, "a call pays the proxy's latency: {:?}", started.elapsed());
    assert_eq!((meta.size, &meta.etag), (7, &created.etag), "HEAD: the object's size and etag");

    let object = s3.get(key).await.expect("get");
    assert_eq!((&object.body[..], &object.meta.etag), (&b"{\"x\":1}"[..], &created.etag));

    let updated = s3.put(key, Bytes::from_static(b"{\"x\":2}"), PutMode::IfMatch(created.etag.clone())).await;
    let updated = updated.expect("put if-match the current etag");
    assert_ne!(updated.etag, created.etag);
    let stale = s3.put(key, Bytes::from_static(b"{\"x\":3}"), PutMode::IfMatch(created.etag.clone())).await;
    assert!(matches!(stale, Err(StoreError::Conflict(_))), "put if-match a stale etag: {stale:?}");

    let listed = s3.list("a/").await.expect("list");
    let keys: Vec<(&str, u64)> = listed.iter().map(|o| (o.key.as_str(), o.size)).collect();
    assert_eq!(keys, [(key, 7)]);
    let missing = s3.get("a/missing").await;
    assert!(matches!(missing, Err(StoreError::NotFound(_))), "get of a missing key: {missing:?}");

    let calls = log.take();
    let methods: Vec<&str> = calls.iter().map(|c| c.method.as_str()).collect();
    assert_eq!(methods, ["PUT", "PUT", "HEAD", "GET", "PUT", "PUT", "GET", "GET"], "one logged call per store call");
    assert_eq!(calls[2].path, format!("/{BUCKET}/root/{key}"), "paths are logged percent-decoded");
    assert!(calls.windows(2).all(|w| w[0].at <= w[1].at), "calls are logged in arrival order");
    assert!(log.take().is_empty(), "take empties the log");
}
