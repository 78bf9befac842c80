//! The four statuses of items and partitions, defined once: what Feed
//! writes, what filters accept, the order the console lists them in, and
//! their text order (which the gate probe's index ranges rely on). Any
//! other stored text is a status Feed does not know (written by hand).
//! Also how a handler's answer ends a partition (`PartitionEnd`), which
//! the handler, the retry policy and the store all name.

/// The status of an item or a partition, stored as its word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// Waiting to run (now, or after its backoff), or still open.
    Available,
    /// Reached its terminal state.
    Complete,
    /// Exhausted its attempts or failed for good (an item), or blocked
    /// by such an item (a partition).
    Failed,
    /// Cancelled by an operator.
    Cancelled,
}

impl Status {
    /// Every status, in the order commands and the API list them.
    pub const ALL: [Status; 4] = [
        Status::Available,
        Status::Complete,
        Status::Failed,
        Status::Cancelled,
    ];

    /// Every status in the order of its stored text: any other text lies
    /// in one of the open ranges around them.
    pub const TEXT_ORDER: [Status; 4] = [
        Status::Available,
        Status::Cancelled,
        Status::Complete,
        Status::Failed,
    ];

    /// The stored word.
    pub const fn as_str(self) -> &'static str {
        match self {
            Status::Available => "available",
            Status::Complete => "complete",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
        }
    }

    /// The status a stored word names; None for a word Feed does not know.
    pub fn parse(word: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|s| s.as_str() == word)
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How an answer ends its partition: `"partition": "complete"`,
/// `"cancel"` or `"fail"`, so that a step that finds the rest of the work
/// pointless stops it without an operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartitionEnd {
    /// The partition is `complete`; what is left of it is cancelled.
    Complete,
    /// The partition and what is left of it are `cancelled`.
    Cancel,
    /// The partition is `failed`, and so is the answering item; what is
    /// left is cancelled.
    Fail,
}

impl PartitionEnd {
    /// The word an answer gives.
    pub fn parse(word: &str) -> Option<PartitionEnd> {
        match word {
            "complete" => Some(PartitionEnd::Complete),
            "cancel" => Some(PartitionEnd::Cancel),
            "fail" => Some(PartitionEnd::Fail),
            _ => None,
        }
    }

    /// The partition's status after it.
    pub fn status(self) -> Status {
        match self {
            PartitionEnd::Complete => Status::Complete,
            PartitionEnd::Cancel => Status::Cancelled,
            PartitionEnd::Fail => Status::Failed,
        }
    }

    /// The word an answer gives.
    pub fn as_str(self) -> &'static str {
        match self {
            PartitionEnd::Complete => "complete",
            PartitionEnd::Cancel => "cancel",
            PartitionEnd::Fail => "fail",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_order_is_the_words_sorted() {
        let mut words = Status::ALL.map(Status::as_str);
        words.sort();
        assert_eq!(words, Status::TEXT_ORDER.map(Status::as_str));
        assert_eq!(Status::parse("cancelled"), Some(Status::Cancelled));
        assert_eq!(Status::parse("weird"), None);
    }
}
