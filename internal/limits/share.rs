//! How a tenant's in-flight cap is shared among the sessions that want
//! some of it: max-min fair (each gets what it wants up to an even share,
//! and what one does not use goes to the others), never more than the cap
//! minus what the others hold now.

/// `me`'s slots given the tenant's `cap`, the slots `me` has calls in
/// (`in_use`, kept whatever the share: calls cannot be taken back), and
/// every live session's `(id, slots held, slots wanted)`, `me`'s first.
pub(crate) fn grant(cap: u32, in_use: u32, shares: &[(String, u32, u32)]) -> u32 {
    let Some((me, _, _)) = shares.first() else {
        return 0;
    };
    let fair = fair_shares(cap, shares);
    let mine = fair.iter().find(|(id, _)| id == me).map_or(0, |(_, n)| *n);
    let others: u32 = shares[1..].iter().map(|(_, slots, _)| *slots).sum();
    mine.min(cap.saturating_sub(others)).max(in_use)
}

/// Max-min fair shares of `cap` for the wants of `shares`; the remainder
/// of an even split goes to the lowest ids, so every session computes the
/// same split.
fn fair_shares(cap: u32, shares: &[(String, u32, u32)]) -> Vec<(String, u32)> {
    let mut wants: Vec<(&str, u32)> = shares.iter().map(|(id, _, w)| (id.as_str(), *w)).collect();
    wants.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(b.0)));
    let mut left = cap;
    let mut out = Vec::with_capacity(wants.len());
    let mut i = 0;
    while i < wants.len() {
        let n = (wants.len() - i) as u32;
        let even = left / n;
        if wants[i].1 <= even {
            left -= wants[i].1;
            out.push((wants[i].0.to_string(), wants[i].1));
            i += 1;
            continue;
        }
        // Everyone left wants more than an even split: split what is left.
        let mut rest: Vec<&str> = wants[i..].iter().map(|(id, _)| *id).collect();
        rest.sort();
        let extra = left % n;
        for (k, id) in rest.into_iter().enumerate() {
            out.push((id.to_string(), even + u32::from((k as u32) < extra)));
        }
        break;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(id: &str, slots: u32, wanted: u32) -> (String, u32, u32) {
        (id.to_string(), slots, wanted)
    }

    #[test]
    fn shares_are_max_min_fair() {
        // Alone: everything it wants, up to the cap.
        assert_eq!(grant(5, 0, &[s("a", 0, 10)]), 5);
        assert_eq!(grant(5, 0, &[s("a", 0, 2)]), 2);
        // Three wanting a cap of 5: 2, 2, 1 (the remainder to the lowest ids).
        let all = [s("b", 0, 10), s("a", 0, 10), s("c", 0, 10)];
        assert_eq!(grant(5, 0, &all), 2);
        let all = [s("c", 0, 10), s("a", 0, 10), s("b", 0, 10)];
        assert_eq!(grant(5, 0, &all), 1);
        // One wants little: the others split the rest.
        let all = [s("a", 0, 10), s("b", 1, 1), s("c", 0, 10)];
        assert_eq!(grant(5, 0, &all), 2);
    }

    #[test]
    fn never_more_than_the_others_leave_but_never_below_calls_in_flight() {
        // b still holds 4 of 5: a gets 1 now, its fair share once b gives back.
        let all = [s("a", 0, 10), s("b", 4, 10)];
        assert_eq!(grant(5, 0, &all), 1);
        // a holds calls in 3 slots while its share is 2: it keeps 3.
        let all = [s("a", 3, 10), s("b", 0, 10)];
        assert_eq!(grant(5, 3, &all), 3);
        // Nobody else: all of it.
        assert_eq!(grant(5, 0, &[s("a", 0, 5)]), 5);
    }
}
