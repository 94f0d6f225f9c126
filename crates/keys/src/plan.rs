//! The plan of a distributed stage 2: which group decides which hot rows.
//!
//! A hot sample's decision depends only on earlier hot samples that share a hot key with it,
//! transitively (representatives live in hot buckets; exact copies are found by their hot
//! content key). So decisions interact only inside the connected components of the graph "two
//! hot rows share a hot key", and each component can be decided on its own, in global row order,
//! by any machine. The plan finds the components and packs them into groups of balanced size.
//!
//! Components are found by union-find over the **hot keys**, not the rows: every hot row joins
//! the keys it holds, and a component's size is the number of hot rows that joined it. So the
//! plan holds a node per hot key (parent and size, 16 bytes) and a directory over the sorted keys
//! ([`SortedKeyIndex`], 2 to 4 bytes per key), and nothing per row: streamed over the rows once.
//! Every hot key then belongs to exactly one component, and the plan is stored as one group
//! number per hot key: a hot row's group is the group of any of its hot keys.
//!
//! Packing is deterministic: components in decreasing size (ties: the component holding the
//! smaller hot key first) each go to the group with the fewest hot rows so far (ties: the lower
//! group), the classic longest-processing-time rule, which is within 4/3 of the best possible
//! largest group.

use serde::{Deserialize, Serialize};

use crate::error::{KeysError, KeysSettingsError};
use crate::index::{SortedKeyIndex, prefetch};

/// Finds the connected components of hot rows, row by row.
pub struct PlanBuilder<'a> {
    index: SortedKeyIndex<'a>,
    /// Every hot key's union-find node.
    nodes: Vec<Node>,
    hot_rows: u64,
    /// The hot-key positions of the keys of the rows being added (`NOT_HOT` for the others).
    positions: Vec<u32>,
}

/// A hot key's node: the parent and size sit together, so a step of a find waits on one cache
/// line.
#[derive(Clone, Copy)]
struct Node {
    /// Hot rows in the component, kept at its root.
    rows: u64,
    parent: u32,
}

const NOT_HOT: u32 = u32::MAX;

