//! Helpers for Skald's cross-crate integration and end-to-end tests.
//!
//! - [`moto`]: a local S3-protocol server (moto) and a fresh-bucket
//!   [`skald::store::s3::S3Store`] on it, so S3 behaviour is tested without
//!   AWS.

pub mod fixture;
pub mod moto;
