//! The request deadline: one effective instant per request,
//! the earliest of the Lambda invocation deadline, the API Gateway
//! integration limit counted from the invocation start, and the client's own
//! limit (`X-Client-Timeout-Ms`). Pure arithmetic over instants the caller
//! passes in: nothing here reads a clock.

use std::time::{Duration, Instant};

/// The header a client sends its own limit in, in milliseconds.
pub const CLIENT_TIMEOUT_HEADER: &str = "x-client-timeout-ms";

/// A stage is skipped when it would get less than this: no model answers
/// usefully in less.
pub const MIN_STAGE: Duration = Duration::from_millis(100);

/// The whole request is cut this long before the deadline, so that the
/// error or the answer still reaches the client in time.
pub const ANSWER_MARGIN: Duration = Duration::from_millis(50);

/// The Lambda invocation deadline, attached to a request as an extension by
/// the Lambda edge (absent elsewhere).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvocationDeadline(pub Instant);

/// Which limit decided a [`Deadline`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadlineSource {
    /// The Lambda invocation deadline.
    Lambda,
    /// The API Gateway integration limit from the configuration.
    Gateway,
    /// The client's `X-Client-Timeout-Ms`.
    Client,
}

impl DeadlineSource {
    /// `lambda`, `gateway` or `client`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Lambda => "lambda",
            Self::Gateway => "gateway",
            Self::Client => "client",
        }
    }
}

/// One request's effective deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    /// The instant the answer must have left by.
    pub at: Instant,
    /// Which limit set it.
    pub source: DeadlineSource,
}

impl Deadline {
    /// The earliest of `lambda` (when known), `start + gateway` and, when
    /// the client sent one, `start + client`. Ties go to the client, then
    /// the gateway.
    #[must_use]
    pub fn effective(start: Instant, lambda: Option<Instant>, gateway: Duration, client: Option<Duration>) -> Self {
        let mut best = Self { at: start + gateway, source: DeadlineSource::Gateway };
        if let Some(at) = lambda
            && at < best.at
        {
            best = Self { at, source: DeadlineSource::Lambda };
        }
        if let Some(limit) = client
            && start + limit <= best.at
        {
            best = Self { at: start + limit, source: DeadlineSource::Client };
        }
        best
    }

    /// Time left at `now` (zero once passed).
    #[must_use]
    pub fn remaining(&self, now: Instant) -> Duration {
        self.at.saturating_duration_since(now)
    }

    /// A stage's timeout at `now`: `min(cap, time left − reserve)`, or
    /// `None` (skip the stage) when that is under [`MIN_STAGE`].
    #[must_use]
    pub fn stage_budget(&self, now: Instant, cap: Duration, reserve: Duration) -> Option<Duration> {
        let budget = self.remaining(now).saturating_sub(reserve).min(cap);
        (budget >= MIN_STAGE).then_some(budget)
    }

    /// The instant the whole request is cut at: [`ANSWER_MARGIN`] before
    /// the deadline.
    #[must_use]
    pub fn hard_stop(&self) -> Instant {
        self.at.checked_sub(ANSWER_MARGIN).unwrap_or(self.at)
    }

    /// The instant optional work (the ledger write) gives up at: one more
    /// [`ANSWER_MARGIN`] before [`Deadline::hard_stop`], so that it ends
    /// softly before the whole request would be cut.
    #[must_use]
    pub fn soft_stop(&self) -> Instant {
        self.hard_stop().checked_sub(ANSWER_MARGIN).unwrap_or(self.at)
    }
}

/// Parses `X-Client-Timeout-Ms`: a positive whole number of milliseconds.
///
/// # Errors
/// A message naming the header and the bad value.
pub fn parse_client_timeout(value: &[u8]) -> Result<Duration, String> {
    let text = std::str::from_utf8(value).unwrap_or("").trim();
    match text.parse::<u64>() {
        Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
        _ => Err(format!(
            "header X-Client-Timeout-Ms must be a positive whole number of milliseconds, not {:?}",
            String::from_utf8_lossy(value)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;
    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn the_earliest_limit_wins_and_says_which_it_was() {
        let t0 = Instant::now();
        let d = Deadline::effective(t0, None, S(29), None);
        assert_eq!((d.at, d.source), (t0 + S(29), DeadlineSource::Gateway));
        let d = Deadline::effective(t0, Some(t0 + S(15)), S(29), None);
        assert_eq!((d.at, d.source), (t0 + S(15), DeadlineSource::Lambda));
        let d = Deadline::effective(t0, Some(t0 + S(15)), S(29), Some(MS(2500)));
        assert_eq!((d.at, d.source), (t0 + MS(2500), DeadlineSource::Client));
        // A client limit longer than the gateway's changes nothing.
        let d = Deadline::effective(t0, None, S(29), Some(S(65)));
        assert_eq!((d.at, d.source), (t0 + S(29), DeadlineSource::Gateway));
    }

    #[test]
    fn a_stage_gets_its_cap_or_what_is_left_after_the_reserve() {
        let t0 = Instant::now();
        let d = Deadline::effective(t0, None, S(29), None);
        assert_eq!(d.stage_budget(t0, S(10), S(1)), Some(S(10)));
        assert_eq!(d.stage_budget(t0 + S(20), S(60), S(1)), Some(S(8)));
        // Nearly spent: under the reserve, or left with less than MIN_STAGE.
        assert_eq!(d.stage_budget(t0 + MS(28_500), S(60), S(1)), None);
        assert_eq!(d.stage_budget(t0 + MS(27_950), S(60), S(1)), None);
        assert_eq!(d.stage_budget(t0 + S(40), S(60), S(1)), None);
        assert_eq!(d.remaining(t0 + S(40)), Duration::ZERO);
        assert_eq!(d.hard_stop(), t0 + S(29) - ANSWER_MARGIN);
        assert_eq!(d.soft_stop(), t0 + S(29) - 2 * ANSWER_MARGIN);
    }

    #[test]
    fn the_client_timeout_header_is_a_positive_integer() {
        assert_eq!(parse_client_timeout(b"2500"), Ok(MS(2500)));
        assert_eq!(parse_client_timeout(b" 65000 "), Ok(MS(65_000)));
        for bad in [&b"0"[..], b"-5", b"1.5", b"soon", b"", b"\xff"] {
            let err = parse_client_timeout(bad).expect_err("refused");
            assert!(err.contains("X-Client-Timeout-Ms"), "{err}");
        }
    }
}
