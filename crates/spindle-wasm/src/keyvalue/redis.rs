//! `redis://HOST:PORT/DB`: a Redis server that replicas share.
//!
//! The `redis` crate's connection manager keeps one multiplexed
//! connection (many requests in flight on one socket, pipelined) and
//! makes a new one when it is lost. It runs on a tokio runtime of its own
//! with one thread; an operation is a task there, and the guest's fiber
//! waits on the task's handle, so nothing here blocks a worker. A store
//! that is down or slow is an error within [`CONNECT_TIMEOUT`] or
//! [`RESPONSE_TIMEOUT`] — never a hang — and the next operation tries to
//! connect again. Counters are Redis's own `INCRBY`, atomic across every
//! process sharing the server; `get-many` is one `MGET`, `set-many` one
//! `MSET` (atomic), `delete-many` one `DEL`, `list-keys` a `SCAN` page.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::RedisResult;

use super::{Backend, Op, Pending, Reply};

/// How long one connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long one command may wait for its answer.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// The connection and the runtime it runs on.
pub(crate) struct RedisStore {
    conn: ConnectionManager,
    runtime: Option<tokio::runtime::Runtime>,
}

impl RedisStore {
    /// Checks `url` and prepares the connection, made on first use.
    pub(crate) fn open(url: &str) -> Result<RedisStore, String> {
        let client = redis::Client::open(url).map_err(|e| format!("{url:?}: {e}"))?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("spindle-kv-redis")
            .enable_all()
            .build()
            .map_err(|e| format!("starting the Redis client's thread: {e}"))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            // One quick retry; past it the operation fails and the next
            // one starts over.
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_millis(200));
        let conn = {
            let _in = runtime.enter();
            ConnectionManager::new_lazy_with_config(client, config)
                .map_err(|e| format!("{url:?}: {e}"))?
        };
        Ok(RedisStore {
            conn,
            runtime: Some(runtime),
        })
    }
}

impl Backend for RedisStore {
    fn run(&self, op: Op) -> Pending {
        let runtime = self.runtime.as_ref().expect("taken only by drop");
        let task = runtime.spawn(answer(self.conn.clone(), op));
        Box::pin(async move {
            match task.await {
                Ok(Ok(reply)) => Ok(reply),
                Ok(Err(e)) => Err(format!("redis: {e}")),
                Err(e) => Err(format!("redis: the operation's task failed: {e}")),
            }
        })
    }
}

impl Drop for RedisStore {
    /// Stops the runtime without waiting: a drop may happen inside another
    /// runtime's context, where waiting is refused.
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

async fn answer(mut c: ConnectionManager, op: Op) -> RedisResult<Reply> {
    Ok(match op {
        Op::Get(keys) => match keys.as_slice() {
            [] => Reply::Values(Vec::new()),
            [key] => Reply::Values(vec![redis::cmd("GET").arg(key).query_async(&mut c).await?]),
            _ => Reply::Values(redis::cmd("MGET").arg(&keys).query_async(&mut c).await?),
        },
        Op::Exists(key) => {
            let n: i64 = redis::cmd("EXISTS").arg(&key).query_async(&mut c).await?;
            Reply::Exists(n > 0)
        }
        Op::Set(pairs) => {
            match pairs.as_slice() {
                [] => {}
                [(k, v)] => {
                    redis::cmd("SET")
                        .arg(k)
                        .arg(v)
                        .query_async::<()>(&mut c)
                        .await?
                }
                _ => {
                    let mut cmd = redis::cmd("MSET");
                    for (k, v) in &pairs {
                        cmd.arg(k).arg(v);
                    }
                    cmd.query_async::<()>(&mut c).await?
                }
            }
            Reply::Done
        }
        Op::Delete(keys) => {
            if !keys.is_empty() {
                redis::cmd("DEL")
                    .arg(&keys)
                    .query_async::<()>(&mut c)
                    .await?;
            }
            Reply::Done
        }
        Op::Increment(key, delta) => {
            let delta = i64::try_from(delta).map_err(|_| {
                redis::RedisError::from((
                    redis::ErrorKind::Client,
                    "an increment past 2^63-1 is more than Redis counts",
                ))
            })?;
            let n: i64 = redis::cmd("INCRBY")
                .arg(&key)
                .arg(delta)
                .query_async(&mut c)
                .await?;
            let n = u64::try_from(n).map_err(|_| {
                redis::RedisError::from((
                    redis::ErrorKind::Client,
                    "the counter is negative (another client lowered it)",
                ))
            })?;
            Reply::Number(n)
        }
        Op::List { cursor, limit } => {
            let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("COUNT")
                .arg(limit)
                .query_async(&mut c)
                .await?;
            // A guest's keys are strings; others (written by other
            // clients) are not its to list.
            let keys = keys
                .into_iter()
                .filter_map(|k| String::from_utf8(k).ok())
                .collect();
            Reply::Keys(keys, (next != 0).then_some(next))
        }
    })
}
