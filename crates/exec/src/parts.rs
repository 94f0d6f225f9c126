//! A small, bounded fan-out for work that is not a stream of chunks: a slice of items cut into
//! one contiguous part per worker, each part mapped on its own scoped thread with that worker's
//! state (a scratch buffer, or nothing), the results in item order.

/// Maps `items` with `f` on up to `workers.len()` threads, each part with its own worker
/// state; returns the results in the order of `items`. With one worker (or one item) it runs on
/// the calling thread.
pub fn map_in_parts<T, W, R>(
    items: &[T],
    workers: &mut [W],
    f: impl Fn(&mut W, &T) -> R + Sync,
) -> Vec<R>
where
    T: Sync,
    W: Send,
    R: Send,
{
    assert!(!workers.is_empty(), "at least one worker");
    let parts = workers.len().min(items.len());
    if parts <= 1 {
        return items.iter().map(|t| f(&mut workers[0], t)).collect();
    }
    let per = items.len().div_ceil(parts);
    let f = &f;
    std::thread::scope(|scope| {
        let handles: Vec<_> = items
            .chunks(per)
            .zip(workers.iter_mut())
            .map(|(part, worker)| {
                scope.spawn(move || part.iter().map(|t| f(worker, t)).collect::<Vec<R>>())
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a worker thread panicked"))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_in_item_order_whatever_the_workers() {
        let items: Vec<u64> = (0..1000).collect();
        for workers in [1, 2, 3, 7, 2000] {
            let mut seen = vec![0usize; workers];
            let out = map_in_parts(&items, &mut seen, |n, x| {
                *n += 1;
                x * 2
            });
            assert_eq!(out, items.iter().map(|x| x * 2).collect::<Vec<_>>());
            assert_eq!(seen.iter().sum::<usize>(), items.len());
            if workers > 1 {
                assert!(
                    seen.iter().filter(|n| **n > 0).count() > 1,
                    "{workers} workers"
                );
            }
        }
        assert!(map_in_parts(&[] as &[u8], &mut [()], |_, x| *x).is_empty());
    }
}
