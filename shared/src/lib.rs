//! Skald: the library behind every Skald function.
//!
//! All domain logic lives here; I/O sits behind small traits ([`store::Store`],
//! [`embed::Embedder`]) and nothing in this crate knows about Lambda.
//! See `ARCHITECTURE.md` at the repository root for the map and invariants.

pub mod embed;
pub mod identity;
pub mod index;
pub mod store;
pub mod tokens;
pub mod uri;
