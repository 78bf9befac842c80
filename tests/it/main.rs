//! End-to-end tests: Feed in this process (`support::InProcess`,
//! `testkit::Scene`) or the real `processor` binary, against real
//! databases (SQLite, PostgreSQL, MariaDB) and a real HTTP handler served
//! here.

// The tests' futures nest deeply (each backend's fixture, then the test).
#![recursion_limit = "256"]

mod fairness;
mod faults;
mod proxy;
mod support;

mod bad_rows;
mod batch;
mod bodies;
mod book;
mod book_examples;
mod breaker;
mod browser;
mod browser_bulk;
mod browser_overview;
mod bulk;
mod chaos;
mod chaos_hands;
mod citus;
mod citus_moves;
mod citus_setup;
mod cli;
mod collation;
mod completion;
mod console_api;
mod controls;
mod dbfaults;
mod echoes;
mod enqueue_api;
mod enqueue_budget;
mod enqueue_inputs;
mod enqueue_memory;
mod enqueue_state;
mod exact_data;
mod exports;
mod failures;
mod fan_in;
mod fencing;
mod figures;
mod fleet;
mod gates;
mod hardening;
mod held_off;
mod hostile;
mod inputs;
mod large_enqueue;
mod library;
mod liveness;
mod migrations;
mod netfault;
mod otel;
mod partition_end;
mod pickup;
mod pooler;
mod priority;
mod producer_tokens;
mod protocol;
mod races;
mod readonly;
mod recovery;
mod refusals;
mod retention;
mod scale;
mod schedule;
mod schedules;
mod search;
mod sessions;
mod signatures;
mod spawn;
mod startup;
mod steps;
mod tenants;
mod throttle;
mod tidy;
mod timing;
mod webdriver;
mod webhooks;
mod wrong_url;
