//! Scheduled items as producers write them: `not_before` (epoch
//! milliseconds, or an RFC 3339 time) or `delay` (a duration such as
//! `"90s"`, `"10m"` or `"1h30m"`, counted from the write by the database's
//! clock), on an item line, or once for a whole call (`processor enqueue
//! --not-before/--delay`, the API's `not_before`/`delay` query parameters).
//! Every error names the field and says what to write.

use std::time::Duration;

use serde_json::value::RawValue;

use crate::validate::{self, shown};
use crate::{Error, Result};

/// When an item may first run. It is available at its gate from the
/// start (so it holds its gate's fan-in until it has run), and no
/// processor sends it before then.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Schedule {
    /// Not before this time, in epoch milliseconds (`not_before`).
    At(i64),
    /// Not before this long after it is written, by the database's clock
    /// (the clock every processor compares `not_before` with), not the
    /// producer's.
    After(Duration),
}

/// Refuses a schedule outside [`MIN_NOT_BEFORE`]..=[`MAX_NOT_BEFORE`] or
/// with a delay over [`MAX_DELAY`]; `item` names the item in the error.
pub fn check(item: Option<&str>, schedule: Schedule) -> Result<()> {
    let item = item.map_or(String::new(), |id| format!("item {:?}: ", shown(id)));
    match schedule {
        Schedule::At(ms) => {
            validate::not_before(ms).map_err(|e| Error::Invalid(format!("{item}{e}")))
        }
        Schedule::After(d) => validate::delay(d).map_err(|e| Error::Invalid(format!("{item}{e}"))),
    }
}

/// How to write the fields, for error messages.
const HOW: &str = "write not_before as epoch milliseconds or an RFC 3339 time \
    (\"2030-01-01T09:00:00Z\"), or delay as a duration (\"90s\", \"10m\", \"1h30m\")";

/// A `not_before` given as text: epoch milliseconds, or an RFC 3339 time
/// with its offset.
pub fn not_before(text: &str) -> Result<Schedule, String> {
    let text = text.trim();
    let ms = if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        text.parse::<i64>()
            .map_err(|_| format!("not_before {} is out of range; {HOW}", shown(text)))?
    } else {
        chrono::DateTime::parse_from_rfc3339(text)
            .map_err(|e| {
                format!(
                    "not_before {:?} is not a time ({e}): write epoch milliseconds, or an \
                     RFC 3339 time with its offset, such as \"2030-01-01T09:00:00Z\" or \
                     \"2030-01-01T09:00:00+02:00\"",
                    shown(text)
                )
            })?
            .timestamp_millis()
    };
    validate::not_before(ms)?;
    Ok(Schedule::At(ms))
}

/// A `delay` given as text: a duration such as `"90s"`, `"10m"` or
/// `"1h30m"` (humantime's units), not negative, at most 100 years.
pub fn delay(text: &str) -> Result<Schedule, String> {
    let text = text.trim();
    let what = "write how long to wait, such as \"90s\", \"10m\" or \"1h30m\"";
    if text.starts_with('-') {
        return Err(format!("delay {:?} is negative; {what}", shown(text)));
    }
    let d: Duration = humantime::parse_duration(text).map_err(|e| {
        // humantime's own text repeats the unit it did not know, whole.
        let why = match e {
            humantime::DurationError::UnknownUnit { unit, .. } if !unit.is_empty() => format!(
                "unknown time unit {:?}; the units are ns, us, ms, s, m, h, d, w, M, y",
                shown(&unit)
            ),
            other => other.to_string(),
        };
        format!("delay {:?} is not a duration ({why}); {what}", shown(text))
    })?;
    validate::delay(d)?;
    Ok(Schedule::After(d))
}

/// The schedule for every item of a call (a flag, a query parameter):
/// at most one of the two.
pub fn default_of(
    not_before_text: Option<&str>,
    delay_text: Option<&str>,
) -> Result<Option<Schedule>, String> {
    match (not_before_text, delay_text) {
        (Some(_), Some(_)) => Err(format!("give not_before or delay, not both; {HOW}")),
        (Some(t), None) => not_before(t).map(Some),
        (None, Some(d)) => delay(d).map(Some),
        (None, None) => Ok(None),
    }
}

