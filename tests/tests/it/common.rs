//! Helpers more than one suite of this binary uses.

use skald::identity::AccountId;
use skald::index::EmbedderInfo;

/// The vector dimension of the index suites' fixed test embedder.
pub(crate) const DIM: usize = 8;

/// The account the index suites write to.
pub(crate) fn account() -> AccountId {
    AccountId::new("acme").expect("valid account id")
}

/// The index suites' fixed test embedder, of dimension [`DIM`].
pub(crate) fn embedder() -> EmbedderInfo {
    EmbedderInfo { id: "test-fixed/8".to_owned(), dimension: DIM }
}
