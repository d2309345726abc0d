//! Helpers for Skald's cross-crate integration and end-to-end tests.
//!
//! - [`moto`]: a local S3-protocol server (moto) and a fresh-bucket
//!   [`skald::store::s3::S3Store`] on it, so S3 behaviour is tested without
//!   AWS.
//! - [`fixture`]: apps over temporary stores, corpora, and calls through
//!   `lambda_http` types.
//! - [`xml`]: a rendered block parsed back with a real XML parser.

pub mod fixture;
pub mod moto;
pub mod xml;
