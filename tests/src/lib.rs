//! Helpers for Skald's cross-crate integration and end-to-end tests.
//!
//! - [`moto`]: a local S3-protocol server (moto) and a fresh-bucket
//!   [`skald::store::s3::S3Store`] on it, so S3 behaviour is tested without
//!   AWS.
//! - [`fixture`]: apps over temporary stores, corpora, and calls through
//!   `lambda_http` types.
//! - [`model_server`]: a scriptable OpenAI-compatible and Bedrock Converse
//!   server on a local port, for the LLM clients.
//! - [`s3vectors`]: an in-process Amazon S3 Vectors emulator (its REST-JSON
//!   protocol on a local port) and an `aws-sdk-s3vectors` client for it.
//! - [`counting`]: a [`skald::store::Store`] wrapper that records every
//!   call, so tests can assert how many store round trips a route makes.
//! - [`faults`]: a [`skald::store::Store`] wrapper that injects S3's faults
//!   (writes that land but report a timeout or 412, throttling, truncated
//!   or foreign bodies, lagging listings), scripted or at random.
//! - [`tables`]: the request tables of `find` and `search`: a row's
//!   request and the check of a refused row's answer.
//! - [`xml`]: a rendered block parsed back with a real XML parser.
//! - [`gateway`]: the local gateway's dispatch from a function's name to
//!   its handler.
//! - [`on_both_stores!`]: a suite's checks as tests on both store
//!   backends (`local::<check>`, `s3::<check>`).
//!
//! The suites themselves are one test binary, `tests/it/` (one module a
//! suite): `cargo test -p skald-tests --test it find_api::` runs one.
//!
//! The one binary, `local_gateway` (`src/bin/local_gateway.rs`), serves
//! every route on one loopback port: in-process for
//! `scripts/conformance.sh`, in front of `cargo lambda watch` for
//! `scripts/run-local.sh`. The
//! benches, and `model_stub` (the [`model_server`] serving its echo answers
//! standalone), are in the `skald-bench` crate (`bench/`).

pub mod counting;
pub mod faults;
pub mod fixture;
pub mod gateway;
pub mod model_server;
pub mod moto;
pub mod s3vectors;
pub mod tables;
pub mod xml;
