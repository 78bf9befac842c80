//! End-to-end tests: the real `processor` binary against real databases
//! (SQLite, PostgreSQL, MariaDB) and a real HTTP handler served here.

mod proxy;
mod support;

mod chaos;
mod cli;
mod fencing;
mod gates;
mod hostile;
mod library;
mod netfault;
mod protocol;
mod sessions;
