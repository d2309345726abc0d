//! Helpers more than one suite of this binary uses.

use std::io::Write as _;
use std::sync::Arc;

use serde_json::json;
use skald::app::App;
use skald::identity::AccountId;
use skald::index::EmbedderInfo;
use skald_tests::fixture::{Handler, call_handler, find, ok, request_to};

/// The vector dimension of the index suites' fixed test embedder.
pub(crate) const DIM: usize = 8;

/// The account the index suites write to.
pub(crate) fn account() -> AccountId {
    AccountId::new("acme").expect("valid account id")
}

/// The index suites' fixed test embedder, of dimension [`DIM`].
pub(crate) fn embedder() -> EmbedderInfo {
    EmbedderInfo { id: "test-fixed/8".to_owned(), dimension: DIM }
}

/// The clock in milliseconds since the epoch, as a commit hands it to
/// `skald::index::compact`.
pub(crate) fn now_ms() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("the clock is past 1970");
    i64::try_from(since.as_millis()).expect("milliseconds fit in an i64")
}

/// The URIs a keyword `find` for `query` returns (at most 20, every type).
pub(crate) async fn found_by_keywords(app: &Arc<App>, query: &str) -> Vec<String> {
    let (status, body) = find(app, &json!({"query": query, "search_type": "keywords", "limit": 20})).await;
    assert_eq!(status, 200, "{body}");
    ["memories", "resources", "skills"]
        .iter()
        .flat_map(|k| body["result"][k].as_array().cloned().unwrap_or_default())
        .filter_map(|h| h["uri"].as_str().map(str::to_owned))
        .collect()
}

/// A zip archive of `entries` (path, bytes).
pub(crate) fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    let mut writer = zip::ZipWriter::new(&mut out);
    for (name, body) in entries {
        writer.start_file(*name, zip::write::SimpleFileOptions::default()).expect("start a zip entry");
        writer.write_all(body).expect("write a zip entry");
    }
    writer.finish().expect("finish the zip");
    out.into_inner()
}

const UPLOAD_BOUNDARY: &str = "skald-test-boundary-7f3a";

/// `POST /api/v1/resources/temp_upload` of `bytes` as `file_name`, as
/// OpenViking's SDK sends it: multipart/form-data with an `upload_mode`
/// part and the `file` part.
pub(crate) fn upload_request(file_name: &str, bytes: &[u8]) -> lambda_http::Request {
    let mut body = Vec::new();
    write!(
        body,
        "--{UPLOAD_BOUNDARY}\r\nContent-Disposition: form-data; name=\"upload_mode\"\r\n\r\nlocal\r\n\
         --{UPLOAD_BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{file_name}\"\r\n\
         Content-Type: application/octet-stream\r\n\r\n"
    )
    .expect("write");
    body.extend_from_slice(bytes);
    write!(body, "\r\n--{UPLOAD_BOUNDARY}--\r\n").expect("write");
    let content_type = format!("multipart/form-data; boundary={UPLOAD_BOUNDARY}");
    request_to(
        "/api/v1/resources/temp_upload",
        "POST",
        &[("content-type", &content_type)],
        lambda_http::Body::Binary(body),
    )
}

/// Uploads `bytes` as `file_name` as the dev caller; the `temp_file_id`.
pub(crate) async fn upload(app: &Arc<App>, file_name: &str, bytes: &[u8]) -> String {
    let reply = call_handler(app, Handler::Content, upload_request(file_name, bytes)).await;
    ok(&reply)["temp_file_id"].as_str().unwrap_or_else(|| panic!("no temp_file_id: {}", reply.text)).to_owned()
}

/// The cosine of two vectors, accumulated in `f64` (the embedders' parity
/// tests).
pub(crate) fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
    let na: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}
