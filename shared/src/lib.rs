//! Skald: the library behind every Skald function.
//!
//! All domain logic lives here; I/O sits behind small traits ([`store::Store`],
//! [`embed::Embedder`]) and nothing in this crate knows about Lambda.
//! See `ARCHITECTURE.md` at the repository root for the map and invariants.

pub mod api;
pub mod app;
#[cfg(feature = "assemble")]
pub mod assemble;
pub mod config;
pub mod content;
pub mod deadline;
#[cfg(feature = "documents")]
pub mod documents;
pub mod embed;
pub mod explore;
pub mod find;
pub mod identity;
pub mod index;
pub mod indexer;
pub mod ingest;
pub mod keys;
pub mod ledger;
#[cfg(feature = "llm")]
pub mod llm;
pub mod memory;
pub mod names;
#[cfg(feature = "assemble")]
pub mod pipeline;
pub mod retention;
pub mod retrieval;
#[cfg(feature = "secrets")]
pub mod secrets;
pub mod sessions;
pub mod store;
pub mod timeparse;
pub mod tokens;
pub mod tool_results;
pub mod uri;
pub mod watch;
pub mod write;
pub mod xml_text;
