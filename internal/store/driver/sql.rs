//! Statements built bind by bind: each bound value writes its own
//! placeholder as the statement is put together (`?`, or `$n` on
//! PostgreSQL), so no finished SQL is rewritten afterwards.

use sea_orm::{Statement, Value};

use super::Driver;

/// Builds a [`Statement`] for a driver bind by bind: a string literal is
/// SQL text (`{now}` stands for the database clock), `{value}` binds a
/// value where it stands, `[text]` appends SQL text held in a variable.
/// `sql!(driver; "UPDATE t SET a = " {a} " WHERE id = " {id})`.
macro_rules! sql {
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
    text: String,
    values: Vec<Value>,
}

impl Sql {
    /// An empty statement for `driver`.
    pub(crate) fn new(driver: Driver) -> Sql {
        Sql {
            driver,
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
        self.text
            .push_str(&text.replace("{now}", self.driver.dialect().now));
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

    /// Builds a statement from a template written with `?` where each of
    /// `values` goes, in order. The template is read as SQL: a `?` inside a
    /// quoted string or identifier, or in a comment, is text, not a
    /// placeholder.
    pub(crate) fn template(driver: Driver, template: &str, values: Vec<Value>) -> Statement {
        let mut sql = Sql::new(driver);
        let mut values = values.into_iter();
        for piece in pieces(template, driver == Driver::MySql) {
            match piece {
                Piece::Text(t) => {
                    sql.push(t);
                }
                Piece::Mark => {
                    let v = values.next();
                    debug_assert!(v.is_some(), "fewer values than `?` in: {template}");
                    sql.bind(v.unwrap_or(Value::Int(None)));
                }
            }
        }
        debug_assert!(
            values.next().is_none(),
            "more values than `?` in: {template}"
        );
        sql.values.extend(values);
        sql.statement()
    }
}

/// A part of a template: SQL text, or where a value goes.
#[derive(Debug, PartialEq)]
enum Piece<'a> {
    Text(&'a str),
    Mark,
}

/// Splits a template at its placeholders, passing over quoted strings
/// (`'…'`), quoted identifiers (`"…"`, `` `…` ``) and comments (`-- …`,
/// `/* … */`), whose `?` are text; with `backslash`, a backslash escapes
/// the character after it inside a string (MySQL's strings).
fn pieces(template: &str, backslash: bool) -> Vec<Piece<'_>> {
    let bytes = template.as_bytes();
    let mut out = Vec::new();
    let (mut start, mut k) = (0, 0);
    while k < bytes.len() {
        match bytes[k] {
            b'?' => {
                if start < k {
                    out.push(Piece::Text(&template[start..k]));
                }
                out.push(Piece::Mark);
                k += 1;
                start = k;
            }
            q @ (b'\'' | b'"' | b'`') => k = closing(bytes, k + 1, q, backslash && q != b'`'),
            b'-' if bytes.get(k + 1) == Some(&b'-') => {
                k = bytes[k..]
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(bytes.len(), |n| k + n + 1);
            }
            b'/' if bytes.get(k + 1) == Some(&b'*') => {
                k = template[k + 2..]
                    .find("*/")
                    .map_or(bytes.len(), |n| k + 2 + n + 2);
            }
            _ => k += 1,
        }
    }
    if start < bytes.len() {
        out.push(Piece::Text(&template[start..]));
    }
    out
}

/// The index after the quote `q` that closes a quoted part begun before
/// `from` (a doubled quote is one quote character inside it, and so is an
/// escaped one with `backslash`).
fn closing(bytes: &[u8], mut from: usize, q: u8, backslash: bool) -> usize {
    while from < bytes.len() {
        if backslash && bytes[from] == b'\\' {
            from += 2;
            continue;
        }
        if bytes[from] == q {
            if bytes.get(from + 1) == Some(&q) {
                from += 2;
                continue;
            }
            return from + 1;
        }
        from += 1;
    }
    bytes.len()
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
    fn a_question_mark_in_a_string_is_text() {
        let st = Sql::template(
            Driver::Postgres,
            "SELECT 'what?', \"c?\" -- why?\n FROM t /* ? */ WHERE a = ? AND b = 'it''s?' AND c = ?",
            vec![1.into(), 2.into()],
        );
        assert_eq!(
            st.sql,
            "SELECT 'what?', \"c?\" -- why?\n FROM t /* ? */ WHERE a = $1 AND b = 'it''s?' AND c = $2"
        );
        assert_eq!(st.values.map(|v| v.0.len()), Some(2));
        let st = Sql::template(Driver::Sqlite, "x = '?' AND y = ?", vec![1.into()]);
        assert_eq!(st.sql, "x = '?' AND y = ?");
        let mysql = "x = 'it\\'s?' AND y = ?";
        assert_eq!(
            pieces(mysql, true),
            [Piece::Text("x = 'it\\'s?' AND y = "), Piece::Mark]
        );
    }

    #[test]
    fn the_clock_is_written_in() {
        for d in [Driver::Sqlite, Driver::Postgres, Driver::MySql] {
            let st = Sql::template(d, "SELECT {now}", vec![]);
            assert!(!st.sql.contains("{now}"), "{}", st.sql);
        }
    }
}
