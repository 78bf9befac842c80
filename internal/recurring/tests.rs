use super::*;

/// 2026-11-30T02:00:00Z in epoch milliseconds.
const T: i64 = 1_796_004_000_000;

#[test]
fn expressions_read_with_or_without_seconds_in_a_time_zone() {
    let every_two = Cadence::parse("*/2 * * * * *", "UTC").unwrap();
    assert_eq!(every_two.next_after(T), Some(T + 2_000));
    let nightly = Cadence::parse("0 2 * * *", "UTC").unwrap();
    assert_eq!(nightly.next_after(T), Some(T + 86_400_000));
    // 02:00 in Paris is 01:00 UTC in winter.
    let paris = Cadence::parse("0 2 * * *", "Europe/Paris").unwrap();
    assert_eq!(paris.next_after(T), Some(T + 23 * 3_600_000));
    for (cron, tz, says) in [
        ("every day", "UTC", "write 5 fields"),
        ("61 * * * *", "UTC", "cron \"61 * * * *\""),
        ("0 2 * * *", "Mars/Olympus", "not an IANA time zone"),
    ] {
        let e = Cadence::parse(cron, tz).unwrap_err().to_string();
        assert!(e.contains(says), "{cron} {tz}: {e}");
    }
}

#[test]
fn missed_ticks_keep_the_latest_backfill() {
    let minutely = Cadence::parse("0 * * * * *", "UTC").unwrap();
    // Not due yet.
    assert_eq!(minutely.due(T, T - 1, 1), (vec![], Some(T)));
    // On time: the one tick.
    assert_eq!(minutely.due(T, T + 500, 1), (vec![T], Some(T + 60_000)));
    // Five minutes late: the latest tick only, or the latest three.
    let late = T + 4 * 60_000 + 500;
    assert_eq!(
        minutely.due(T, late, 1),
        (vec![T + 240_000], Some(T + 300_000))
    );
    assert_eq!(
        minutely.due(T, late, 3),
        (
            vec![T + 120_000, T + 180_000, T + 240_000],
            Some(T + 300_000)
        )
    );
}

#[test]
fn ticks_name_their_partitions_and_items() {
    assert_eq!(partition_id("nightly", T), "nightly-2026-11-30T02:00:00Z");
    let items = template(
        "{\"id\": \"a\", \"data\": 1}\n{\"data\": 2}\n",
        "nightly-2026-11-30T02:00:00Z",
    )
    .unwrap();
    assert_eq!(
        items[0].id.as_deref(),
        Some("nightly-2026-11-30T02:00:00Z/a")
    );
    assert_eq!(items[1].id, None);
    assert!(template("{\"data\": 1", "p").is_err());
}