impl<'a> PlanBuilder<'a> {
    /// A builder over the hot keys (ascending, distinct), each in a component of its own.
    pub fn new(hot_keys: &'a [u64]) -> Result<PlanBuilder<'a>, KeysError> {
        // `NOT_HOT` is never a position.
        let n = u32::try_from(hot_keys.len())
            .ok()
            .filter(|n| *n < NOT_HOT)
            .ok_or_else(|| {
                KeysError::from(KeysSettingsError::TooManyHotKeys {
                    hot_keys: hot_keys.len(),
                })
            })?;
        Ok(PlanBuilder {
            index: SortedKeyIndex::new(hot_keys),
            nodes: (0..n).map(|parent| Node { rows: 0, parent }).collect(),
            hot_rows: 0,
            positions: Vec::new(),
        })
    }

    fn find(&mut self, mut k: u32) -> u32 {
        while self.nodes[k as usize].parent != k {
            let up = self.nodes[self.nodes[k as usize].parent as usize].parent;
            // Path halving: every other node on the way points to its grandparent.
            self.nodes[k as usize].parent = up;
            k = up;
        }
        k
    }

    fn union(&mut self, a: u32, b: u32) -> u32 {
        let (a, b) = (self.find(a), self.find(b));
        if a == b {
            return a;
        }
        // The larger component (in rows, then the lower index) stays the root, which keeps the
        // trees shallow.
        let (root, child) = if (self.nodes[a as usize].rows, std::cmp::Reverse(a))
            >= (self.nodes[b as usize].rows, std::cmp::Reverse(b))
        {
            (a, b)
        } else {
            (b, a)
        };
        self.nodes[child as usize].parent = root;
        self.nodes[root as usize].rows += self.nodes[child as usize].rows;
        self.nodes[child as usize].rows = 0;
        root
    }

    /// Adds one row of keys; keys that are not hot are ignored, and a row without a hot key is
    /// cold and ignored.
    pub fn add_row(&mut self, keys: &[u64]) {
        self.add_rows(keys, keys.len());
    }

    /// Adds consecutive rows of `columns` keys each (a block of a key table), as
    /// [`PlanBuilder::add_row`] one by one would.
    pub fn add_rows(&mut self, keys: &[u64], columns: usize) {
        if columns == 0 {
            return;
        }
        // Every lookup and every find is a wait on memory (both tables are far larger than a
        // cache), so the block is done in two passes that ask for what they read ahead of time:
        // the hot-key positions of all its keys, then the unions row by row.
        const ROWS_AHEAD: usize = 2;
        let mut positions = std::mem::take(&mut self.positions);
        positions.clear();
        self.index.each_position(keys, |_, position| {
            positions.push(position.map_or(NOT_HOT, |p| p as u32));
        });
        let rows = positions.len() / columns;
        for r in 0..rows {
            if r + ROWS_AHEAD < rows {
                let ahead = (r + ROWS_AHEAD) * columns;
                for &p in &positions[ahead..ahead + columns] {
                    if p != NOT_HOT {
                        prefetch(&self.nodes[p as usize]);
                    }
                }
            }
            let mut row = positions[r * columns..(r + 1) * columns]
                .iter()
                .copied()
                .filter(|&p| p != NOT_HOT);
            let Some(first) = row.next() else {
                continue;
            };
            let mut root = self.find(first);
            for k in row {
                root = self.union(root, k);
            }
            self.nodes[root as usize].rows += 1;
            self.hot_rows += 1;
        }
        self.positions = positions;
    }

    /// Packs the components into `groups` groups.
    pub fn finish(mut self, groups: u32) -> Result<Plan, KeysError> {
        if groups == 0 {
            return Err(KeysSettingsError::NoGroups.into());
        }
        let n = self.nodes.len();
        // Components by their root, named by their smallest key (the first index reaching them).
        let mut components: Vec<(u64, u32, u32)> = Vec::new();
        let mut root_component = vec![u32::MAX; n];
        for k in 0..n as u32 {
            let root = self.find(k) as usize;
            if root_component[root] == u32::MAX {
                root_component[root] = components.len() as u32;
                components.push((self.nodes[root].rows, k, root as u32));
            }
        }
        let mut order: Vec<usize> = (0..components.len()).collect();
        order.sort_by_key(|&c| (std::cmp::Reverse(components[c].0), components[c].1));
        let mut load = vec![0u64; groups as usize];
        let mut component_group = vec![0u32; components.len()];
        for c in order {
            let g = (0..groups as usize)
                .min_by_key(|&g| (load[g], g))
                .expect("at least one group");
            load[g] += components[c].0;
            component_group[c] = g as u32;
        }
        let group_of_key = (0..n as u32)
            .map(|k| {
                let root = self.find(k) as usize;
                component_group[root_component[root] as usize]
            })
            .collect();
        Ok(Plan {
            groups,
            group_of_key,
            group_rows: load,
            components: components.len() as u64,
            largest_component: components.iter().map(|c| c.0).max().unwrap_or(0),
            hot_rows: self.hot_rows,
        })
    }
}

/// Which group decides each hot key's rows; see the module docs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// Number of groups.
    pub groups: u32,
    /// The group of each hot key, in the order of the ascending hot keys.
    pub group_of_key: Vec<u32>,
    /// Hot rows per group.
    pub group_rows: Vec<u64>,
    /// Connected components of hot rows (hot keys no row reached count as their own).
    pub components: u64,
    /// Hot rows of the largest component.
    pub largest_component: u64,
    /// Hot rows planned.
    pub hot_rows: u64,
}

