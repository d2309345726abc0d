//! What a commit keeps live: OpenViking's two retention policies over a
//! session's live messages, as pure arithmetic. `keep_recent_count` keeps
//! that many newest messages; the turn-budget mode
//! (`retention_mode: "turn_budget"`) keeps the newest user turns that fit
//! a token budget. The commit archives the rest.

/// The turn-budget policy, with the reference's effective defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TurnBudget {
    /// User turns kept at most (`keep_recent_turn_count`, default 3).
    pub turns: u64,
    /// Tokens the kept messages may take (`retained_message_token_budget`,
    /// default 12000).
    pub token_budget: u64,
    /// Newest messages kept whatever the budget (`min_raw_tail_steps`,
    /// default 1).
    pub min_tail: u64,
}

impl Default for TurnBudget {
    fn default() -> Self {
        Self { turns: 3, token_budget: 12_000, min_tail: 1 }
    }
}

/// One live message as the policy sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// Whether it opens a user turn (a `user` message).
    pub user: bool,
    /// Its estimated tokens.
    pub tokens: u64,
}

/// What the turn-budget policy keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retained {
    /// The newest messages kept live (the commit's keep count).
    pub keep: u64,
    /// Their estimated tokens.
    pub estimated_active_tokens: u64,
    /// Whether they take more than the budget (only the minimal tail
    /// could not be cut further).
    pub budget_exceeded: bool,
}

/// The newest messages of `steps` (oldest first) that `policy` keeps: from
/// the start of the `turns`-th newest user turn; while they take more than
/// the budget, the oldest kept turn goes, then single messages, down to
/// `min_tail` messages.
#[must_use]
pub fn turn_budget(steps: &[Step], policy: TurnBudget) -> Retained {
    let n = steps.len();
    let turn_starts: Vec<usize> = steps.iter().enumerate().filter(|(_, s)| s.user).map(|(i, _)| i).collect();
    let wanted = usize::try_from(policy.turns).unwrap_or(usize::MAX);
    // No turns wanted: only the minimal tail.
    let mut start = match wanted {
        0 => n,
        w if w >= turn_starts.len() => turn_starts.first().copied().unwrap_or(n),
        w => turn_starts[turn_starts.len() - w],
    };
    let min_tail = usize::try_from(policy.min_tail).unwrap_or(usize::MAX).min(n);
    start = start.min(n - min_tail);
    let tokens = |from: usize| steps[from..].iter().map(|s| s.tokens).sum::<u64>();
    while tokens(start) > policy.token_budget && n - start > min_tail {
        // The next turn start after `start`, else the next message.
        let next_turn = turn_starts.iter().copied().find(|&t| t > start).unwrap_or(start + 1);
        start = next_turn.min(n - min_tail);
    }
    let estimated_active_tokens = tokens(start);
    Retained {
        keep: (n - start) as u64,
        estimated_active_tokens,
        budget_exceeded: estimated_active_tokens > policy.token_budget,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps(spec: &[(bool, u64)]) -> Vec<Step> {
        spec.iter().map(|&(user, tokens)| Step { user, tokens }).collect()
    }

    #[test]
    fn keeps_the_newest_turns_that_fit() {
        // Four turns of a user and an assistant message, 10 tokens each.
        let chat = steps(&[(true, 10), (false, 10)].repeat(4));
        let cases: &[(TurnBudget, u64, u64, bool)] = &[
            (TurnBudget::default(), 6, 60, false),
            (TurnBudget { turns: 1, ..TurnBudget::default() }, 2, 20, false),
            (TurnBudget { turns: 9, ..TurnBudget::default() }, 8, 80, false),
            (TurnBudget { token_budget: 45, ..TurnBudget::default() }, 4, 40, false),
            (TurnBudget { token_budget: 5, ..TurnBudget::default() }, 1, 10, true),
            (TurnBudget { token_budget: 5, min_tail: 3, ..TurnBudget::default() }, 3, 30, true),
            (TurnBudget { turns: 0, ..TurnBudget::default() }, 1, 10, false),
            (TurnBudget { turns: 0, min_tail: 0, ..TurnBudget::default() }, 0, 0, false),
        ];
        for &(policy, keep, tokens, exceeded) in cases {
            let got = turn_budget(&chat, policy);
            assert_eq!(
                (got.keep, got.estimated_active_tokens, got.budget_exceeded),
                (keep, tokens, exceeded),
                "{policy:?}"
            );
        }
    }

    #[test]
    fn a_long_turn_is_cut_message_by_message_and_nothing_is_kept_of_nothing() {
        // One user message, then a long tool-heavy reply.
        let chat = steps(&[(true, 5), (false, 100), (false, 100), (false, 5)]);
        let got = turn_budget(&chat, TurnBudget { token_budget: 110, ..TurnBudget::default() });
        assert_eq!((got.keep, got.estimated_active_tokens, got.budget_exceeded), (2, 105, false));
        assert_eq!(
            turn_budget(&[], TurnBudget::default()),
            Retained { keep: 0, estimated_active_tokens: 0, budget_exceeded: false }
        );
    }
}
