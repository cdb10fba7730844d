//! Durations written as Go writes them. Fabric's channel configuration
//! carries a few (`BatchTimeout`, etcdraft's `TickInterval`) as strings in
//! Go's `time.Duration` notation, and Fabric's YAML files use the same
//! notation; every weft reader of those values parses them here.

use std::time::Duration;

/// Parses a duration as Go's `time.ParseDuration` does: an optional sign,
/// then one or more decimal numbers (with optional fraction) each followed
/// by a unit (`ns`, `us`/`µs`, `ms`, `s`, `m`, `h`), such as `"2s"`,
/// `"1.5h"` or `"1m30s"`; `"0"` alone is zero. Negative durations are
/// refused, since no orderer setting can use one.
pub fn parse_go_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("{text:?} is not a duration like \"2s\" or \"250ms\"");
    let mut rest = text;
    let negative = rest.starts_with('-');
    if let Some(stripped) = rest.strip_prefix(['-', '+']) {
        rest = stripped;
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total_nanos: u128 = 0;
    while !rest.is_empty() {
        let integer_len = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let integer = &rest[..integer_len];
        rest = &rest[integer_len..];
        let mut fraction = "";
        if let Some(after_dot) = rest.strip_prefix('.') {
            let fraction_len = after_dot
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(after_dot.len());
            fraction = &after_dot[..fraction_len];
            rest = &after_dot[fraction_len..];
        }
        if integer.is_empty() && fraction.is_empty() {
            return Err(bad());
        }
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit_nanos: u128 = match &rest[..unit_len] {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60 * 1_000_000_000,
            "h" => 3_600 * 1_000_000_000,
            "" => {
                return Err(format!(
                    "{text:?} has a number without a unit (ns, us, ms, s, m, h)"
                ));
            }
            unit => {
                return Err(format!(
                    "{text:?} has an unknown unit {unit:?} (use ns, us, ms, s, m or h)"
                ));
            }
        };
        rest = &rest[unit_len..];
        // Go's limit: the total must fit in an int64 of nanoseconds.
        let limit = i64::MAX as u128;
        let whole: u128 = if integer.is_empty() {
            0
        } else {
            integer.parse::<u128>().map_err(|_| bad())?
        };
        let mut nanos = whole
            .checked_mul(unit_nanos)
            .filter(|n| *n <= limit)
            .ok_or_else(bad)?;
        // Twenty fraction digits are far below a nanosecond of any unit,
        // and keep `digits * unit_nanos` (< 1e20 * 3.6e12) within u128.
        let fraction = &fraction[..fraction.len().min(20)];
        if !fraction.is_empty() {
            let digits = fraction.parse::<u128>().map_err(|_| bad())?;
            let scale = 10u128.pow(u32::try_from(fraction.len()).map_err(|_| bad())?);
            nanos += digits * unit_nanos / scale;
        }
        total_nanos = total_nanos
            .checked_add(nanos)
            .filter(|n| *n <= limit)
            .ok_or_else(bad)?;
    }
    if negative && total_nanos > 0 {
        return Err(format!("{text:?} is negative"));
    }
    let nanos = u64::try_from(total_nanos).map_err(|_| bad())?;
    Ok(Duration::from_nanos(nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse_as_go_parses_them() {
        let cases = [
            ("2s", Duration::from_secs(2)),
            ("250ms", Duration::from_millis(250)),
            ("0", Duration::ZERO),
            ("1.5s", Duration::from_millis(1500)),
            ("1m30s", Duration::from_secs(90)),
            ("1h", Duration::from_secs(3600)),
            ("10us", Duration::from_micros(10)),
            ("10\u{b5}s", Duration::from_micros(10)),
            ("7ns", Duration::from_nanos(7)),
            (".5s", Duration::from_millis(500)),
            ("+3ms", Duration::from_millis(3)),
            ("1.0000000001s", Duration::from_nanos(1_000_000_000)),
            ("0.000001ms", Duration::from_nanos(1)),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_go_duration(text), Ok(expected), "{text}");
        }
        for text in [
            "", "2", "s", "2 s", "2sec", "-1s", ".s", "1.2.3s", "3000000h", "+",
        ] {
            assert!(parse_go_duration(text).is_err(), "{text:?} parsed");
        }
        assert!(
            parse_go_duration("2")
                .unwrap_err()
                .contains("without a unit")
        );
        assert!(
            parse_go_duration("2d")
                .unwrap_err()
                .contains("unknown unit \"d\"")
        );
    }
}
