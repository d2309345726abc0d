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

/// The clock in milliseconds since the epoch, as a commit hands it to
/// `skald::index::compact`.
pub(crate) fn now_ms() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("the clock is past 1970");
    i64::try_from(since.as_millis()).expect("milliseconds fit in an i64")
}
