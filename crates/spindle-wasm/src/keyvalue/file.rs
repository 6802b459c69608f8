//! `file:PATH`: an embedded, durable store in one file (redb: pure Rust,
//! ACID transactions, readers that never wait for the writer; see
//! `docs/DESIGN.md`, "Key-value stores").
//!
//! The database's disk work never runs on a worker. Reads go to two
//! reader threads, each answering from a read transaction of its own.
//! Writes go to one writer thread that takes every write waiting at that
//! moment (up to [`GROUP`]) into one transaction and commits it once: a
//! thousand requests incrementing one counter share a few `fsync`s, and
//! each increment reads the value the one before it wrote, in order. An
//! operation that fails on its own (a counter that is not a number) fails
//! alone; a commit that fails fails every write in it. Answers go back
//! through one-shot channels, whose wakes make the waiting fiber runnable.

use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use futures::channel::oneshot;
use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};

use super::{incremented, Answer, Backend, Op, Pending, Reply};

/// The one table, key to value.
const TABLE: TableDefinition<&str, &[u8]> = TableDefinition::new("keyvalue");

/// The most writes committed in one transaction.
const GROUP: usize = 512;

/// How many reader threads answer reads.
const READERS: usize = 2;

type Job = (Op, oneshot::Sender<Answer>);

/// The open database and the threads that work on it.
pub(crate) struct FileStore {
    reads: Option<mpsc::Sender<Job>>,
    writes: Option<mpsc::Sender<Job>>,
    threads: Vec<JoinHandle<()>>,
}

impl FileStore {
    /// Opens (or creates) the database at `path`, creating its directory.
    pub(crate) fn open(path: &Path) -> Result<FileStore, String> {
        let named = |e: &dyn std::fmt::Display| format!("file:{}: {e}", path.display());
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| named(&e))?;
        }
        let db = Database::create(path).map_err(|e| named(&e))?;
        // The table exists from the start, so a read never finds it missing.
        let made = db.begin_write().map_err(|e| named(&e)).and_then(|w| {
            w.open_table(TABLE).map_err(|e| named(&e))?;
            w.commit().map_err(|e| named(&e))
        });
        made?;
        let db = Arc::new(db);
        let mut threads = Vec::new();
        let (reads, read_jobs) = mpsc::channel::<Job>();
        let read_jobs = Arc::new(Mutex::new(read_jobs));
        for i in 0..READERS {
            let (db, jobs) = (db.clone(), read_jobs.clone());
            threads.push(spawn(format!("spindle-kv-read-{i}"), move || {
                reader(&db, &jobs)
            })?);
        }
        let (writes, write_jobs) = mpsc::channel::<Job>();
        threads.push(spawn("spindle-kv-write".into(), move || {
            writer(&db, &write_jobs)
        })?);
        Ok(FileStore {
            reads: Some(reads),
            writes: Some(writes),
            threads,
        })
    }
}

