//! A rate as users write it (`500/s`, `30/m`, `1000/h`): a value that
//! configuration, the store and the limiter share, below all of them.

use std::fmt;
use std::str::FromStr;

/// Items per second.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rate(pub f64);

impl Rate {
    /// The least rate the limiter paces: one an hour. (Far below it a
    /// token's interval overflows the clock's arithmetic.)
    pub const MIN: f64 = 1.0 / 3600.0;
    /// The greatest: a million a second, more than any processor sends.
    pub const MAX: f64 = 1e6;

    /// A rate of `per_second` items, or why the limiter cannot pace it.
    pub fn new(per_second: f64) -> Result<Rate, String> {
        Self::check(per_second).map_err(|why| format!("{per_second:?}/s {why}: {RANGE}"))
    }

    fn check(per_second: f64) -> Result<Rate, &'static str> {
        if !per_second.is_finite() || per_second <= 0.0 {
            Err("is not a positive number")
        } else if per_second < Self::MIN {
            Err("is below the least rate, 1/h")
        } else if per_second > Self::MAX {
            Err("is above the greatest rate, 1000000/s")
        } else {
            Ok(Rate(per_second))
        }
    }

    /// `per_second` within [`Rate::MIN`] and [`Rate::MAX`] (a rate stored
    /// by hand may be anything; not a number is the least).
    pub fn clamp(per_second: f64) -> f64 {
        if per_second.is_nan() {
            return Self::MIN;
        }
        per_second.clamp(Self::MIN, Self::MAX)
    }
}

/// How to write one, for error messages.
const EXAMPLE: &str = "write a positive count per unit, e.g. 500/s, 30/m or 1000/h";
/// The same for a rate out of range.
const RANGE: &str = "write one from 1/h to 1000000/s, e.g. 500/s, 30/m or 1000/h";

impl FromStr for Rate {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("{:?} is not a rate: {EXAMPLE}", crate::validate::shown(s));
        let (count, unit) = s.trim().split_once('/').unwrap_or((s.trim(), "s"));
        let count: f64 = count.trim().parse().map_err(|_| bad())?;
        let per = match unit.trim() {
            "s" | "sec" | "second" => 1.0,
            "m" | "min" | "minute" => 60.0,
            "h" | "hour" => 3600.0,
            _ => return Err(bad()),
        };
        if !(count.is_finite() && count > 0.0) {
            return Err(bad());
        }
        Rate::check(count / per)
            .map_err(|why| format!("{:?} {why}: {RANGE}", crate::validate::shown(s)))
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 >= 1.0 || self.0 == 0.0 {
            write!(f, "{}/s", round(self.0))
        } else if self.0 * 60.0 >= 1.0 {
            write!(f, "{}/m", round(self.0 * 60.0))
        } else {
            write!(f, "{}/h", round(self.0 * 3600.0))
        }
    }
}

fn round(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_in_every_unit() {
        assert_eq!("500/s".parse::<Rate>(), Ok(Rate(500.0)));
        assert_eq!("30/m".parse::<Rate>(), Ok(Rate(0.5)));
        assert_eq!("3600/h".parse::<Rate>(), Ok(Rate(1.0)));
        assert_eq!("250".parse::<Rate>(), Ok(Rate(250.0)));
        for bad in [
            "", "0/s", "-1/s", "ten/s", "5/d", "inf/s", "NaN/s", "1e400/s",
        ] {
            let e = bad.parse::<Rate>().unwrap_err();
            assert!(e.contains("e.g. 500/s"), "{bad}: {e}");
        }
        let e = format!("1/{}", "\u{202E}".repeat(10_000))
            .parse::<Rate>()
            .unwrap_err();
        assert!(e.len() < 1000, "the value is cut: {} bytes", e.len());
        assert_eq!(Rate(500.0).to_string(), "500/s");
        assert_eq!(Rate(0.5).to_string(), "30/m");
        assert_eq!(Rate(0.01).to_string(), "36/h");
    }

    /// A rate the limiter cannot pace is refused, with how to write one.
    #[test]
    fn rates_out_of_range_are_refused() {
        assert_eq!("1/h".parse::<Rate>(), Ok(Rate(Rate::MIN)));
        assert_eq!("1000000/s".parse::<Rate>(), Ok(Rate(Rate::MAX)));
        for (bad, says) in [
            ("1e-20/s", "below the least rate, 1/h"),
            ("0.5/h", "below the least rate, 1/h"),
            ("1e300/s", "above the greatest rate, 1000000/s"),
            ("2000000", "above the greatest rate"),
        ] {
            let e = bad.parse::<Rate>().unwrap_err();
            assert!(e.contains(says) && e.contains("e.g. 500/s"), "{bad}: {e}");
        }
        for bad in [f64::NAN, f64::INFINITY, -1.0, 0.0, 1e-20, 1e7] {
            assert!(Rate::new(bad).is_err(), "{bad}");
        }
        assert_eq!(Rate::clamp(1e-20), Rate::MIN);
        assert_eq!(Rate::clamp(f64::INFINITY), Rate::MAX);
        assert_eq!(Rate::clamp(f64::NAN), Rate::MIN);
        assert_eq!(Rate::clamp(20.0), 20.0);
    }
}
