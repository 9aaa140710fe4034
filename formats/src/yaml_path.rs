//! Paths into a parsed YAML document, for readers that walk the parser's events to find what
//! the parsed value does not show (how a key or a scalar was written) and then change the value.

use serde_json::Value;

/// One step of a path into a parsed document.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Step {
    Key(String),
    Index(usize),
}

/// Where an event walk is in the document.
pub(crate) enum Frame {
    /// A mapping; `key` is the key of the value being read, `None` while a key is expected.
    Map {
        key: Option<String>,
    },
    Seq {
        index: usize,
    },
    /// A collection used as a mapping key (rare): its contents are not values of the document.
    Key,
}

/// After a node: the parent mapping expects a key again, the parent list moves on.
pub(crate) fn node_done(stack: &mut [Frame]) {
    match stack.last_mut() {
        Some(Frame::Map { key }) => *key = None,
        Some(Frame::Seq { index }) => *index += 1,
        _ => {}
    }
}

/// The value at `path` in `value`, if there is one.
pub(crate) fn navigate<'v>(value: &'v mut Value, path: &[Step]) -> Option<&'v mut Value> {
    let mut current = value;
    for step in path {
        current = match (step, current) {
            (Step::Key(k), Value::Object(m)) => m.get_mut(k)?,
            (Step::Index(i), Value::Array(a)) => a.get_mut(*i)?,
            _ => return None,
        };
    }
    Some(current)
}