/// The schedule of an item line from its `not_before` and `delay` fields
/// as sent (JSON `null` counts as absent).
pub(crate) fn of_line(
    not_before_json: Option<&RawValue>,
    delay_json: Option<&RawValue>,
) -> Result<Option<Schedule>, String> {
    fn given(v: Option<&RawValue>) -> Option<&str> {
        v.map(RawValue::get).filter(|v| *v != "null")
    }
    let (at, after) = (given(not_before_json), given(delay_json));
    if at.is_some() && after.is_some() {
        return Err(format!("give not_before or delay, not both; {HOW}"));
    }
    if let Some(json) = at {
        if let Ok(ms) = serde_json::from_str::<i64>(json) {
            validate::not_before(ms)?;
            return Ok(Some(Schedule::At(ms)));
        }
        return match serde_json::from_str::<String>(json) {
            Ok(text) => not_before(&text).map(Some),
            Err(_) => Err(format!(
                "not_before must be epoch milliseconds (an integer) or an RFC 3339 time (a \
                 string), not {}; {HOW}",
                shown(json)
            )),
        };
    }
    if let Some(json) = after {
        return match serde_json::from_str::<String>(json) {
            Ok(text) => delay(&text).map(Some),
            Err(_) => Err(format!(
                "delay must be a duration in a string, such as \"90s\", \"10m\" or \"1h30m\", \
                 not {}",
                shown(json)
            )),
        };
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::{MAX_DELAY, MAX_NOT_BEFORE, MIN_NOT_BEFORE};

    #[test]
    fn schedules_are_checked() {
        assert!(check(None, Schedule::At(MIN_NOT_BEFORE)).is_ok());
        assert!(check(None, Schedule::At(MAX_NOT_BEFORE)).is_ok());
        assert!(check(None, Schedule::After(Duration::ZERO)).is_ok());
        assert!(check(None, Schedule::After(MAX_DELAY)).is_ok());
        let e = check(Some("a"), Schedule::At(1_767_225_600))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("item \"a\": not_before 1767225600 is before the year 2000")
                && e.contains("seconds")
                && e.contains("write 1767225600000"),
            "{e}"
        );
        for bad in [-1, 0, MAX_NOT_BEFORE + 1, i64::MAX] {
            let e = check(None, Schedule::At(bad)).unwrap_err().to_string();
            assert!(
                e.contains("out of range") && e.contains("RFC 3339"),
                "{bad}: {e}"
            );
        }
        let e = check(None, Schedule::After(MAX_DELAY + Duration::from_secs(1)))
            .unwrap_err()
            .to_string();
        assert!(e.contains("longer than 100 years"), "{e}");
    }

    fn raw(t: Option<&str>) -> Option<&RawValue> {
        t.map(|t| serde_json::from_str::<&RawValue>(t).unwrap())
    }

    fn line(not_before: Option<&str>, delay: Option<&str>) -> Result<Option<Schedule>, String> {
        of_line(raw(not_before), raw(delay))
    }

    #[test]
    fn both_forms_of_not_before() {
        let ms = 1_893_488_400_000; // 2030-01-01T09:00:00Z
        assert_eq!(
            line(Some("1893488400000"), None),
            Ok(Some(Schedule::At(ms)))
        );
        for text in [
            "\"2030-01-01T09:00:00Z\"",
            "\"2030-01-01T10:00:00+01:00\"",
            "\"2030-01-01T09:00:00.000Z\"",
            "\"1893488400000\"",
        ] {
            assert_eq!(line(Some(text), None), Ok(Some(Schedule::At(ms))), "{text}");
        }
        assert_eq!(not_before(" 2030-01-01T09:00:00Z "), Ok(Schedule::At(ms)));
        assert_eq!(not_before("1893488400000"), Ok(Schedule::At(ms)));
        assert_eq!(line(Some("null"), Some("null")), Ok(None));
        assert_eq!(line(None, None), Ok(None));
    }

    #[test]
    fn delays() {
        let s = |secs| Ok(Some(Schedule::After(Duration::from_secs(secs))));
        assert_eq!(line(None, Some("\"10m\"")), s(600));
        assert_eq!(line(None, Some("\"90s\"")), s(90));
        assert_eq!(line(None, Some("\"1h30m\"")), s(5400));
        assert_eq!(line(None, Some("\"1h 30m\"")), s(5400));
        assert_eq!(line(None, Some("\"0s\"")), s(0));
        assert_eq!(
            delay("250ms"),
            Ok(Schedule::After(Duration::from_millis(250)))
        );
    }

    #[test]
    fn bad_values_say_what_to_write() {
        let cases = [
            (Some("1893488400"), None, "looks like seconds"),
            (Some("-5"), None, "out of range"),
            (Some("1.5e12"), None, "not 1.5e12"),
            (Some("true"), None, "must be epoch milliseconds"),
            (Some("\"tomorrow\""), None, "\"tomorrow\" is not a time"),
            (Some("\"2030-01-01T09:00:00\""), None, "with its offset"),
            (Some("\"99999999999999999999\""), None, "out of range"),
            (None, Some("\"-5m\""), "is negative"),
            (None, Some("\"10\""), "is not a duration"),
            (None, Some("\"soon\""), "is not a duration"),
            (None, Some("600"), "not 600"),
            (None, Some("\"200years\""), "longer than 100 years"),
            (Some("1893488400000"), Some("\"10m\""), "not both"),
        ];
        for (at, after, says) in cases {
            let e = line(at, after).unwrap_err();
            assert!(e.contains(says), "{at:?} {after:?}: {e}");
            let field = if at.is_some() && after.is_none() {
                "not_before"
            } else {
                "delay"
            };
            assert!(e.contains(field), "{e}");
        }
        assert!(default_of(Some("1893488400000"), Some("1m")).is_err());
        assert_eq!(default_of(None, None), Ok(None));
        assert!(
            default_of(None, Some("-1s"))
                .unwrap_err()
                .contains("negative")
        );
    }
}
