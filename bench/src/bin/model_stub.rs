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
//!   `endpoint_url` in the configuration file);
//! - a reranker's `POST /v1/rerank` (Cohere's shape): each document scored
//!   by the share of the query's words it holds.
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

Usage: model_stub [--listen ADDR] [--fail STATUS] [--delay-ms N]

Options:
  --listen ADDR   the address to serve on (default 127.0.0.1:9100)
  --fail STATUS   answer every request with this HTTP error status instead
                  (a model that is down), e.g. 500
  --delay-ms N    wait N milliseconds before each answer (a model slower
                  than the request's deadline)
  -h, --help      print this help

APIs on ADDR:
  http://ADDR/v1  OpenAI-compatible chat completions
  http://ADDR     Amazon Bedrock Converse (a Bedrock model's endpoint_url)

Example:
  cargo run -q -p skald-bench --bin model_stub -- --listen 127.0.0.1:9100 &
  SKALD_LLM_BASE_URL=http://127.0.0.1:9100/v1 SKALD_LLM_MODEL=stub scripts/run-local.sh

It logs one line per request to stderr and runs until killed.";

/// What the command line asks for.
#[derive(Debug, PartialEq)]
enum Command {
    /// Serve on this address with these answers.
    Serve(SocketAddr, Behaviour),
    /// Print [`HELP`].
    Help,
}

/// How the stub answers.
#[derive(Debug, Default, PartialEq)]
struct Behaviour {
    /// Every request gets this error status (`--fail`).
    fail: Option<u16>,
    /// Every answer waits this long (`--delay-ms`).
    delay_ms: u64,
}

impl Behaviour {
    /// The reply every request gets.
    fn reply(&self) -> Reply {
        let answer = self.fail.map_or(Reply::Echo, Reply::Status);
        if self.delay_ms == 0 {
            answer
        } else {
            Reply::Delay(std::time::Duration::from_millis(self.delay_ms), Box::new(answer))
        }
    }
}

/// Reads the command line (without the program name).
fn parse(mut args: impl Iterator<Item = String>) -> Result<Command, String> {
    let mut listen = DEFAULT_LISTEN.to_owned();
    let mut behaviour = Behaviour::default();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag.to_owned(), Some(value.to_owned())),
            _ => (arg.clone(), None),
        };
        let mut value = |what: &str| inline.clone().or_else(|| args.next()).ok_or(format!("{flag} needs {what}"));
        match flag.as_str() {
            "--listen" => listen = value("an address")?,
            "--fail" => {
                let status = value("a status")?;
                let code: u16 = status.parse().map_err(|e| format!("--fail {status:?}: {e}"))?;
                if !(400..600).contains(&code) {
                    return Err(format!("--fail {code}: not an HTTP error status (400-599)"));
                }
                behaviour.fail = Some(code);
            }
            "--delay-ms" => {
                let ms = value("milliseconds")?;
                behaviour.delay_ms = ms.parse().map_err(|e| format!("--delay-ms {ms:?}: {e}"))?;
            }
            "-h" | "--help" => return Ok(Command::Help),
            _ => return Err(format!("unexpected argument {arg:?}")),
        }
    }
    let addr = listen.parse().map_err(|e| format!("bad --listen address {listen:?}: {e}"))?;
    Ok(Command::Serve(addr, behaviour))
}

#[tokio::main]
async fn main() {
    let (addr, behaviour) = match parse(std::env::args().skip(1)) {
        Ok(Command::Serve(addr, behaviour)) => (addr, behaviour),
        #[allow(clippy::print_stdout)] // --help answers on stdout
        Ok(Command::Help) => {
            println!("{HELP}");
            return;
        }
        Err(e) => {
            eprintln!(
                "model_stub: {e}\nusage: model_stub [--listen ADDR] [--fail STATUS] [--delay-ms N]   (default \
                 {DEFAULT_LISTEN}; --help for more)"
            );
            std::process::exit(2)
        }
    };
    let server = ModelServer::bind(addr).await.unwrap_or_else(|e| {
        eprintln!("model_stub: cannot listen on {addr}: {e}");
        std::process::exit(1)
    });
    server.set_default(behaviour.reply());
    server.log_requests(true);
    let addr = server.addr();
    eprintln!("model stub listening on http://{addr}/v1 (OpenAI-compatible) and http://{addr} (Bedrock)");
    std::future::pending::<()>().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(args: &[&str]) -> Result<Command, String> {
        parse(args.iter().map(|a| (*a).to_owned()))
    }

    #[test]
    fn the_command_line_names_the_address_and_the_failure_modes() {
        let local: SocketAddr = DEFAULT_LISTEN.parse().expect("address");
        assert_eq!(parsed(&[]), Ok(Command::Serve(local, Behaviour::default())));
        assert_eq!(
            parsed(&["--listen=127.0.0.1:0", "--fail", "503", "--delay-ms=2500"]),
            Ok(Command::Serve("127.0.0.1:0".parse().expect("address"), Behaviour { fail: Some(503), delay_ms: 2500 }))
        );
        assert_eq!(parsed(&["--help"]), Ok(Command::Help));
        for (bad, says) in [
            (&["--fail", "200"][..], "not an HTTP error status"),
            (&["--fail"][..], "--fail needs a status"),
            (&["--delay-ms", "soon"][..], "--delay-ms \"soon\""),
            (&["--listen", "nowhere"][..], "bad --listen address"),
            (&["--loud"][..], "unexpected argument"),
        ] {
            let err = parsed(bad).expect_err("refused");
            assert!(err.contains(says), "{bad:?}: {err}");
        }
        assert!(matches!(Behaviour { fail: Some(500), delay_ms: 0 }.reply(), Reply::Status(500)));
        assert!(matches!(Behaviour { fail: None, delay_ms: 5 }.reply(), Reply::Delay(_, _)));
    }
}
