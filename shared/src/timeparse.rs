//! Time values in requests: relative durations (`30s`, `2h`, `7d`, `1w`),
//! ISO 8601 date-times (UTC when no offset is given) and dates
//! (`YYYY-MM-DD`). "Now" is always an argument.

use time::format_description::well_known::Rfc3339;
use time::macros::format_description;
use time::{Date, OffsetDateTime, PrimitiveDateTime};

/// A relative duration `^\d+[smhdw]$` in seconds, or `None`.
#[must_use]
pub fn parse_duration(text: &str) -> Option<i64> {
    let unit = text.chars().last()?;
    let digits = &text[..text.len() - unit.len_utf8()];
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: i64 = digits.parse().ok()?;
    let scale = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        'w' => 604_800,
        _ => return None,
    };
    n.checked_mul(scale)
}

/// Which end of a date-only value to take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DateEnd {
    /// 00:00:00 (for `since`).
    Start,
    /// 23:59:59 (for `until`, so the named day is included).
    End,
}

/// A time bound in Unix seconds: `now − duration` for relative values, else
/// an ISO 8601 date-time or date.
///
/// # Errors
/// A message naming the value and the accepted forms.
pub fn parse_time(text: &str, now: i64, end: DateEnd) -> Result<i64, String> {
    let text = text.trim();
    if let Some(seconds) = parse_duration(text) {
        return Ok(now.saturating_sub(seconds));
    }
    if let Ok(t) = OffsetDateTime::parse(text, &Rfc3339) {
        return Ok(t.unix_timestamp());
    }
    let naive = [
        format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]"),
        format_description!("[year]-[month]-[day] [hour]:[minute]:[second]"),
        format_description!("[year]-[month]-[day]T[hour]:[minute]"),
    ];
    for format in naive {
        if let Ok(t) = PrimitiveDateTime::parse(text, format) {
            return Ok(t.assume_utc().unix_timestamp());
        }
    }
    let head = text.split(['.']).next().unwrap_or(text);
    if head != text
        && let Ok(t) = PrimitiveDateTime::parse(head, naive[0])
    {
        return Ok(t.assume_utc().unix_timestamp());
    }
    if let Ok(d) = Date::parse(text, format_description!("[year]-[month]-[day]")) {
        let start = d.midnight().assume_utc().unix_timestamp();
        return Ok(match end {
            DateEnd::Start => start,
            DateEnd::End => start + 86_399,
        });
    }
    Err(format!("invalid time {text:?}: use a relative duration like 2h or 7d, an ISO 8601 date-time, or YYYY-MM-DD"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_764_460_800; // 2025-11-30T00:00:00Z

    #[test]
    fn relative_values_count_back_from_now() {
        assert_eq!(parse_time("2h", NOW, DateEnd::Start), Ok(NOW - 7200));
        assert_eq!(parse_time("7d", NOW, DateEnd::Start), Ok(NOW - 7 * 86_400));
        assert_eq!(parse_time("1w", NOW, DateEnd::Start), Ok(NOW - 604_800));
        assert_eq!(parse_duration("0m"), Some(0));
        assert_eq!(parse_duration("h"), None);
        assert_eq!(parse_duration("5y"), None);
        assert_eq!(parse_duration("-5d"), None);
    }

    #[test]
    fn absolute_values_default_to_utc() {
        assert_eq!(parse_time("2025-11-30T00:00:00Z", NOW, DateEnd::Start), Ok(NOW));
        assert_eq!(parse_time("2025-11-30T08:00:00+08:00", NOW, DateEnd::Start), Ok(NOW));
        assert_eq!(parse_time("2025-11-30T00:00:00", NOW, DateEnd::Start), Ok(NOW));
        assert_eq!(parse_time("2025-11-30T00:00:00.250", NOW, DateEnd::Start), Ok(NOW));
        assert_eq!(parse_time("2025-11-30", NOW, DateEnd::Start), Ok(NOW));
        assert_eq!(parse_time("2025-11-30", NOW, DateEnd::End), Ok(NOW + 86_399));
    }

    #[test]
    fn malformed_values_are_named() {
        for bad in ["yesterday", "2025-13-01", "2025/11/30", "", "10x"] {
            let err = parse_time(bad, NOW, DateEnd::Start).expect_err(bad);
            assert!(err.contains(&format!("{bad:?}")), "{err}");
        }
    }
}
