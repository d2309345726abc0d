//! The size of a response as Lambda counts it, and cutting a result to fit.
//!
//! Lambda refuses a synchronous invocation response over 6,291,456 bytes,
//! and API Gateway then answers 502 without a body the client can read.
//! The response counted is the whole invocation response: with API
//! Gateway's payload v2 that is a JSON object whose `body` is the
//! envelope as a JSON *string*, so every `"` and `\` of the envelope is
//! escaped once more (a result of quoted text nearly doubles). This module
//! is the one place that arithmetic lives: [`encoded_len`] is the exact
//! size of a result inside that string, [`Budget`] says whether it fits a
//! limit (`limits.max_response_bytes`, Lambda's by default) with
//! [`RESERVE`] left for the rest of the response, and the cutting helpers
//! ([`largest_fitting`], [`fit_text`]) find how much of a result fits. The
//! routes whose results can get that large (`find` and list mode with
//! `read_content`, `content/read`, `content/overview`, `fs/ls`, a session's
//! context) cut with them — fewer items or shorter text — and answer 200
//! with a top-level `"truncated": true` ([`respond`]), never a 502.

use std::io::{self, Write};

use http::{Response, StatusCode};
use serde_json::{Value, json};

use crate::config::LimitsConfig;
pub use crate::config::{LAMBDA_RESPONSE_LIMIT, RESPONSE_RESERVE as RESERVE};

/// Bytes one byte of JSON text takes once written inside a JSON string:
/// `"` and `\` are escaped (2), as are the control characters (`\n`, `\t`,
/// … 2; the others `\u00XX`, 6); every other byte is itself (1).
#[must_use]
pub fn escaped_byte_len(byte: u8) -> usize {
    match byte {
        b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
        0..0x20 => 6,
        _ => 1,
    }
}

/// Counts what is written as the bytes it takes inside a JSON string.
struct EscapedCounter(usize);

impl Write for EscapedCounter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.iter().map(|b| escaped_byte_len(*b)).sum::<usize>();
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The bytes `value`, serialised as JSON, takes inside the invocation
/// response's `body` string (without allocating the text).
#[must_use]
pub fn encoded_len(value: &Value) -> usize {
    let mut counter = EscapedCounter(0);
    // Writing a `Value` to a counter cannot fail.
    let _ = serde_json::to_writer(&mut counter, value);
    counter.0
}

/// The bytes one character of a text result takes in the invocation
/// response: escaped once as a JSON string in the envelope, then again
/// inside the response's `body` string (`"` → `\"` → `\\\"`: 4).
#[must_use]
pub fn text_char_len(c: char) -> usize {
    match c {
        '"' | '\\' => 4,
        '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 3,
        '\0'..'\u{20}' => 7,
        // A DEL or any other character is written as is (serde_json
        // escapes only the characters below U+0020).
        other => other.len_utf8(),
    }
}

/// The bytes a text result takes in the invocation response: its
/// characters ([`text_char_len`]) and its escaped quotes (4). Equal to
/// [`encoded_len`] of the text as a JSON string, without building it.
#[must_use]
pub fn text_len(text: &str) -> usize {
    4 + text.chars().map(text_char_len).sum::<usize>()
}

/// How many bytes a result may take: a response limit less [`RESERVE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget(usize);

impl Budget {
    /// The budget of a response limited to `limit` bytes (a limit under
    /// [`RESERVE`] leaves none).
    #[must_use]
    pub fn new(limit: usize) -> Self {
        Self(limit.saturating_sub(RESERVE))
    }

    /// The budget of `limits.max_response_bytes`.
    #[must_use]
    pub fn of(limits: &LimitsConfig) -> Self {
        Self(limits.result_bytes())
    }

    /// The bytes a result may take.
    #[must_use]
    pub fn bytes(self) -> usize {
        self.0
    }

    /// Whether `result` fits.
    #[must_use]
    pub fn fits(self, result: &Value) -> bool {
        encoded_len(result) <= self.0
    }
}

/// The largest `k` in `0..=n` for which `fits(k)` holds, given that it
/// holds for every `k` below one that holds (fewer items never take more
/// room); 0 when none does. `fits` is called about `log2(n)` times.
pub fn largest_fitting(n: usize, mut fits: impl FnMut(usize) -> bool) -> usize {
    if fits(n) {
        return n;
    }
    // fits(lo) is assumed (k = 0 keeps nothing), fits(hi) is false.
    let (mut lo, mut hi) = (0, n);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) { lo = mid } else { hi = mid }
    }
    lo
}

