//! This session's share of the active partitions.

use crate::store::LeaseCounts;

/// This session's share of the active partitions: the smallest level `t`
/// such that every live session holding up to `t` (capped ones up to their
/// cap) covers them all, so uncapped sessions take up what capped ones
/// cannot; then this session's own cap.
pub(super) fn target(counts: &LeaseCounts, caps: &[i64], cap: Option<i64>) -> i64 {
    let sessions = counts.sessions.max(1);
    let uncapped = (sessions - caps.len() as i64).max(0);
    let covered = |t: i64| caps.iter().map(|c| (*c).min(t)).sum::<i64>() + uncapped * t;
    let t = if uncapped == 0 {
        counts.active
    } else {
        let (mut lo, mut hi) = (0, counts.active.max(0));
        while lo < hi {
            let mid = (lo + hi) / 2;
            if covered(mid) >= counts.active {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo
    };
    cap.map_or(t, |c| t.min(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(sessions: i64, active: i64) -> LeaseCounts {
        LeaseCounts {
            sessions,
            capped: 0,
            active,
            backlog: 0,
            stranded: 0,
            stranded_slice: 0,
            stranded_end: None,
        }
    }

    #[test]
    fn targets() {
        // No caps: ceil(P/S).
        assert_eq!(target(&counts(3, 61), &[], None), 21);
        assert_eq!(target(&counts(2, 10), &[], None), 5);
        // One processor capped at 2: the other takes the remaining 8.
        assert_eq!(target(&counts(2, 10), &[2], None), 8);
        assert_eq!(target(&counts(2, 10), &[2], Some(2)), 2);
        // Everyone capped: take up to the cap.
        assert_eq!(target(&counts(2, 10), &[2, 3], Some(3)), 3);
        assert_eq!(target(&counts(1, 0), &[], None), 0);
        // A processor giving its partitions back heartbeats a cap of 0:
        // the other two cover all.
        assert_eq!(target(&counts(3, 6), &[0], None), 3);
    }
}