fn spawn(name: String, f: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>, String> {
    std::thread::Builder::new()
        .name(name)
        .spawn(f)
        .map_err(|e| format!("starting the store's thread: {e}"))
}

impl Backend for FileStore {
    fn run(&self, op: Op) -> Pending {
        let to = match op {
            Op::Get(_) | Op::Exists(_) | Op::List { .. } => &self.reads,
            Op::Set(_) | Op::Delete(_) | Op::Increment(..) => &self.writes,
        };
        let (tx, rx) = oneshot::channel();
        let sent = to.as_ref().is_some_and(|to| to.send((op, tx)).is_ok());
        Box::pin(async move {
            if !sent {
                return Err("the store is closed".to_string());
            }
            rx.await
                .unwrap_or_else(|_| Err("the store's thread stopped".to_string()))
        })
    }
}

impl Drop for FileStore {
    /// Closes the database: the threads finish the jobs they hold and end,
    /// so the file may be opened again as soon as this returns.
    fn drop(&mut self) {
        self.reads.take();
        self.writes.take();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn reader(db: &Database, jobs: &Mutex<mpsc::Receiver<Job>>) {
    loop {
        let job = jobs.lock().unwrap_or_else(|e| e.into_inner()).recv();
        let Ok((op, reply)) = job else { return };
        let _ = reply.send(read(db, op).map_err(|e| format!("store: {e}")));
    }
}

fn read(db: &Database, op: Op) -> Result<Reply, Box<dyn std::error::Error>> {
    let txn = db.begin_read()?;
    let table = txn.open_table(TABLE)?;
    Ok(match op {
        Op::Get(keys) => {
            let mut values = Vec::with_capacity(keys.len());
            for k in &keys {
                values.push(table.get(k.as_str())?.map(|v| v.value().to_vec()));
            }
            Reply::Values(values)
        }
        Op::Exists(key) => Reply::Exists(table.get(key.as_str())?.is_some()),
        Op::List { cursor, limit } => {
            let skip = usize::try_from(cursor).unwrap_or(usize::MAX);
            let mut keys = Vec::new();
            for entry in table.range::<&str>(..)?.skip(skip).take(limit) {
                keys.push(entry?.0.value().to_string());
            }
            let next = skip.saturating_add(keys.len());
            let more = (next as u64) < table.len()?;
            Reply::Keys(keys, more.then_some(next as u64))
        }
        Op::Set(_) | Op::Delete(_) | Op::Increment(..) => unreachable!("writes go to the writer"),
    })
}

fn writer(db: &Database, jobs: &mpsc::Receiver<Job>) {
    while let Ok(first) = jobs.recv() {
        let mut group = vec![first];
        while group.len() < GROUP {
            match jobs.try_recv() {
                Ok(job) => group.push(job),
                Err(_) => break,
            }
        }
        let answers = commit(db, group.iter_mut().map(|(op, _)| op));
        match answers {
            Ok(answers) => {
                for ((_, reply), answer) in group.into_iter().zip(answers) {
                    let _ = reply.send(answer);
                }
            }
            Err(e) => {
                let e = format!("store: {e}");
                for (_, reply) in group {
                    let _ = reply.send(Err(e.clone()));
                }
            }
        }
    }
}

/// Applies every write in one transaction: each op's own answer, or the
/// transaction's failure (then none of them is kept).
fn commit<'a>(
    db: &Database,
    ops: impl Iterator<Item = &'a mut Op>,
) -> Result<Vec<Answer>, Box<dyn std::error::Error>> {
    let txn = db.begin_write()?;
    let mut answers = Vec::new();
    {
        let mut table = txn.open_table(TABLE)?;
        for op in ops {
            answers.push(match op {
                Op::Set(pairs) => {
                    for (k, v) in pairs.iter() {
                        table.insert(k.as_str(), v.as_slice())?;
                    }
                    Ok(Reply::Done)
                }
                Op::Delete(keys) => {
                    for k in keys.iter() {
                        table.remove(k.as_str())?;
                    }
                    Ok(Reply::Done)
                }
                Op::Increment(key, delta) => {
                    let now = table.get(key.as_str())?.map(|v| v.value().to_vec());
                    match incremented(now.as_deref(), *delta) {
                        Ok(n) => {
                            table.insert(key.as_str(), n.to_string().as_bytes())?;
                            Ok(Reply::Number(n))
                        }
                        Err(e) => Err(e),
                    }
                }
                Op::Get(_) | Op::Exists(_) | Op::List { .. } => {
                    unreachable!("reads go to the readers")
                }
            });
        }
    }
    txn.commit()?;
    Ok(answers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("spindle-kv-{name}-{}", std::process::id()))
    }

    #[test]
    fn data_outlives_the_store_and_a_second_opener_is_told() {
        let dir = temp("reopen");
        let path = dir.join("sub/store.redb");
        let s = FileStore::open(&path).unwrap();
        let run = |s: &FileStore, op| spindle::block_on(s.run(op)).unwrap();
        run(&s, Op::Set(vec![("a".into(), b"1".to_vec())]));
        assert_eq!(run(&s, Op::Increment("a".into(), 4)), Reply::Number(5));
        assert!(spindle::block_on(s.run(Op::Increment("a".into(), u64::MAX))).is_err());
        let again = FileStore::open(&path).err().expect("the file is taken");
        assert!(again.contains("store.redb"), "{again}");
        drop(s);
        let s = FileStore::open(&path).unwrap();
        assert_eq!(
            run(&s, Op::Get(vec!["a".into(), "b".into()])),
            Reply::Values(vec![Some(b"5".to_vec()), None])
        );
        assert_eq!(
            run(
                &s,
                Op::List {
                    cursor: 0,
                    limit: 10
                }
            ),
            Reply::Keys(vec!["a".into()], None)
        );
        drop(s);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
