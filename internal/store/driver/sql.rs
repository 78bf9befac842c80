//! Statements built bind by bind: each bound value writes its own
//! placeholder as the statement is put together (`?`, or `$n` on
//! PostgreSQL), so no finished SQL is rewritten afterwards.

use sea_orm::{Statement, Value};

use std::borrow::Cow;

use super::{Clocked, Driver};

/// Builds a [`Statement`] for a driver bind by bind: a string literal is
/// SQL text (`{now}` stands for the database clock), `{value}` binds a
/// value where it stands, `[text]` appends SQL text held in a variable.
/// `sql!(driver; "UPDATE t SET a = " {a} " WHERE id = " {id})`;
/// `sql!(into s; …)` appends to the [`Sql`] `s` instead.
macro_rules! sql {
    (into $s:ident; $($part:tt)*) => {
        $crate::store::driver::sql!(@ $s; $($part)*);
    };
    ($driver:expr; $($part:tt)*) => {{
        let mut s = $crate::store::driver::Sql::new($driver);
        $crate::store::driver::sql!(@ s; $($part)*);
        s.statement()
    }};
    (@ $s:ident;) => {};
    (@ $s:ident; $text:literal $($rest:tt)*) => {
        $s.push($text);
        $crate::store::driver::sql!(@ $s; $($rest)*);
    };
    (@ $s:ident; {$value:expr} $($rest:tt)*) => {
        $s.bind($value);
        $crate::store::driver::sql!(@ $s; $($rest)*);
    };
    (@ $s:ident; [$text:expr] $($rest:tt)*) => {
        $s.push($text);
        $crate::store::driver::sql!(@ $s; $($rest)*);
    };
}
pub(crate) use sql;

/// A statement being built: its text, its values, and the driver whose
/// placeholders and clock it is written with.
#[derive(Debug)]
pub(crate) struct Sql {
    driver: Driver,
    /// `{now}`, read once when the statement is begun.
    now: Cow<'static, str>,
    text: String,
    values: Vec<Value>,
}

impl Sql {
    /// An empty statement for `driver` (a [`Driver`] alone reads the
    /// database clock as it is).
    pub(crate) fn new(driver: impl Into<Clocked>) -> Sql {
        let at: Clocked = driver.into();
        Sql {
            driver: *at,
            now: at.now(),
            text: String::new(),
            values: Vec::new(),
        }
    }

    /// The driver the statement is written for.
    pub(crate) fn driver(&self) -> Driver {
        self.driver
    }

    /// Appends SQL text; `{now}` stands for the database clock. The text
    /// holds no placeholder: values go through [`Sql::bind`].
    pub(crate) fn push(&mut self, text: &str) -> &mut Sql {
        if text.contains("{now}") {
            self.text.push_str(&text.replace("{now}", &self.now));
        } else {
            self.text.push_str(text);
        }
        self
    }

    /// Appends one placeholder and binds `value` to it.
    pub(crate) fn bind(&mut self, value: impl Into<Value>) -> &mut Sql {
        self.values.push(value.into());
        if self.driver.dialect().numbered {
            self.text.push('$');
            self.text.push_str(&self.values.len().to_string());
        } else {
            self.text.push('?');
        }
        self
    }

    /// Binds `value` without writing its placeholder, and returns the
    /// placeholder for the text to use (in several places if need be);
    /// None where placeholders are `?`, each written once in order.
    pub(crate) fn bound(&mut self, value: impl Into<Value>) -> Option<String> {
        if !self.driver.dialect().numbered {
            return None;
        }
        self.values.push(value.into());
        Some(format!("${}", self.values.len()))
    }

    /// Appends the values as a comma-separated list of placeholders.
    pub(crate) fn binds(&mut self, values: impl IntoIterator<Item = Value>) -> &mut Sql {
        for (k, v) in values.into_iter().enumerate() {
            if k > 0 {
                self.text.push_str(", ");
            }
            self.bind(v);
        }
        self
    }

    /// Appends `rows` parenthesized rows of `values` (taken in order,
    /// `values.len() / rows` per row), comma-separated: a `VALUES` or a
    /// row `IN` list.
    pub(crate) fn rows(&mut self, rows: usize, values: Vec<Value>) -> &mut Sql {
        let width = values.len() / rows.max(1);
        let mut values = values.into_iter();
        for r in 0..rows {
            self.push(if r == 0 { "(" } else { ", (" });
            self.binds(values.by_ref().take(width));
            self.push(")");
        }
        self
    }

    /// The statement built.
    pub(crate) fn statement(self) -> Statement {
        Statement::from_sql_and_values(self.driver.backend(), self.text, self.values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_bind_writes_its_placeholder() {
        let mut s = Sql::new(Driver::Postgres);
        s.push("a = ")
            .bind(1)
            .push(" AND b IN (")
            .binds([2.into(), 3.into()]);
        s.push(")");
        assert_eq!(s.statement().sql, "a = $1 AND b IN ($2, $3)");
        let mut s = Sql::new(Driver::MySql);
        s.push("(a, b) IN (")
            .rows(2, vec![1.into(), 2.into(), 3.into(), 4.into()]);
        assert_eq!(s.text, "(a, b) IN ((?, ?), (?, ?)");
        assert_eq!(s.values.len(), 4);
    }

    #[test]
    fn the_clock_is_the_databases_unless_a_test_moves_it() {
        let now = Driver::Sqlite.dialect().now;
        let mut s = Sql::new(Driver::Sqlite);
        s.push("{now}");
        assert_eq!(s.text, now, "production statements carry no offset");
        let clock = crate::config::Clock::movable();
        clock.advance(std::time::Duration::from_millis(1500));
        let mut s = Sql::new(Clocked::new(Driver::Sqlite, clock));
        s.push("a < {now}");
        assert_eq!(s.text, format!("a < ({now} + 1500)"));
    }
}
