//! `feed_items.traceparent`: the producer's W3C trace context (version 00,
//! 55 characters), NULL when it gave none. The delivery's span is its
//! child, so a trace that enqueued the item goes on through the handler.

const COLUMNS: [crate::Column; 1] = [("feed_items", "traceparent", "VARCHAR(55) NULL")];

crate::columns_migration!(COLUMNS);
