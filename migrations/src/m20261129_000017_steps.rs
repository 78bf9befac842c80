//! `feed_items.steps`: how many times in a row the handler answered
//! "not done" for the item at its current gate. It bounds the steps an
//! item may take at one gate (`--max-steps`) and spaces them out, so no
//! answer can make dispatch loop on an item; a move to a later gate, and
//! `processor retry`, start it again at 0.

const COLUMNS: [crate::Column; 1] = [("feed_items", "steps", "INTEGER NOT NULL DEFAULT 0")];

crate::columns_migration!(COLUMNS);
