//! The `wasi:keyvalue` imports on a guest's store: bindings generated
//! from the interface's WIT (`wit/keyvalue`), and their host side on the
//! store's grants. Every function is async: a store's answer is awaited,
//! so the guest's fiber parks while it comes (see the module above).

use std::collections::BTreeMap;
use std::sync::Arc;

use wasmtime::component::{HasData, Linker, Resource, ResourceTable};

use super::limits::{self, LIST_PAGE, MAX_BATCH_BYTES};
use super::{KeyValue, Op, Reply};

mod generated {
    wasmtime::component::bindgen!({
        path: "wit/keyvalue",
        world: "wasi:keyvalue/imports",
        imports: { default: async | trappable },
        with: {
            "wasi:keyvalue/store.bucket": super::Bucket,
        },
        trappable_error_type: {
            "wasi:keyvalue/store.error" => super::KvError,
        },
    });
}

use generated::wasi::keyvalue::{atomics, batch, store};

/// An opened bucket: the store it names.
pub struct Bucket(KeyValue);

/// Why an operation failed, as the guest is told.
pub enum KvError {
    AccessDenied,
    Other(String),
}

impl From<wasmtime::component::ResourceTableError> for KvError {
    fn from(e: wasmtime::component::ResourceTableError) -> Self {
        KvError::Other(e.to_string())
    }
}

impl From<String> for KvError {
    fn from(e: String) -> Self {
        KvError::Other(e)
    }
}

/// The stores a component is granted, by the name a guest opens.
pub(crate) type Grants = Arc<BTreeMap<String, KeyValue>>;

/// What the imports see of a guest's store.
pub(crate) struct KvView<'a> {
    pub(crate) grants: &'a Grants,
    pub(crate) table: &'a mut ResourceTable,
}

/// The marker the generated `add_to_linker` takes.
struct HasKv;

impl HasData for HasKv {
    type Data<'a> = KvView<'a>;
}

/// Adds `wasi:keyvalue/{store,atomics,batch}` to `linker`.
pub(crate) fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    view: fn(&mut T) -> KvView<'_>,
) -> wasmtime::Result<()> {
    store::add_to_linker::<_, HasKv>(linker, view)?;
    atomics::add_to_linker::<_, HasKv>(linker, view)?;
    batch::add_to_linker::<_, HasKv>(linker, view)?;
    Ok(())
}

impl KvView<'_> {
    /// Runs `op` on the bucket's store.
    async fn run(&mut self, bucket: &Resource<Bucket>, op: Op) -> Result<Reply, KvError> {
        let store = self.table.get(bucket)?.0.clone();
        Ok(store.run(op).await?)
    }
}

fn unexpected(reply: Reply) -> KvError {
    KvError::Other(format!("the store answered {reply:?}"))
}

impl store::Host for KvView<'_> {
    async fn open(&mut self, identifier: String) -> Result<Resource<Bucket>, KvError> {
        let name = if identifier.is_empty() {
            "default"
        } else {
            identifier.as_str()
        };
        match self.grants.get(name) {
            Some(store) => Ok(self.table.push(Bucket(store.clone()))?),
            None => Err(KvError::AccessDenied),
        }
    }

    fn convert_error(&mut self, e: KvError) -> wasmtime::Result<store::Error> {
        Ok(match e {
            KvError::AccessDenied => store::Error::AccessDenied,
            KvError::Other(why) => store::Error::Other(why),
        })
    }
}

impl store::HostBucket for KvView<'_> {
    async fn get(
        &mut self,
        bucket: Resource<Bucket>,
        key: String,
    ) -> Result<Option<Vec<u8>>, KvError> {
        limits::check_key(&key)?;
        match self.run(&bucket, Op::Get(vec![key])).await? {
            Reply::Values(mut v) if v.len() == 1 => Ok(v.pop().flatten()),
            other => Err(unexpected(other)),
        }
    }

    async fn set(
        &mut self,
        bucket: Resource<Bucket>,
        key: String,
        value: Vec<u8>,
    ) -> Result<(), KvError> {
        limits::check_key(&key)?;
        limits::check_value(value.len())?;
        self.run(&bucket, Op::Set(vec![(key, value)]))
            .await
            .map(drop)
    }

    async fn delete(&mut self, bucket: Resource<Bucket>, key: String) -> Result<(), KvError> {
        limits::check_key(&key)?;
        self.run(&bucket, Op::Delete(vec![key])).await.map(drop)
    }

    async fn exists(&mut self, bucket: Resource<Bucket>, key: String) -> Result<bool, KvError> {
        limits::check_key(&key)?;
        match self.run(&bucket, Op::Exists(key)).await? {
            Reply::Exists(b) => Ok(b),
            other => Err(unexpected(other)),
        }
    }

    async fn list_keys(
        &mut self,
        bucket: Resource<Bucket>,
        cursor: Option<u64>,
    ) -> Result<store::KeyResponse, KvError> {
        let op = Op::List {
            cursor: cursor.unwrap_or(0),
            limit: LIST_PAGE,
        };
        match self.run(&bucket, op).await? {
            Reply::Keys(keys, cursor) => Ok(store::KeyResponse { keys, cursor }),
            other => Err(unexpected(other)),
        }
    }

    async fn drop(&mut self, bucket: Resource<Bucket>) -> wasmtime::Result<()> {
        self.table.delete(bucket)?;
        Ok(())
    }
}

impl atomics::Host for KvView<'_> {
    async fn increment(
        &mut self,
        bucket: Resource<Bucket>,
        key: String,
        delta: u64,
    ) -> Result<u64, KvError> {
        limits::check_key(&key)?;
        match self.run(&bucket, Op::Increment(key, delta)).await? {
            Reply::Number(n) => Ok(n),
            other => Err(unexpected(other)),
        }
    }
}

impl batch::Host for KvView<'_> {
    async fn get_many(
        &mut self,
        bucket: Resource<Bucket>,
        keys: Vec<String>,
    ) -> Result<Vec<Option<(String, Vec<u8>)>>, KvError> {
        limits::check_batch(keys.len())?;
        keys.iter().try_for_each(|k| limits::check_key(k))?;
        match self.run(&bucket, Op::Get(keys.clone())).await? {
            Reply::Values(values) if values.len() == keys.len() => Ok(keys
                .into_iter()
                .zip(values)
                .map(|(k, v)| v.map(|v| (k, v)))
                .collect()),
            other => Err(unexpected(other)),
        }
    }

    async fn set_many(
        &mut self,
        bucket: Resource<Bucket>,
        key_values: Vec<(String, Vec<u8>)>,
    ) -> Result<(), KvError> {
        limits::check_batch(key_values.len())?;
        let mut bytes = 0usize;
        for (k, v) in &key_values {
            limits::check_key(k)?;
            limits::check_value(v.len())?;
            bytes = bytes.saturating_add(k.len() + v.len());
        }
        if bytes > MAX_BATCH_BYTES {
            return Err(KvError::Other(format!(
                "{bytes} bytes in one set-many is over the limit of {MAX_BATCH_BYTES}"
            )));
        }
        self.run(&bucket, Op::Set(key_values)).await.map(drop)
    }

    async fn delete_many(
        &mut self,
        bucket: Resource<Bucket>,
        keys: Vec<String>,
    ) -> Result<(), KvError> {
        limits::check_batch(keys.len())?;
        keys.iter().try_for_each(|k| limits::check_key(k))?;
        self.run(&bucket, Op::Delete(keys)).await.map(drop)
    }
}
