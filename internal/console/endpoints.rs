//! The JSON API's routes as data: the router is built from this list and
//! the book's reference is generated from it, so the two cannot differ.
//! A route's query parameters are read from the struct its handler
//! parses them into.

use serde::de::{self, Deserializer, Visitor};

/// Who may call a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Whoever reaches the listener.
    Open,
    /// The admin token.
    Admin,
    /// A producer token, the legacy `--producer-token` or the admin token.
    Producer,
}

impl Access {
    /// How the reference names it.
    pub fn describe(self) -> &'static str {
        match self {
            Access::Open => "open",
            Access::Admin => "admin token",
            Access::Producer => "producer or admin token",
        }
    }
}

/// One route of the API.
#[derive(Clone, Copy, Debug)]
pub struct Endpoint {
    /// `GET`, `POST`, `PUT` or `DELETE`.
    pub method: &'static str,
    /// The path under `/api/v1`, with `{name}` for a path parameter.
    pub path: &'static str,
    /// The query parameters it takes (any other is refused with 400).
    pub query: fn() -> &'static [&'static str],
    /// The body it reads, empty for none.
    pub body: &'static str,
    /// Who may call it.
    pub access: Access,
    /// What it answers.
    pub answer: &'static str,
}

/// For a route without query parameters.
pub(super) fn no_query() -> &'static [&'static str] {
    &[]
}

/// The field names of the struct `T` deserializes from: serde's derive
/// hands them to `deserialize_struct`, which this deserializer records
/// instead of reading anything.
pub(crate) fn fields<T: serde::de::DeserializeOwned>() -> &'static [&'static str] {
    let mut found: &'static [&'static str] = &[];
    let _ = T::deserialize(Probe(&mut found));
    found
}

/// Records the fields a derived `Deserialize` asks for, then stops.
struct Probe<'a>(&'a mut &'static [&'static str]);

/// The probe's only error: it stops the deserializer once the fields are known.
#[derive(Debug)]
struct Stop;

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("probed")
    }
}

impl std::error::Error for Stop {}

impl de::Error for Stop {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Stop
    }
}

impl<'de> Deserializer<'de> for Probe<'_> {
    type Error = Stop;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
        Err(Stop)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Stop> {
        *self.0 = fields;
        Err(Stop)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Query {
        status: Option<String>,
        limit: Option<u64>,
    }

    #[test]
    fn the_probe_reads_a_structs_fields() {
        assert_eq!(fields::<Query>(), ["status", "limit"]);
    }
}
