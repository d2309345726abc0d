//! `model_stub`: a stand-in model server for running Skald's LLM stages
//! (query expansion, the digest rewrite, archive summaries) locally, end to
//! end, without credentials, network or a real model — for demos, `cargo
//! lambda watch` (`scripts/run-local.sh`) and trying a request by hand.
//!
//! It serves the deterministic [`Reply::Echo`] answers of
//! `skald_tests::model_server` (the server the tests script) for every
//! request, over both APIs Skald calls:
//!
//! - the OpenAI-compatible chat-completions API at `http://ADDR/v1`;
//! - Amazon Bedrock Converse at `http://ADDR` (a Bedrock model's
//!   `endpoint_url` in the configuration file).
//!
//! The answers: a rewrite prompt gets one cited bullet per `<memory>` entry
//! (`- <first line> (source: <uri>)`), an expansion prompt one query (the
//! latest user message), a memory-extraction prompt one `entities` memory
//! per user message ("The user said: …"), a comparison prompt "add" for
//! every new memory, anything else `echo: <the user message>`.
//!
//! ```text
//! cargo run -q -p skald-bench --bin model_stub                               # 127.0.0.1:9100
//! cargo run -q -p skald-bench --bin model_stub -- --listen 127.0.0.1:9200
//! SKALD_LLM_BASE_URL=http://127.0.0.1:9100/v1 SKALD_LLM_MODEL=stub scripts/run-local.sh
//! ```
//!
//! One line per request goes to stderr (method, path, the start of the
//! prompt); the stub runs until killed.

use std::net::SocketAddr;

use skald_tests::model_server::{ModelServer, Reply};

/// Where the stub listens unless `--listen` says otherwise.
const DEFAULT_LISTEN: &str = "127.0.0.1:9100";

/// `--help`.
const HELP: &str = "\
model_stub: a stand-in model server for running Skald's LLM stages locally
without credentials or a real model. It answers every request with a
deterministic echo: a digest rewrite gets one cited bullet per memory entry,
a query expansion the latest user message as its one query, anything else
`echo: <message>`.

Usage: model_stub [--listen ADDR]

Options:
  --listen ADDR   the address to serve on (default 127.0.0.1:9100)
  -h, --help      print this help

APIs on ADDR:
  http://ADDR/v1  OpenAI-compatible chat completions
  http://ADDR     Amazon Bedrock Converse (a Bedrock model's endpoint_url)

Example:
  cargo run -q -p skald-bench --bin model_stub -- --listen 127.0.0.1:9100 &
  SKALD_LLM_BASE_URL=http://127.0.0.1:9100/v1 SKALD_LLM_MODEL=stub scripts/run-local.sh

It logs one line per request to stderr and runs until killed.";

/// What the command line asks for.
enum Command {
    /// Serve on this address.
    Serve(SocketAddr),
    /// Print [`HELP`].
    Help,
}

/// Reads the command line (without the program name).
fn parse(mut args: impl Iterator<Item = String>) -> Result<Command, String> {
    let mut listen = DEFAULT_LISTEN.to_owned();
    while let Some(arg) = args.next() {
        if arg == "--listen" {
            listen = args.next().ok_or("--listen needs an address")?;
        } else if let Some(value) = arg.strip_prefix("--listen=") {
            value.clone_into(&mut listen);
        } else if arg == "-h" || arg == "--help" {
            return Ok(Command::Help);
        } else {
            return Err(format!("unexpected argument {arg:?}"));
        }
    }
    listen.parse().map(Command::Serve).map_err(|e| format!("bad --listen address {listen:?}: {e}"))
}

#[tokio::main]
async fn main() {
    let addr = match parse(std::env::args().skip(1)) {
        Ok(Command::Serve(addr)) => addr,
        #[allow(clippy::print_stdout)] // --help answers on stdout
        Ok(Command::Help) => {
            println!("{HELP}");
            return;
        }
        Err(e) => {
            eprintln!(
                "model_stub: {e}\nusage: model_stub [--listen ADDR]   (default {DEFAULT_LISTEN}; --help for more)"
            );
            std::process::exit(2)
        }
    };
    let server = ModelServer::bind(addr).await.unwrap_or_else(|e| {
        eprintln!("model_stub: cannot listen on {addr}: {e}");
        std::process::exit(1)
    });
    server.set_default(Reply::Echo);
    server.log_requests(true);
    let addr = server.addr();
    eprintln!("model stub listening on http://{addr}/v1 (OpenAI-compatible) and http://{addr} (Bedrock)");
    std::future::pending::<()>().await;
}
