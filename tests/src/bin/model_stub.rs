//! A local stand-in for a real model: serves the deterministic
//! [`Reply::Echo`] answers of `skald_tests::model_server` for every request,
//! over both the OpenAI-compatible chat-completions API and Amazon Bedrock
//! Converse, so Skald's LLM stages can be run end to end (demos, `cargo
//! lambda watch`) without credentials or a model.
//!
//! ```text
//! cargo run -p skald-tests --bin model_stub                          # 127.0.0.1:9100
//! cargo run -p skald-tests --bin model_stub -- --listen 127.0.0.1:9200
//! SKALD_LLM_BASE_URL=http://127.0.0.1:9100/v1 …                        # OpenAI-compatible client
//! ```
//!
//! For Bedrock, point the client's endpoint override at
//! `http://127.0.0.1:9100`. One line per request goes to stderr (method,
//! path, the start of the prompt); the stub runs until killed.

use std::net::SocketAddr;

use skald_tests::model_server::{ModelServer, Reply};

const DEFAULT_LISTEN: &str = "127.0.0.1:9100";
const USAGE: &str = "usage: model_stub [--listen ADDR]   (default 127.0.0.1:9100)";

fn listen_addr() -> Result<SocketAddr, String> {
    let mut listen = DEFAULT_LISTEN.to_owned();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--listen" {
            listen = args.next().ok_or("--listen needs an address")?;
        } else if let Some(value) = arg.strip_prefix("--listen=") {
            value.clone_into(&mut listen);
        } else if arg == "-h" || arg == "--help" {
            eprintln!("{USAGE}");
            std::process::exit(0);
        } else {
            return Err(format!("unexpected argument {arg:?}"));
        }
    }
    listen.parse().map_err(|e| format!("bad --listen address {listen:?}: {e}"))
}

#[tokio::main]
async fn main() {
    let addr = listen_addr().unwrap_or_else(|e| {
        eprintln!("{e}\n{USAGE}");
        std::process::exit(2)
    });
    let server = ModelServer::bind(addr).await.unwrap_or_else(|e| {
        eprintln!("cannot listen on {addr}: {e}");
        std::process::exit(1)
    });
    server.set_default(Reply::Echo);
    server.log_requests(true);
    let addr = server.addr();
    eprintln!("model stub listening on http://{addr}/v1 (OpenAI-compatible) and http://{addr} (Bedrock)");
    std::future::pending::<()>().await;
}
