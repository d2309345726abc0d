//! An in-process S3-protocol server over any [`skald::store::Store`] (a
//! hyper HTTP/1.1 server): enough of S3 for the `S3Store` calls the benches
//! make, so that the S3 client can run over a local store without moto.

use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::header::{CONTENT_LENGTH, CONTENT_TYPE, ETAG, IF_MATCH, IF_NONE_MATCH, TRANSFER_ENCODING};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use skald::store::{PutMode, SharedStore, StoreError};
use skald_tests::moto;
use tokio::net::TcpListener;

use crate::fail;

/// Serves objects of `store` (path style, `/{bucket}/{STORE_PREFIX}/{key}`,
/// see [`moto::STORE_PREFIX`]) on a loopback port, with keep-alive: enough
/// of S3 for the `S3Store` calls the benches make, so that the S3 client can
/// run over a local store without moto. `GET` and `HEAD` of an object;
/// `GET /{bucket}?list-type=2&prefix=…` (ListObjectsV2, everything in one
/// page); `PUT` with a `content-length` body, conditional on
/// `If-None-Match: *` or `If-Match` (412 when the store reports a
/// conflict). Other requests, and chunked bodies, get 501.
pub async fn start_s3_over(store: SharedStore, bucket: &str) -> SocketAddr {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap_or_else(|e| fail("s3 server bind", e));
    let address = listener.local_addr().unwrap_or_else(|e| fail("s3 server address", e));
    let bucket: Arc<str> = Arc::from(bucket);
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let (store, bucket) = (Arc::clone(&store), Arc::clone(&bucket));
            tokio::spawn(async move {
                let _ = socket.set_nodelay(true);
                let service = service_fn(move |request| serve(request, Arc::clone(&store), Arc::clone(&bucket)));
                // A broken connection is the client's to notice.
                let _ =
                    hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(socket), service).await;
            });
        }
    });
    address
}

/// One request: routed by method, path and query; never an error (the
/// failures are S3 error responses).
async fn serve(
    request: Request<Incoming>,
    store: SharedStore,
    bucket: Arc<str>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = request.into_parts();
    let chunked = parts
        .headers
        .get(TRANSFER_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    if chunked {
        return Ok(empty(StatusCode::NOT_IMPLEMENTED));
    }
    let path = percent_decode(parts.uri.path());
    let query = parts.uri.query().unwrap_or_default();
    let header = |name| parts.headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    let is_list = parts.method == Method::GET
        && path.trim_end_matches('/') == format!("/{bucket}")
        && query.split('&').any(|p| p == "list-type=2");
    if is_list {
        let prefix = query
            .split('&')
            .find_map(|p| p.strip_prefix("prefix="))
            .map(|p| percent_decode(&p.replace('+', " ")))
            .unwrap_or_default();
        return Ok(list(&store, &bucket, &prefix).await);
    }
    let Some(key) = path.strip_prefix(&format!("/{bucket}/{}/", moto::STORE_PREFIX)).filter(|k| !k.is_empty()) else {
        return Ok(empty(StatusCode::NOT_IMPLEMENTED));
    };
    Ok(match parts.method {
        Method::GET => match store.get(key).await {
            Ok(object) => object_response(&object.meta.etag, None, object.body),
            Err(_) => s3_error(StatusCode::NOT_FOUND, "NoSuchKey", key),
        },
        Method::HEAD => match store.head(key).await {
            Ok(meta) => object_response(&meta.etag, Some(meta.size), Bytes::new()),
            Err(_) => empty(StatusCode::NOT_FOUND),
        },
        Method::PUT => {
            let mode = match (header(IF_NONE_MATCH), header(IF_MATCH)) {
                (Some("*"), _) => PutMode::CreateNew,
                (_, Some(etag)) => PutMode::IfMatch(etag.trim_matches('"').to_owned()),
                _ => PutMode::Overwrite,
            };
            let body = match body.collect().await {
                Ok(collected) => collected.to_bytes(),
                Err(_) => return Ok(s3_error(StatusCode::BAD_REQUEST, "IncompleteBody", key)),
            };
            match store.put(key, body, mode).await {
                Ok(meta) => {
                    let mut response = empty(StatusCode::OK);
                    if let Ok(etag) = format!("\"{}\"", meta.etag).parse() {
                        response.headers_mut().insert(ETAG, etag);
                    }
                    response
                }
                Err(StoreError::Conflict(_)) => s3_error(StatusCode::PRECONDITION_FAILED, "PreconditionFailed", key),
                Err(_) => s3_error(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", key),
            }
        }
        _ => empty(StatusCode::NOT_IMPLEMENTED),
    })
}

/// A response with `status` and no body.
fn empty(status: StatusCode) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = status;
    response
}

/// An object's `200 OK`: its ETag, and `body` (GET) or, for HEAD, an empty
/// body with the object's `size` as its `content-length`.
fn object_response(etag: &str, head_size: Option<u64>, body: Bytes) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/octet-stream"));
    if let Ok(etag) = format!("\"{etag}\"").parse() {
        headers.insert(ETAG, etag);
    }
    if let Some(size) = head_size {
        headers.insert(CONTENT_LENGTH, size.into());
    }
    response
}

/// `text` percent-decoded (invalid UTF-8 replaced).
fn percent_decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text).decode_utf8_lossy().into_owned()
}

/// `text` with `&`, `<` and `>` escaped for XML element content.
fn xml_escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// An XML response of `status` with `body`.
fn xml(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/xml"));
    response
}

/// A response with an S3 XML error body.
fn s3_error(status: StatusCode, code: &str, key: &str) -> Response<Full<Bytes>> {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code><Key>{}</Key></Error>",
        xml_escape(key)
    );
    xml(status, body)
}

/// ListObjectsV2 of `prefix` (a full key prefix, under [`moto::STORE_PREFIX`])
/// over `store`, in one page.
async fn list(store: &SharedStore, bucket: &str, prefix: &str) -> Response<Full<Bytes>> {
    let root = format!("{}/", moto::STORE_PREFIX);
    let objects = match prefix.strip_prefix(&root) {
        Some(p) => match store.list(p).await {
            Ok(objects) => objects,
            Err(_) => return s3_error(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", prefix),
        },
        None => Vec::new(),
    };
    let mut body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
         <Name>{}</Name><Prefix>{}</Prefix><KeyCount>{}</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>",
        xml_escape(bucket),
        xml_escape(prefix),
        objects.len()
    );
    for o in &objects {
        body.push_str(&format!(
            "<Contents><Key>{}{}</Key><ETag>\"{}\"</ETag><Size>{}</Size><StorageClass>STANDARD</StorageClass></Contents>",
            root,
            xml_escape(&o.key),
            xml_escape(&o.etag),
            o.size
        ));
    }
    body.push_str("</ListBucketResult>");
    xml(StatusCode::OK, body)
}
