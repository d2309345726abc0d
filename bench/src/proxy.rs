//! The latency proxy: a loopback HTTP/1.1 proxy (hyper's server and client
//! connections) that logs every request and delays it before forwarding, so
//! that every S3 call of the client under test pays one simulated round
//! trip.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};

use crate::fail;

/// One HTTP request the proxy forwarded.
#[derive(Debug, Clone)]
pub struct Call {
    /// When its head arrived at the proxy.
    pub at: Instant,
    /// The HTTP method.
    pub method: String,
    /// The request target without its query string, percent-decoded
    /// (path style: `/{bucket}/{key}`).
    pub path: String,
}

/// What a [`start_proxy`] forwarded, in arrival order.
#[derive(Debug, Default)]
pub struct CallLog {
    calls: Mutex<Vec<Call>>,
}

impl CallLog {
    /// The calls logged since the last `take`, emptying the log.
    pub fn take(&self) -> Vec<Call> {
        std::mem::take(&mut *self.calls.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn push(&self, call: Call) {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner).push(call);
    }
}

/// Why one proxied connection ended early (the proxy drops the connection;
/// the client under test sees it closed).
#[derive(Debug, thiserror::Error)]
enum ProxyError {
    /// The upstream server refused the TCP connection.
    #[error("connect to upstream {upstream}: {source}")]
    Connect {
        /// The upstream address.
        upstream: SocketAddr,
        /// The socket error.
        source: std::io::Error,
    },
    /// The HTTP/1.1 handshake with the upstream failed.
    #[error("upstream handshake: {0}")]
    Handshake(#[source] hyper::Error),
    /// Serving the client's connection failed (a malformed request, a
    /// connection reset).
    #[error("client connection: {0}")]
    Serve(#[source] hyper::Error),
}

/// The body of a proxied response: the upstream's, streamed, or the
/// proxy's own `502 Bad Gateway`.
type ProxyBody = Either<Incoming, Full<Bytes>>;

/// Starts a loopback HTTP/1.1 proxy to `upstream` that logs each request in
/// `log` (when its head arrives) and waits `latency` (if any) before
/// forwarding it; request and response bodies (`content-length` or chunked)
/// are streamed through unchanged, headers (`Host` included) as sent. Each
/// client connection gets its own upstream connection, so keep-alive on one
/// side is keep-alive on the other. One store call is one request, so every
/// call pays one simulated round trip.
///
/// It stands in for a latency-injecting `Store` wrapper and sees what the
/// S3 client really sends. A request the upstream does not answer is
/// answered `502 Bad Gateway`.
pub async fn start_proxy(upstream: SocketAddr, latency: Duration, log: Arc<CallLog>) -> SocketAddr {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap_or_else(|e| fail("proxy bind", e));
    let address = listener.local_addr().unwrap_or_else(|e| fail("proxy address", e));
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let log = Arc::clone(&log);
            tokio::spawn(async move {
                // A failed connection is the client's to notice; the bench
                // checks every response it gets.
                let _ = proxy_connection(client, upstream, latency, log).await;
            });
        }
    });
    address
}

/// Serves one client connection over one new upstream connection.
async fn proxy_connection(
    client: TcpStream,
    upstream: SocketAddr,
    latency: Duration,
    log: Arc<CallLog>,
) -> Result<(), ProxyError> {
    let server = TcpStream::connect(upstream).await.map_err(|source| ProxyError::Connect { upstream, source })?;
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    let (sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(server)).await.map_err(ProxyError::Handshake)?;
    // Drives the upstream connection until the sender is dropped.
    let upstream_task = tokio::spawn(connection);
    // The server side of HTTP/1.1 hands over one request at a time, so the
    // lock is never contended; it only lets each request borrow the sender.
    let sender = Arc::new(tokio::sync::Mutex::new(sender));
    let service = service_fn(move |request| forward(request, Arc::clone(&sender), latency, Arc::clone(&log)));
    let served = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(client), service).await;
    upstream_task.abort();
    served.map_err(ProxyError::Serve)
}

/// Logs `request`, waits `latency`, forwards it upstream and hands back the
/// upstream's response (or a 502 when there is none).
async fn forward(
    request: Request<Incoming>,
    sender: Arc<tokio::sync::Mutex<SendRequest<Incoming>>>,
    latency: Duration,
    log: Arc<CallLog>,
) -> Result<Response<ProxyBody>, hyper::Error> {
    let path = percent_encoding::percent_decode_str(request.uri().path()).decode_utf8_lossy().into_owned();
    log.push(Call { at: Instant::now(), method: request.method().to_string(), path });
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let mut sender = sender.lock().await;
    let answered = match sender.ready().await {
        Ok(()) => sender.send_request(request).await,
        Err(e) => Err(e),
    };
    Ok(match answered {
        Ok(response) => response.map(Either::Left),
        Err(e) => {
            let mut response = Response::new(Either::Right(Full::new(Bytes::from(format!("proxy: upstream: {e}")))));
            *response.status_mut() = StatusCode::BAD_GATEWAY;
            response
        }
    })
}
