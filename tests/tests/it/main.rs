//! Skald's cross-crate integration and end-to-end tests, as one test binary
//! (`cargo test -p skald-tests --test it`): one module a suite, so the AWS
//! SDKs and the library are linked once rather than once a suite. Run one
//! suite by its module path, e.g.
//! `cargo test -p skald-tests --test it find_api::`.
//!
//! The suites share one process: the moto S3 server
//! ([`skald_tests::moto`]) is started once for all of them, every store
//! and bucket is per test, and no test changes the process environment.

mod api_keys;
mod append_load;
mod assemble_properties;
mod bootstrap_api;
mod common;
mod content_api;
mod content_writes;
mod demo_context;
mod e5_parity;
mod find_api;
mod golden;
mod index_backends;
mod index_suite;
mod indexer;
mod ingest;
mod keyword_search;
mod layering;
mod llm_stages;
mod mcp_tools;
mod memory_extraction;
mod model_server;
mod openapi;
mod passages;
mod recall_api;
mod rerank;
mod resources;
mod retrieval_quality;
mod route_calls;
mod s3vectors_emulator;
mod search_api;
mod secrets;
mod session_commit;
mod sessions_api;
mod soak;
mod storage_faults;
mod store_suite;
mod template;
mod use_m3_parity;