impl Plan {
    /// Every hot key in group 0: the plan of a run with one group, made without looking at rows.
    pub fn single(hot_keys: usize, hot_rows: u64) -> Plan {
        Plan {
            groups: 1,
            group_of_key: vec![0; hot_keys],
            group_rows: vec![hot_rows],
            components: 0,
            largest_component: 0,
            hot_rows,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The components of rows by brute force: rows sharing a hot key, transitively.
    fn brute_components(rows: &[Vec<u64>], hot: &[u64]) -> Vec<Option<usize>> {
        let n = rows.len();
        let mut label: Vec<Option<usize>> = rows
            .iter()
            .enumerate()
            .map(|(i, r)| r.iter().any(|k| hot.contains(k)).then_some(i))
            .collect();
        loop {
            let mut changed = false;
            for i in 0..n {
                for j in 0..n {
                    let share = rows[i]
                        .iter()
                        .any(|k| hot.contains(k) && rows[j].contains(k));
                    if let (Some(a), Some(b), true) = (label[i], label[j], share)
                        && a != b
                    {
                        let m = a.min(b);
                        label[i] = Some(m);
                        label[j] = Some(m);
                        changed = true;
                    }
                }
            }
            if !changed {
                return label;
            }
        }
    }

    fn plan(rows: &[Vec<u64>], hot: &[u64], groups: u32) -> Plan {
        let mut b = PlanBuilder::new(hot).unwrap();
        for r in rows {
            b.add_row(r);
        }
        b.finish(groups).unwrap()
    }

    fn group_of_row(p: &Plan, hot: &[u64], row: &[u64]) -> Option<u32> {
        let gs: Vec<u32> = row
            .iter()
            .filter_map(|k| hot.binary_search(k).ok())
            .map(|i| p.group_of_key[i])
            .collect();
        assert!(
            gs.windows(2).all(|w| w[0] == w[1]),
            "a row's keys in two groups"
        );
        gs.first().copied()
    }

    #[test]
    fn rows_sharing_a_hot_key_transitively_land_in_one_group() {
        use proptest::prelude::*;
        let strategy = (
            // Key 0 is `NO_KEY`, which a table holds for "no key here", never a hot key.
            prop::collection::vec(prop::collection::vec(1u64..41, 1..5), 0..60),
            1u32..6,
        );
        proptest::test_runner::TestRunner::default()
            .run(&strategy, |(rows, groups)| {
                // Keys seen twice are hot.
                let mut counts = std::collections::BTreeMap::new();
                for r in &rows {
                    for k in r {
                        *counts.entry(*k).or_insert(0) += 1;
                    }
                }
                let hot: Vec<u64> = counts
                    .iter()
                    .filter(|(_, c)| **c > 1)
                    .map(|(k, _)| *k)
                    .collect();
                let p = plan(&rows, &hot, groups);
                let truth = brute_components(&rows, &hot);
                for i in 0..rows.len() {
                    for j in 0..rows.len() {
                        if let (Some(a), Some(b)) = (truth[i], truth[j])
                            && a == b
                        {
                            prop_assert_eq!(
                                group_of_row(&p, &hot, &rows[i]),
                                group_of_row(&p, &hot, &rows[j])
                            );
                        }
                    }
                }
                let hot_rows = truth.iter().filter(|t| t.is_some()).count() as u64;
                prop_assert_eq!(p.hot_rows, hot_rows);
                prop_assert_eq!(p.group_rows.iter().sum::<u64>(), hot_rows);
                // Same input, same plan.
                prop_assert_eq!(&plan(&rows, &hot, groups), &p);
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn components_are_packed_largest_first_into_the_lightest_group() {
        // Components of 5, 3, 2, 2 rows (keys 10, 20, 30, 40) into 2 groups: 5 | 3+2, then the
        // last 2 goes to the lighter group 0 → loads 7 and 5.
        let mut rows = Vec::new();
        for (key, n) in [(10u64, 5), (20, 3), (30, 2), (40, 2)] {
            for i in 0..n {
                rows.push(vec![key, 1000 + key * 10 + i]);
            }
        }
        let hot = [10u64, 20, 30, 40];
        let p = plan(&rows, &hot, 2);
        assert_eq!(p.group_of_key, vec![0, 1, 1, 0]);
        assert_eq!(p.group_rows, vec![7, 5]);
        assert_eq!(p.components, 4);
        assert_eq!(p.largest_component, 5);
        // More groups than components: the extra groups stay empty.
        let p = plan(&rows, &hot, 6);
        assert_eq!(p.group_rows, vec![5, 3, 2, 2, 0, 0]);
    }

    #[test]
    fn edge_plans_no_hot_key_one_group_and_no_group() {
        // No hot key: every group is empty, and no row is hot.
        let rows = vec![vec![1u64, 2], vec![3, 4]];
        let p = plan(&rows, &[], 3);
        assert_eq!(p.group_of_key, Vec::<u32>::new());
        assert_eq!(p.group_rows, vec![0, 0, 0]);
        assert_eq!((p.hot_rows, p.components, p.largest_component), (0, 0, 0));
        // One group takes every hot key, whatever the components.
        let rows = vec![
            vec![10u64, 1],
            vec![10, 2],
            vec![20, 3],
            vec![20, 4],
            vec![30, 5],
        ];
        let hot = [10u64, 20, 30];
        let p = plan(&rows, &hot, 1);
        assert_eq!(p.group_of_key, vec![0, 0, 0]);
        assert_eq!(p.group_rows, vec![5]);
        assert_eq!(p.group_of_key, Plan::single(3, 5).group_of_key);
        // A hot key no row holds is a component of no rows, still in a group.
        let p = plan(&rows[..4], &hot, 2);
        assert_eq!(p.group_of_key.len(), 3);
        assert_eq!(p.group_rows.iter().sum::<u64>(), 4);
        assert_eq!(p.components, 3);
        // No group to put them in.
        let b = PlanBuilder::new(&hot).unwrap();
        assert!(matches!(
            b.finish(0),
            Err(KeysError::Config(KeysSettingsError::NoGroups))
        ));
    }
}
