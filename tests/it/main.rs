//! End-to-end tests: the real `processor` binary against real databases
//! (SQLite, PostgreSQL, MariaDB) and a real HTTP handler served here.

mod support;

mod browser;
mod chaos;
mod cli;
mod console_api;
mod controls;
mod fencing;
mod gates;
mod hostile;
mod library;
mod protocol;
mod retention;
mod sessions;
mod webdriver;
