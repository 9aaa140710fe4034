//! Work spread over the machine's cores within one render: translating a chart's templates,
//! reading its rendered files, writing the objects out.

use std::sync::atomic::{AtomicUsize, Ordering};

/// At most this many threads per render: a render shares the machine with the agent's others.
const MAX_THREADS: usize = 4;

/// `f` over `items`, the results in `items`' order, on up to four threads (one when the machine
/// has one core or the items' total `size` is under `min_total`: not worth a thread).
///
/// The largest items are taken first, each by the next free thread, so that one large item (a
/// chart's file of CRDs) does not hold a thread while the others have nothing left to do. An
/// item whose thread panicked gets `lost()`.
pub fn map_in_parallel<T: Sync, R: Send>(
    items: &[T],
    size: impl Fn(&T) -> usize,
    min_total: usize,
    f: impl Fn(&T) -> R + Sync,
    lost: impl Fn() -> R,
) -> Vec<R> {
    let total: usize = items.iter().map(&size).sum();
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(MAX_THREADS)
        .min(items.len());
    if threads < 2 || total < min_total {
        return items.iter().map(f).collect();
    }
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(size(&items[i])));
    let next = AtomicUsize::new(0);
    let (f, order, next) = (&f, &order, &next);
    let done: Vec<Vec<(usize, R)>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(move || {
                    let mut out = Vec::new();
                    while let Some(&i) = order.get(next.fetch_add(1, Ordering::Relaxed)) {
                        out.push((i, f(&items[i])));
                    }
                    out
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_default())
            .collect()
    });
    let mut results: Vec<Option<R>> = std::iter::repeat_with(|| None).take(items.len()).collect();
    for (i, r) in done.into_iter().flatten() {
        if let Some(slot) = results.get_mut(i) {
            *slot = Some(r);
        }
    }
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(&lost))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::map_in_parallel;

    #[test]
    fn results_keep_the_items_order_whatever_their_sizes() {
        let items: Vec<usize> = vec![1, 500, 3, 7000, 2, 40, 9000, 5];
        let out = map_in_parallel(&items, |n| *n, 0, |n| n * 2, || usize::MAX);
        assert_eq!(out, items.iter().map(|n| n * 2).collect::<Vec<_>>());
    }

    #[test]
    fn small_work_stays_on_the_calling_thread() {
        let caller = std::thread::current().id();
        let items = vec![1usize, 2, 3];
        let out = map_in_parallel(
            &items,
            |n| *n,
            1_000,
            |_| std::thread::current().id() == caller,
            || false,
        );
        assert_eq!(out, vec![true, true, true]);
    }

    #[test]
    fn an_item_whose_thread_panicked_is_lost_not_dropped() {
        if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
            return;
        }
        let items: Vec<usize> = (0..16).collect();
        let out = map_in_parallel(
            &items,
            |_| 1,
            0,
            |&n| {
                assert_ne!(n, 7, "item 7 fails");
                Some(n)
            },
            || None,
        );
        assert_eq!(out.len(), items.len());
        assert_eq!(out[7], None);
        assert!(out.iter().flatten().all(|&n| n != 7));
    }
}
