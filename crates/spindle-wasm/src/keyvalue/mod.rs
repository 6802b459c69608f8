//! `wasi:keyvalue` (0.2.0-draft: `store`, `atomics`, `batch`): named
//! stores a component is granted, on an embedded file, on Redis, or in
//! memory.
//!
//! # Design
//!
//! A [`KeyValue`] is one opened store, shared by every component granted
//! it and by every request of theirs: the grants of a host
//! ([`HostConfig::keyvalue`](crate::HostConfig::keyvalue)) map the names a
//! guest opens to stores. A name the component was not granted is
//! `error::access-denied`; the empty name is the store granted as
//! `default`.
//!
//! Every operation is a future (see `wasi`), so that a wait for the store
//! parks only the fiber polling the guest and never blocks a worker:
//!
//! - `memory:` ([`memory`]): a map behind a lock, answered in place.
//! - `file:PATH` ([`file`]): an embedded, durable database (redb) in one
//!   file. Its disk work runs on threads of its own: reads on two reader
//!   threads, writes on one writer thread that commits every write waiting
//!   at that moment in one transaction (one `fsync` for many requests).
//! - `redis://HOST:PORT/DB` ([`redis`]): a Redis server shared by
//!   replicas, through the `redis` crate's multiplexed connection on a
//!   tokio thread of its own; it reconnects by itself, and a store that is
//!   down is an `error::other` to the guest within the connect and
//!   response timeouts.
//!
//! Counters (`atomics.increment`) are decimal text, as Redis keeps them
//! and as `wasmtime serve` does, so a value written through `set` by one
//! backend reads the same on another. Limits apply before a store is
//! touched (see [`limits`]).

mod file;
pub(crate) mod limits;
mod memory;
mod redis;
pub(crate) mod wasi;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// One operation on a store. `get` and `get-many` are both `Get`, `set`
/// and `set-many` both `Set`, `delete` and `delete-many` both `Delete`.
#[derive(Debug)]
pub(crate) enum Op {
    Get(Vec<String>),
    Exists(String),
    Set(Vec<(String, Vec<u8>)>),
    Delete(Vec<String>),
    Increment(String, u64),
    /// A page of at most `limit` keys from `cursor` (0: the first page).
    List {
        cursor: u64,
        limit: usize,
    },
}

/// What an [`Op`] answers, in the same order.
#[derive(Debug, PartialEq)]
pub(crate) enum Reply {
    Values(Vec<Option<Vec<u8>>>),
    Exists(bool),
    Done,
    Number(u64),
    /// Keys, and the cursor of the next page (`None`: the last page).
    Keys(Vec<String>, Option<u64>),
}

/// A store's answer: a reply, or why it failed (told to the guest as
/// `error::other`).
pub(crate) type Answer = Result<Reply, String>;

/// An answer still on its way.
pub(crate) type Pending = Pin<Box<dyn Future<Output = Answer> + Send>>;

/// A store's backend.
pub(crate) trait Backend: Send + Sync + 'static {
    /// Starts `op`; its answer is the future's output.
    fn run(&self, op: Op) -> Pending;
}

/// An opened key-value store that guests reach through `wasi:keyvalue`
/// once a host grants it by name
/// ([`HostConfig::keyvalue`](crate::HostConfig::keyvalue)). Cloning shares
/// the store.
///
/// ```
/// let store = spindle_wasm::KeyValue::open("memory:").unwrap();
/// store.set("greeting", b"hello").unwrap();
/// assert_eq!(store.get("greeting").unwrap().as_deref(), Some(&b"hello"[..]));
/// assert_eq!(store.increment("visits", 2).unwrap(), 2);
/// let config = spindle_wasm::HostConfig::default().keyvalue("default", store);
/// # drop(config);
/// ```
#[derive(Clone)]
pub struct KeyValue {
    backend: Arc<dyn Backend>,
    url: Arc<str>,
}

impl std::fmt::Debug for KeyValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyValue({})", self.url)
    }
}

