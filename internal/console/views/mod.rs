//! The dashboard's markup (maud escapes every interpolated value, so item
//! data and errors always render as text; stored text is also shown
//! through [`crate::printable`], so that a control or reordering character
//! in an error, data or id shows as an escape). Only what can change lives in
//! `#live`, which the script re-fetches every few seconds. Here: the frame
//! and the pieces every page shares; each page's own markup is in `fleet`
//! (overview, processors), `partitions`, `limits`, `schedules` and `audit`.

pub(super) mod audit;
pub(super) mod fleet;
pub(super) mod limits;
pub(super) mod partitions;
pub(super) mod schedules;

use std::collections::BTreeMap;

use maud::{DOCTYPE, Markup, html};

use crate::status::Status;

/// Item statuses, in the order bars and tables show them (finished first).
pub(super) const ITEM_STATUSES: [&str; 4] = [
    Status::Complete.as_str(),
    Status::Failed.as_str(),
    Status::Cancelled.as_str(),
    Status::Available.as_str(),
];
/// Partition statuses, for filters and counts.
pub(super) const PARTITION_STATUSES: [&str; 4] = [
    Status::Available.as_str(),
    Status::Complete.as_str(),
    Status::Failed.as_str(),
    Status::Cancelled.as_str(),
];

/// What the viewer may do.
#[derive(Clone, Debug)]
pub(super) enum Viewer {
    /// No admin token configured.
    ReadOnly,
    /// A token is configured; this browser has not logged in.
    LoggedOut,
    /// Logged in; forms carry this CSRF token.
    Admin(String),
}

/// Percent-encodes an id for a path segment.
pub(super) fn enc(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// `s` cut to `n` characters, marked when cut (a table row stays short),
/// and printable.
fn cut(s: &str, n: usize) -> String {
    let mut out: String = s.chars().take(n).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    text(&out).into_owned()
}

/// Stored text as a page shows it: controls and reordering characters
/// (U+202E…) written as escapes.
fn text(s: &str) -> std::borrow::Cow<'_, str> {
    crate::printable::printable(s)
}

/// "3m 20s": milliseconds, to the second.
pub(super) fn duration(ms: i64) -> String {
    let whole = std::time::Duration::from_secs((ms.max(0) / 1000) as u64);
    humantime::format_duration(whole).to_string()
}

/// Epoch milliseconds as a UTC time.
pub(super) fn time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_default()
}

/// The page frame: navigation, login state and the refresh script.
pub(super) fn layout(title: &str, viewer: &Viewer, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (text(title)) " · Feed" }
                link rel="stylesheet" href="/assets/style.css";
                script src="/assets/console.js" defer {}
            }
            body {
                nav {
                    strong { "Feed" }
                    a href="/" { "Overview" }
                    a href="/partitions" { "Partitions" }
                    a href="/processors" { "Processors" }
                    a href="/limits" { "Limits" }
                    a href="/schedules" { "Schedules" }
                    @if let Viewer::Admin(_) = viewer { a href="/audit" { "Audit" } }
                    // The script puts the refresh control here; without
                    // it, pages are refreshed by hand.
                    span #refresh {}
                    span.who {
                        @match viewer {
                            Viewer::ReadOnly => "read-only",
                            Viewer::LoggedOut => a href="/login" { "Log in" },
                            Viewer::Admin(csrf) => form method="post" action="/logout" {
                                input type="hidden" name="csrf" value=(csrf);
                                button type="submit" { "Log out" }
                            },
                        }
                    }
                }
                main { h1 { (text(title)) } (body) }
            }
        }
    }
}

/// A stacked bar of item counts by status.
pub(super) fn bar(counts: &BTreeMap<String, i64>) -> Markup {
    let total: i64 = counts.values().sum::<i64>().max(1);
    let mut x = 0.0;
    let mut parts = Vec::new();
    for status in ITEM_STATUSES {
        let n = counts.get(status).copied().unwrap_or(0);
        if n > 0 {
            let w = 100.0 * n as f64 / total as f64;
            parts.push((status, x, w));
            x += w;
        }
    }
    html! {
        svg.bar viewBox="0 0 100 6" preserveAspectRatio="none" role="img" aria-label=(summary(counts)) {
            @for (status, x, w) in parts {
                rect class=(status) x=(format!("{x:.2}")) y="0" width=(format!("{w:.2}")) height="6" {}
            }
        }
    }
}

/// "12/40 complete, 1 failed".
pub(super) fn summary(counts: &BTreeMap<String, i64>) -> String {
    let total: i64 = counts.values().sum();
    let n = |k: &str| counts.get(k).copied().unwrap_or(0);
    let mut s = format!("{}/{total} complete", n("complete"));
    for k in ["failed", "cancelled"] {
        if n(k) > 0 {
            s.push_str(&format!(", {} {k}", n(k)));
        }
    }
    s
}

fn status_badge(status: &str, paused: bool) -> Markup {
    html! {
        span class={ "badge " (status) } { (status) }
        @if paused { " " span.badge.paused { "paused" } }
    }
}

/// An action button: a form that first asks for confirmation.
pub(super) fn action(viewer: &Viewer, path: &str, label: &str, gate: Option<i64>) -> Markup {
    html! {
        @if let Viewer::Admin(csrf) = viewer {
            form.action method="post" action=(path) {
                input type="hidden" name="csrf" value=(csrf);
                @if let Some(g) = gate { input type="number" name="gate" value=(g) min="0" aria-label="gate"; }
                button type="submit" name="do" value=(label) { (label) }
            }
        }
    }
}

/// Asks before acting; the form repeats the action, with its `fields`,
/// and `confirm=yes`.
pub(super) fn confirm(
    question: &str,
    path: &str,
    csrf: &str,
    fields: &[(&str, String)],
    back: &str,
) -> Markup {
    html! {
        p.question { (question) }
        form.confirm method="post" action=(path) {
            input type="hidden" name="csrf" value=(csrf);
            input type="hidden" name="confirm" value="yes";
            @for (name, value) in fields { input type="hidden" name=(name) value=(value); }
            button #confirm type="submit" { "Yes, do it" }
            " " a href=(back) { "No, go back" }
        }
    }
}

pub(super) fn login(next: &str, error: Option<&str>) -> Markup {
    html! {
        @if let Some(e) = error { p.flash.bad { (e) } }
        form.login method="post" action="/login" {
            input type="hidden" name="next" value=(next);
            label { "Admin token " input #token type="password" name="token" autocomplete="current-password" required; }
            button #login type="submit" { "Log in" }
        }
    }
}

pub(super) fn message(text: &str) -> Markup {
    html! { p.flash.bad { (text) } p { a href="/" { "Back to the overview" } } }
}
