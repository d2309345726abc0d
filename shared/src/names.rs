//! The validated names of the store layout: account, user and peer ids.
//!
//! Below [`crate::uri`] (a tree's keys are an account's) and
//! [`crate::identity`] (who a request acts as), which both build on them.

use std::fmt;

/// Why a name is not a valid account, user or peer id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} must be 1-128 characters of [A-Za-z0-9_.@-] and not '.' or '..': {value:?}")]
pub struct NameError {
    /// Which kind of name (`account id`, `user id`, `peer id`).
    pub kind: &'static str,
    /// The rejected value.
    pub value: String,
}

fn validate(kind: &'static str, value: &str) -> Result<String, NameError> {
    let ok = (1..=128).contains(&value.len())
        && value != "."
        && value != ".."
        && value.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'@'));
    if ok { Ok(value.to_owned()) } else { Err(NameError { kind, value: value.to_owned() }) }
}

macro_rules! name_type {
    ($(#[$doc:meta])* $name:ident, $kind:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(String);

        impl $name {
            /// Validates `value`: 1-128 characters of `[A-Za-z0-9_.@-]`, not `.` or `..`.
            ///
            /// # Errors
            /// A [`NameError`] naming the value.
            pub fn new(value: &str) -> Result<Self, NameError> {
                validate($kind, value).map(Self)
            }

            /// The name as text.
            #[must_use]
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

name_type!(
    /// An account (tenant) id: the top of the store layout.
    AccountId,
    "account id"
);
name_type!(
    /// A user id within an account.
    UserId,
    "user id"
);
name_type!(
    /// A peer (an agent host or project acting for the user).
    PeerId,
    "peer id"
);
