//! Filtering the log and trace layers so that no event is lost.
//!
//! A per-layer filter hands its decision to its layer through a
//! thread-local set by `enabled`. When a callsite's interest is cached as
//! "always", `enabled` is skipped and the layer reads whatever decision the
//! last `enabled` on that thread left there: after a library asked whether
//! it would log something that is off (sqlx, hyper and the `log` bridge all
//! ask), the next always-on event was dropped by every filtered layer.
//! It showed as a failed attempt with no log line and no span event.
//! [`Asked`] keeps every callsite at "sometimes", so `enabled` runs right
//! before each event; it costs one filter call per event.

use tracing::level_filters::LevelFilter;
use tracing::subscriber::Interest;
use tracing::{Metadata, Subscriber, span};
use tracing_subscriber::layer::{Context, Filter};

/// A per-layer filter asked about every event and span (see the module).
pub struct Asked<F>(pub F);

impl<S: Subscriber, F: Filter<S>> Filter<S> for Asked<F> {
    fn enabled(&self, meta: &Metadata<'_>, cx: &Context<'_, S>) -> bool {
        self.0.enabled(meta, cx)
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        let interest = self.0.callsite_enabled(meta);
        if interest.is_never() {
            interest
        } else {
            Interest::sometimes()
        }
    }

    fn event_enabled(&self, event: &tracing::Event<'_>, cx: &Context<'_, S>) -> bool {
        self.0.event_enabled(event, cx)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        self.0.max_level_hint()
    }

    fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, cx: Context<'_, S>) {
        self.0.on_new_span(attrs, id, cx)
    }

    fn on_record(&self, id: &span::Id, values: &span::Record<'_>, cx: Context<'_, S>) {
        self.0.on_record(id, values, cx)
    }

    fn on_enter(&self, id: &span::Id, cx: Context<'_, S>) {
        self.0.on_enter(id, cx)
    }

    fn on_exit(&self, id: &span::Id, cx: Context<'_, S>) {
        self.0.on_exit(id, cx)
    }

    fn on_close(&self, id: span::Id, cx: Context<'_, S>) {
        self.0.on_close(id, cx)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    /// Counts the events it is given.
    struct Count(Arc<AtomicUsize>);

    impl<S: Subscriber> tracing_subscriber::Layer<S> for Count {
        fn on_event(&self, _: &tracing::Event<'_>, _: Context<'_, S>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Two info events with a check of the debug level between them (as
    /// libraries make after each statement), which one layer takes and
    /// the other does not: both events reach the layer that does not.
    fn events_counted(asked: bool) -> usize {
        let (a, b) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let info = || tracing_subscriber::filter::LevelFilter::INFO;
        let subscriber = tracing_subscriber::registry()
            .with(if asked {
                Count(a.clone()).with_filter(Asked(info())).boxed()
            } else {
                Count(a.clone()).with_filter(info()).boxed()
            })
            .with(Count(b).with_filter(tracing_subscriber::filter::LevelFilter::DEBUG));
        tracing::subscriber::with_default(subscriber, || {
            for _ in 0..2 {
                tracing::info!("an event");
                let _ = tracing::enabled!(tracing::Level::DEBUG);
            }
        });
        a.load(Ordering::SeqCst)
    }

    #[test]
    fn an_event_after_a_check_that_one_layer_refused_is_not_lost() {
        assert_eq!(events_counted(true), 2);
        // The loss it guards against: when this fails, tracing-subscriber
        // keeps its per-layer decisions fresh itself and `Asked` can go.
        assert!(events_counted(false) < 2);
    }
}
