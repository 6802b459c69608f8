//! `memory:`: a store in a map behind a lock, answered in place (no
//! operation waits). Gone with the process: for tests and scratch data.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::{incremented, Answer, Backend, Op, Pending, Reply};

/// The map, ordered so `list-keys` pages follow one another.
#[derive(Default)]
pub(crate) struct MemoryStore {
    map: Mutex<BTreeMap<String, Vec<u8>>>,
}

impl MemoryStore {
    fn answer(&self, op: Op) -> Answer {
        // A panic cannot leave the map half-changed (every change is one
        // call), so a poisoned lock is still a good map.
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        Ok(match op {
            Op::Get(keys) => Reply::Values(keys.iter().map(|k| map.get(k).cloned()).collect()),
            Op::Exists(key) => Reply::Exists(map.contains_key(&key)),
            Op::Set(pairs) => {
                map.extend(pairs);
                Reply::Done
            }
            Op::Delete(keys) => {
                for k in keys {
                    map.remove(&k);
                }
                Reply::Done
            }
            Op::Increment(key, delta) => {
                let n = incremented(map.get(&key).map(Vec::as_slice), delta)?;
                map.insert(key, n.to_string().into_bytes());
                Reply::Number(n)
            }
            Op::List { cursor, limit } => {
                let skip = usize::try_from(cursor).unwrap_or(usize::MAX);
                let keys: Vec<String> = map.keys().skip(skip).take(limit).cloned().collect();
                let next = skip.saturating_add(keys.len());
                let more = next < map.len();
                Reply::Keys(keys, more.then_some(next as u64))
            }
        })
    }
}

impl Backend for MemoryStore {
    fn run(&self, op: Op) -> Pending {
        Box::pin(std::future::ready(self.answer(op)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_follow_one_another_to_the_end() {
        let s = MemoryStore::default();
        let pairs = (0..5).map(|i| (format!("k{i}"), vec![])).collect();
        s.answer(Op::Set(pairs)).unwrap();
        let page = |cursor| s.answer(Op::List { cursor, limit: 2 }).unwrap();
        assert_eq!(
            page(0),
            Reply::Keys(vec!["k0".into(), "k1".into()], Some(2))
        );
        assert_eq!(
            page(2),
            Reply::Keys(vec!["k2".into(), "k3".into()], Some(4))
        );
        assert_eq!(page(4), Reply::Keys(vec!["k4".into()], None));
        assert_eq!(page(99), Reply::Keys(vec![], None));
    }
}
