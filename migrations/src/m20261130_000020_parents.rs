//! `feed_items.parent_id`: the item whose handler's answer spawned this
//! one (`"items"` in an answer), NULL for items a producer enqueued. Shown
//! by export, the API and the console; nothing looks items up by it.

const COLUMNS: [crate::Column; 1] = [("feed_items", "parent_id", "VARCHAR(255) NULL")];

crate::columns_migration!(COLUMNS);
