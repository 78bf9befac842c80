//! `feed_partitions.priority`: among the partitions that share turns (one
//! tenant's, or those of no tenant), higher ones are served first.

const COLUMNS: [crate::Column; 1] = [("feed_partitions", "priority", "INTEGER NOT NULL DEFAULT 0")];

crate::columns_migration!(COLUMNS);
