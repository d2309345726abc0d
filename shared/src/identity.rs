//! Who a request acts as: account, user and optional actor
//! peer, each a validated name, and what that identity may see.

use crate::uri::VikingUri;

pub use crate::names::{AccountId, NameError, PeerId, UserId};

/// The identity a request acts as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The account; a request never sees another account.
    pub account: AccountId,
    /// The user; a request sees its own tree and the shared roots.
    pub user: UserId,
    /// The acting peer, when the client names one.
    pub actor_peer: Option<PeerId>,
}

/// The shared roots every user of an account may read.
pub const SHARED_ROOTS: [&str; 2] = ["viking://resources", "viking://agent/skills"];

impl Identity {
    /// `viking://user/{user}`.
    #[must_use]
    pub fn user_root(&self) -> VikingUri {
        uri_of(&format!("user/{}", self.user))
    }

    /// Whether this identity may read at or below `uri`: its own user tree,
    /// a shared root, or an ancestor of those used as a search target
    /// (`viking://`, `viking://user`, `viking://agent` are narrowed to what
    /// the caller may see by [`Identity::visible_roots`]).
    #[must_use]
    pub fn may_read(&self, uri: &VikingUri) -> bool {
        self.visible_roots().iter().any(|root| uri.is_under(root) || root.is_under(uri))
    }

    /// `uri` with the home alias expanded: `viking://~` is the caller's own
    /// user root and `viking://~/rest` lies below it; any other URI comes
    /// back unchanged. Every URI a request names goes through this before
    /// it is authorised.
    #[must_use]
    pub fn resolve_home(&self, uri: &VikingUri) -> VikingUri {
        let path = uri.path();
        let rest = match path.split_once('/') {
            Some(("~", rest)) => Some(rest),
            None if path == "~" => Some(""),
            _ => None,
        };
        match rest {
            None => uri.clone(),
            Some("") => self.user_root(),
            Some(rest) => self.user_root().join(rest).unwrap_or_else(|_| uri.clone()),
        }
    }

    /// Whether `uri` lies in the tree of a peer other than the acting peer
    /// (`viking://user/{user}/peers/{other}/…`); never when no actor peer
    /// is set. Such a URI is hidden from, and refused to, the request.
    #[must_use]
    pub fn is_other_peer(&self, uri: &VikingUri) -> bool {
        let Some(actor) = &self.actor_peer else { return false };
        let mut segments = uri.segments();
        matches!(
            (segments.next(), segments.next(), segments.next(), segments.next()),
            (Some("user"), Some(user), Some("peers"), Some(peer)) if user == self.user.as_str() && peer != actor.as_str()
        )
    }

    /// The roots this identity can see: its user tree and the shared roots.
    #[must_use]
    pub fn visible_roots(&self) -> Vec<VikingUri> {
        let mut roots = vec![self.user_root()];
        roots.extend(SHARED_ROOTS.iter().map(|r| uri_of(&r["viking://".len()..])));
        roots
    }
}

/// A URI from a path built only from validated names and constants.
fn uri_of(path: &str) -> VikingUri {
    VikingUri::from_path(path).expect("validated names and constants form a valid uri")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alice() -> Identity {
        Identity {
            account: AccountId::new("default").expect("valid"),
            user: UserId::new("alice").expect("valid"),
            actor_peer: None,
        }
    }

    #[test]
    fn names_are_validated() {
        assert!(UserId::new("alice_01@x.y-z").is_ok());
        for bad in ["", ".", "..", "a/b", "a b", "é", &"x".repeat(129)] {
            let err = UserId::new(bad).expect_err(bad);
            assert!(err.to_string().starts_with("user id must be"), "{err}");
        }
    }

    #[test]
    fn a_user_reads_its_tree_and_the_shared_roots_only() {
        let me = alice();
        let u = |s: &str| VikingUri::parse(s).expect("valid");
        assert!(me.may_read(&u("viking://user/alice/memories/x.md")));
        assert!(me.may_read(&u("viking://resources/aws")));
        assert!(me.may_read(&u("viking://agent/skills/deploy/SKILL.md")));
        assert!(me.may_read(&u("viking://")));
        assert!(!me.may_read(&u("viking://user/bob/memories")));
        assert!(!me.may_read(&u("viking://user/alicex")));
        assert!(!me.may_read(&u("viking://agent/private")));
        assert!(!me.may_read(&u("viking://session/123")));
    }

    #[test]
    fn the_home_alias_is_the_callers_own_root() {
        let me = alice();
        let u = |s: &str| VikingUri::parse(s).expect("valid");
        let cases = [
            ("viking://~", "viking://user/alice"),
            ("viking://~/", "viking://user/alice"),
            ("viking://~/memories/profile.md", "viking://user/alice/memories/profile.md"),
            // Only the first segment is the alias.
            ("viking://user/~/memories", "viking://user/~/memories"),
            ("viking://~x/memories", "viking://~x/memories"),
            ("viking://resources/~", "viking://resources/~"),
        ];
        for (text, want) in cases {
            assert_eq!(me.resolve_home(&u(text)).as_str(), want, "{text}");
        }
    }

    #[test]
    fn other_peers_are_hidden_only_from_an_acting_peer() {
        let mut me = alice();
        let u = |s: &str| VikingUri::parse(s).expect("valid");
        let other = u("viking://user/alice/peers/p2/memories/x.md");
        assert!(!me.is_other_peer(&other));
        me.actor_peer = Some(PeerId::new("p1").expect("valid"));
        assert!(me.is_other_peer(&other));
        assert!(!me.is_other_peer(&u("viking://user/alice/peers/p1/memories/x.md")));
        assert!(!me.is_other_peer(&u("viking://user/alice/peers")));
        assert!(!me.is_other_peer(&u("viking://user/alice/memories/x.md")));
    }
}