impl KeyValue {
    /// Opens the store at `url`: `file:PATH` (an embedded database in one
    /// file, created with its directory if missing; one process at a time
    /// may have it open), `redis://HOST[:PORT][/DB]` (connected on first
    /// use, reconnected when lost) or `memory:` (gone with the process).
    ///
    /// ```
    /// let dir = std::env::temp_dir().join(format!("kv-doc-{}", std::process::id()));
    /// let store = spindle_wasm::KeyValue::open(&format!("file:{}/data.redb", dir.display())).unwrap();
    /// store.set("k", b"v").unwrap();
    /// # drop(store);
    /// # std::fs::remove_dir_all(dir).unwrap();
    /// assert!(spindle_wasm::KeyValue::open("ftp://x").is_err());
    /// ```
    pub fn open(url: &str) -> Result<KeyValue, String> {
        let backend: Arc<dyn Backend> = if let Some(path) = url.strip_prefix("file:") {
            if path.is_empty() {
                return Err(format!("{url:?}: no path after `file:`"));
            }
            Arc::new(file::FileStore::open(path.as_ref())?)
        } else if url.starts_with("redis://") || url.starts_with("rediss://") {
            Arc::new(redis::RedisStore::open(url)?)
        } else if url == "memory:" {
            Arc::new(memory::MemoryStore::default())
        } else {
            return Err(format!(
                "{url:?}: a key-value store is `file:PATH`, `redis://HOST:PORT/DB` or `memory:`"
            ));
        };
        Ok(KeyValue {
            backend,
            url: Arc::from(url),
        })
    }

    /// The URL it was opened with.
    ///
    /// ```
    /// assert_eq!(spindle_wasm::KeyValue::open("memory:").unwrap().url(), "memory:");
    /// ```
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The value of `key`, if any (waits like any other wait: on a fiber,
    /// only the fiber).
    ///
    /// ```
    /// let store = spindle_wasm::KeyValue::open("memory:").unwrap();
    /// assert_eq!(store.get("missing").unwrap(), None);
    /// ```
    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>, String> {
        match self.call(Op::Get(vec![key.to_string()]))? {
            Reply::Values(mut v) if v.len() == 1 => Ok(v.pop().flatten()),
            other => Err(format!("unexpected answer {other:?}")),
        }
    }

    /// Sets `key` to `value`.
    ///
    /// ```
    /// let store = spindle_wasm::KeyValue::open("memory:").unwrap();
    /// store.set("k", b"v").unwrap();
    /// ```
    pub fn set(&self, key: &str, value: &[u8]) -> Result<(), String> {
        limits::check_value(value.len())?;
        self.call(Op::Set(vec![(key.to_string(), value.to_vec())]))
            .map(drop)
    }

    /// Adds `delta` to the decimal counter at `key` (missing: 0) and
    /// returns the sum.
    ///
    /// ```
    /// let store = spindle_wasm::KeyValue::open("memory:").unwrap();
    /// assert_eq!(store.increment("n", 5).unwrap(), 5);
    /// assert_eq!(store.get("n").unwrap().as_deref(), Some(&b"5"[..]));
    /// ```
    pub fn increment(&self, key: &str, delta: u64) -> Result<u64, String> {
        match self.call(Op::Increment(key.to_string(), delta))? {
            Reply::Number(n) => Ok(n),
            other => Err(format!("unexpected answer {other:?}")),
        }
    }

    fn call(&self, op: Op) -> Answer {
        if let Some(key) = op_keys(&op).find(|k| limits::check_key(k).is_err()) {
            return Err(limits::check_key(key).unwrap_err());
        }
        spindle::block_on(self.backend.run(op))
    }

    pub(crate) fn run(&self, op: Op) -> Pending {
        self.backend.run(op)
    }
}

/// The keys an operation names.
fn op_keys(op: &Op) -> Box<dyn Iterator<Item = &str> + '_> {
    match op {
        Op::Get(keys) | Op::Delete(keys) => Box::new(keys.iter().map(String::as_str)),
        Op::Exists(key) | Op::Increment(key, _) => Box::new(std::iter::once(key.as_str())),
        Op::Set(pairs) => Box::new(pairs.iter().map(|(k, _)| k.as_str())),
        Op::List { .. } => Box::new(std::iter::empty()),
    }
}

/// The counter after adding `delta` to `current` (decimal text; missing
/// is 0).
pub(crate) fn incremented(current: Option<&[u8]>, delta: u64) -> Result<u64, String> {
    let now = match current {
        None => 0,
        Some(bytes) => std::str::from_utf8(bytes)
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or("the value is not a decimal counter")?,
    };
    now.checked_add(delta)
        .ok_or_else(|| "the counter would overflow".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_decimal_text() {
        assert_eq!(incremented(None, 3), Ok(3));
        assert_eq!(incremented(Some(b"41"), 1), Ok(42));
        assert!(incremented(Some(b"x"), 1).is_err());
        assert!(incremented(Some(b"-1"), 1).is_err());
        assert!(incremented(Some(u64::MAX.to_string().as_bytes()), 1).is_err());
    }

    #[test]
    fn urls_are_checked() {
        assert!(KeyValue::open("file:").is_err());
        assert!(KeyValue::open("sqlite:x").is_err());
        assert!(
            KeyValue::open("redis://127.0.0.1:1/0").is_ok(),
            "connected lazily"
        );
    }
}
