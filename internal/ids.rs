//! The ids that cross modules, each its own type, so that a session id is
//! never passed where a partition id is meant. Each is text in the
//! database, reads and binds as text, and reads as `&str` where text is
//! wanted (SQL, logs); only the other way needs saying.

use std::borrow::Borrow;
use std::fmt;
use std::sync::Arc;

use sea_orm::{ColIdx, QueryResult, TryGetError, TryGetable, Value};

macro_rules! id {
    ($(#[$doc:meta])* $name:ident($inner:ty)) => {
        $(#[$doc])*
        #[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name($inner);

        impl $name {
            /// The id as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl std::ops::Deref for $name {
            type Target = str;

            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl From<&str> for $name {
            fn from(id: &str) -> Self {
                Self(id.into())
            }
        }

        impl From<String> for $name {
            fn from(id: String) -> Self {
                Self(id.into())
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                &*self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                &*self.0 == *other
            }
        }

        impl From<&$name> for Value {
            fn from(id: &$name) -> Value {
                Value::from(id.as_str())
            }
        }

        impl From<$name> for Value {
            fn from(id: $name) -> Value {
                Value::from(id.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl TryGetable for $name {
            fn try_get_by<I: ColIdx>(res: &QueryResult, index: I) -> Result<Self, TryGetError> {
                String::try_get_by(res, index).map(Self::from)
            }
        }
    };
}

id!(
    /// A processor's session: what leases and results are fenced with.
    /// Cheap to clone, as every task asks for it often.
    SessionId(Arc<str>)
);
id!(
    /// A partition. Shared text: each of its items in flight carries it.
    PartitionId(Arc<str>)
);
id!(
    /// An item, unique within its partition (the same id may name items
    /// of two partitions). Shared text: the dispatch loop, the delivery
    /// and the result all hold it.
    ItemId(Arc<str>)
);
id!(
    /// A tenant: the group flow control limits and shares dispatch
    /// between (`feed_partitions.tenant`, a producer token's scope).
    Tenant(Arc<str>)
);

/// An item as the database keys it: its partition and its id.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ItemKey {
    /// The item's partition.
    pub partition: PartitionId,
    /// Its id within that partition.
    pub id: ItemId,
}

impl fmt::Display for ItemKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.partition, self.id)
    }
}

impl SessionId {
    /// A new session id (a random UUID): each start, and each
    /// re-registration after the session was lost, gets its own.
    pub fn random() -> Self {
        Self::from(uuid::Uuid::new_v4().to_string())
    }
}
