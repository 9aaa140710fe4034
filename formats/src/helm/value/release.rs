//! Releasing maps and lists without recursion. Dropping a value drops what it holds, which
//! drops what that holds, one stack frame per level: a value nested 100,000 levels deep (a
//! template can build one in a loop, within its step budget) would overflow the stack. The
//! first map or list released on a thread drains a queue instead, and every one released while
//! it drains (the values it held) only adds its items to the queue.

use std::cell::RefCell;

use minijinja::value::Value;

thread_local! {
    /// The values waiting to be dropped, while a release drains them on this thread.
    static QUEUE: RefCell<Option<Vec<Value>>> = const { RefCell::new(None) };
}

/// Drops `values` (the items of a map or list being dropped) without nesting: queued when a
/// release is already draining on this thread, else drained here.
pub(super) fn release(values: impl IntoIterator<Item = Value>) {
    let values: Vec<Value> = values.into_iter().collect();
    if values.is_empty() {
        return;
    }
    // The queue is gone while the thread's locals are torn down: drop as usual then.
    let drain_here = QUEUE.try_with(|queue| {
        let mut queue = queue.borrow_mut();
        if let Some(waiting) = queue.as_mut() {
            waiting.extend(values);
            return None;
        }
        *queue = Some(Vec::new());
        Some(values)
    });
    let Ok(Some(values)) = drain_here else {
        return;
    };
    // Each drop below may queue more values; they are taken one at a time.
    drop(values);
    while let Some(next) = QUEUE.with(|queue| queue.borrow_mut().as_mut().and_then(Vec::pop)) {
        drop(next);
    }
    QUEUE.with(|queue| *queue.borrow_mut() = None);
}

#[cfg(test)]
mod tests {
    use super::super::{GoList, GoMap};
    use minijinja::value::Value;

    fn chain(depth: usize) -> Value {
        let mut v = Value::from("leaf");
        for i in 0..depth {
            v = if i % 2 == 0 {
                GoList::value(vec![v])
            } else {
                GoMap::value([("k".to_string(), v)].into_iter().collect())
            };
        }
        v
    }

    #[test]
    fn a_value_nested_far_past_the_stack_is_released() {
        // On a thread with a small stack: a recursive drop would overflow it.
        std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn(|| drop(chain(1_000_000)))
            .unwrap()
            .join()
            .unwrap();
    }
}