/// The longest prefix of `text`, cut at a character boundary, whose
/// characters take at most `bytes` in the invocation response (see
/// [`text_char_len`]).
#[must_use]
pub fn fit_text(text: &str, bytes: usize) -> &str {
    crate::tokens::prefix_within(text, bytes, text_char_len)
}

/// `{"status":"ok","result":…}` as a 200, with `"truncated": true` after
/// `result` when the result was cut, and `telemetry` when asked for.
/// Clients that read only `result` are unaffected by the flag.
#[must_use]
#[allow(clippy::needless_pass_by_value)] // consumed by value at every call site
pub fn respond(result: Value, telemetry: Option<Value>, truncated: bool) -> Response<String> {
    let mut body = json!({ "status": "ok", "result": result });
    if truncated {
        body["truncated"] = Value::Bool(true);
    }
    if let Some(t) = telemetry {
        body["telemetry"] = t;
    }
    super::json_response(StatusCode::OK, &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The invocation response as `lambda_http` writes it for API Gateway
    /// payload v2: the envelope's text inside a JSON string.
    fn invocation_response(body: &Value) -> String {
        json!({
            "statusCode": 200,
            "headers": { "content-type": "application/json" },
            "multiValueHeaders": {},
            "body": body.to_string(),
            "isBase64Encoded": false,
        })
        .to_string()
    }

    #[test]
    fn the_encoded_length_is_the_results_size_inside_the_response_string() {
        let results = [
            json!("plain"),
            json!("say \"hi\" \\ back\n\ttab \u{1} bell 年糕 😀"),
            json!({"entries": [{"uri": "viking://resources/a \"b\"", "abstract": "x\\y"}], "n": 3}),
            json!([]),
        ];
        for result in results {
            let alone = invocation_response(&json!(null)).len() - "null".len();
            let with = invocation_response(&result).len();
            assert_eq!(with - alone, encoded_len(&result), "{result}");
        }
    }

    #[test]
    fn quotes_and_backslashes_nearly_double_and_control_characters_grow_most() {
        assert_eq!(encoded_len(&json!("ab")), 2 + 2 + 2, "the quotes themselves escape");
        assert_eq!(encoded_len(&json!("\"")), 2 + 2 + 4);
        assert_eq!(encoded_len(&json!("\u{1}")), 2 + 2 + 7);
        assert_eq!(encoded_len(&json!("年")), 2 + 2 + 3);
        for c in ['a', '"', '\\', '\n', '\u{1}', '\u{7f}', '年', '😀'] {
            let text = c.to_string();
            assert_eq!(encoded_len(&json!(text)) - 4, text_char_len(c), "{c:?}");
        }
        let text = "say \"hi\" \\ back\n\ttab \u{1} 年糕 😀";
        assert_eq!(text_len(text), encoded_len(&json!(text)));
    }

    #[test]
    fn a_budget_keeps_the_reserve_and_fits_at_its_exact_size() {
        let budget = Budget::new(LAMBDA_RESPONSE_LIMIT);
        assert_eq!(budget.bytes(), 6_291_456 - 16_384);
        assert_eq!(Budget::new(100).bytes(), 0);
        let result = json!("x".repeat(100));
        let exact = Budget::new(RESERVE + encoded_len(&result));
        assert!(exact.fits(&result));
        assert!(!Budget::new(RESERVE + encoded_len(&result) - 1).fits(&result));
    }

    #[test]
    fn the_largest_fitting_count_is_found_by_bisection() {
        for n in [0, 1, 2, 7, 100, 1000] {
            for cap in [0, 1, 3, 50, 999, 5000] {
                let mut calls = 0;
                let k = largest_fitting(n, |k| {
                    calls += 1;
                    k <= cap
                });
                assert_eq!(k, n.min(cap), "n {n} cap {cap}");
                assert!(calls <= 12, "n {n} cap {cap}: {calls} calls");
            }
        }
    }

    #[test]
    fn text_is_cut_at_a_character_boundary_within_its_bytes() {
        assert_eq!(fit_text("abc", 3), "abc");
        assert_eq!(fit_text("abc", 2), "ab");
        assert_eq!(fit_text("年糕", 5), "年");
        assert_eq!(fit_text("a\"b", 4), "a");
        assert_eq!(fit_text("a\"b", 5), "a\"");
        assert_eq!(fit_text("", 0), "");
        let text = "line \"one\"\n年糕 \\ two\u{2}";
        for bytes in 0..60 {
            let cut = fit_text(text, bytes);
            assert!(encoded_len(&json!(cut)) - 4 <= bytes, "{bytes}: {cut:?}");
            assert!(text.starts_with(cut));
        }
    }
}
