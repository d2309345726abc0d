//! Helpers for Skald's cross-crate integration and end-to-end tests.
//!
//! - [`moto`]: a local S3-protocol server (moto) and a fresh-bucket
//!   [`skald::store::s3::S3Store`] on it, so S3 behaviour is tested without
//!   AWS.
//! - [`fixture`]: apps over temporary stores, corpora, and calls through
//!   `lambda_http` types.
//! - [`model_server`]: a scriptable OpenAI-compatible and Bedrock Converse
//!   server on a local port, for the LLM clients (binary `model_stub` serves
//!   its echo answers standalone).
//! - [`counting`]: a [`skald::store::Store`] wrapper that records every
//!   call, so tests can assert how many store round trips a route makes.
//! - [`faults`]: a [`skald::store::Store`] wrapper that injects S3's faults
//!   (writes that land but report a timeout or 412, throttling, truncated
//!   or foreign bodies, lagging listings), scripted or at random.
//! - [`xml`]: a rendered block parsed back with a real XML parser.
//! - [`bench_util`]: what the bench binaries (`src/bin/bench*.rs`) share:
//!   statistics and tables, flags, the demo app over a temporary store, the
//!   latency proxy and an in-process S3-protocol server.

pub mod bench_util;
pub mod counting;
pub mod faults;
pub mod fixture;
pub mod model_server;
pub mod moto;
pub mod xml;
