//! Files, through the blocking pool: regular files are always "ready" to
//! epoll, so a read that has to go to disk would stop the worker. Each call
//! here runs the std call on a pool thread while the fiber waits; on a
//! plain thread it is just the std call.
//!
//! ```
//! spindle::run(|| {
//!     let dir = std::env::temp_dir().join(format!("spindle-fs-doc-{}", std::process::id()));
//!     spindle::fs::create_dir_all(&dir).unwrap();
//!     let path = dir.join("hello.txt");
//!     spindle::fs::write(&path, "hello").unwrap();
//!     assert_eq!(spindle::fs::read_to_string(&path).unwrap(), "hello");
//!     spindle::fs::remove_dir_all(&dir).unwrap();
//! });
//! ```

use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::blocking;

fn owned(p: &Path) -> PathBuf {
    p.to_path_buf()
}

/// Reads a whole file (`std::fs::read`).
pub fn read(path: impl AsRef<Path>) -> io::Result<Vec<u8>> {
    let p = owned(path.as_ref());
    blocking::run(move || std::fs::read(p))
}

/// Reads a whole file as UTF-8 (`std::fs::read_to_string`).
pub fn read_to_string(path: impl AsRef<Path>) -> io::Result<String> {
    let p = owned(path.as_ref());
    blocking::run(move || std::fs::read_to_string(p))
}

/// Writes a whole file, creating or truncating it (`std::fs::write`).
pub fn write(path: impl AsRef<Path>, contents: impl AsRef<[u8]>) -> io::Result<()> {
    let p = owned(path.as_ref());
    let data = contents.as_ref().to_vec();
    blocking::run(move || std::fs::write(p, data))
}

/// `std::fs::metadata`.
pub fn metadata(path: impl AsRef<Path>) -> io::Result<std::fs::Metadata> {
    let p = owned(path.as_ref());
    blocking::run(move || std::fs::metadata(p))
}

/// `std::fs::create_dir`.
pub fn create_dir(path: impl AsRef<Path>) -> io::Result<()> {
    let p = owned(path.as_ref());
    blocking::run(move || std::fs::create_dir(p))
}

/// `std::fs::create_dir_all`.
pub fn create_dir_all(path: impl AsRef<Path>) -> io::Result<()> {
    let p = owned(path.as_ref());
    blocking::run(move || std::fs::create_dir_all(p))
}

/// `std::fs::remove_file`.
pub fn remove_file(path: impl AsRef<Path>) -> io::Result<()> {
    let p = owned(path.as_ref());
    blocking::run(move || std::fs::remove_file(p))
}

/// `std::fs::remove_dir`.
pub fn remove_dir(path: impl AsRef<Path>) -> io::Result<()> {
    let p = owned(path.as_ref());
    blocking::run(move || std::fs::remove_dir(p))
}

/// `std::fs::remove_dir_all`.
pub fn remove_dir_all(path: impl AsRef<Path>) -> io::Result<()> {
    let p = owned(path.as_ref());
    blocking::run(move || std::fs::remove_dir_all(p))
}

/// `std::fs::rename`.
pub fn rename(from: impl AsRef<Path>, to: impl AsRef<Path>) -> io::Result<()> {
    let (a, b) = (owned(from.as_ref()), owned(to.as_ref()));
    blocking::run(move || std::fs::rename(a, b))
}

/// `std::fs::copy`.
pub fn copy(from: impl AsRef<Path>, to: impl AsRef<Path>) -> io::Result<u64> {
    let (a, b) = (owned(from.as_ref()), owned(to.as_ref()));
    blocking::run(move || std::fs::copy(a, b))
}

/// The entries of a directory (`std::fs::read_dir`, collected).
pub fn read_dir(path: impl AsRef<Path>) -> io::Result<Vec<std::fs::DirEntry>> {
    let p = owned(path.as_ref());
    blocking::run(move || std::fs::read_dir(p)?.collect())
}

/// An open file whose reads, writes and seeks run on the blocking pool.
///
/// ```
/// use std::io::{Read, Seek, SeekFrom, Write};
/// spindle::run(|| {
///     let path = std::env::temp_dir().join(format!("spindle-file-doc-{}", std::process::id()));
///     let mut f = spindle::fs::File::create(&path).unwrap();
///     f.write_all(b"0123456789").unwrap();
///     f.seek(SeekFrom::Start(4)).unwrap();
///     let mut f = spindle::fs::File::open(&path).unwrap();
///     f.seek(SeekFrom::Start(4)).unwrap();
///     let mut rest = String::new();
///     f.read_to_string(&mut rest).unwrap();
///     assert_eq!(rest, "456789");
///     spindle::fs::remove_file(&path).unwrap();
/// });
/// ```
#[derive(Debug, Clone)]
pub struct File {
    inner: Arc<std::fs::File>,
}

impl File {
    /// Opens a file read-only (`std::fs::File::open`).
    pub fn open(path: impl AsRef<Path>) -> io::Result<File> {
        let p = owned(path.as_ref());
        blocking::run(move || std::fs::File::open(p)).map(File::from)
    }

    /// Creates or truncates a file for writing (`std::fs::File::create`).
    pub fn create(path: impl AsRef<Path>) -> io::Result<File> {
        let p = owned(path.as_ref());
        blocking::run(move || std::fs::File::create(p)).map(File::from)
    }

    /// Opens with explicit options.
    pub fn open_with(path: impl AsRef<Path>, options: &std::fs::OpenOptions) -> io::Result<File> {
        let p = owned(path.as_ref());
        let o = options.clone();
        blocking::run(move || o.open(p)).map(File::from)
    }

    /// `std::fs::File::metadata`.
    pub fn metadata(&self) -> io::Result<std::fs::Metadata> {
        let f = self.inner.clone();
        blocking::run(move || f.metadata())
    }

    /// `std::fs::File::sync_all`.
    pub fn sync_all(&self) -> io::Result<()> {
        let f = self.inner.clone();
        blocking::run(move || f.sync_all())
    }

    /// `std::fs::File::set_len`.
    pub fn set_len(&self, size: u64) -> io::Result<()> {
        let f = self.inner.clone();
        blocking::run(move || f.set_len(size))
    }
}

impl From<std::fs::File> for File {
    fn from(f: std::fs::File) -> File {
        File { inner: Arc::new(f) }
    }
}

impl Read for File {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let f = self.inner.clone();
        let want = buf.len();
        let data = blocking::run(move || {
            let mut tmp = vec![0u8; want];
            let n = (&*f).read(&mut tmp)?;
            tmp.truncate(n);
            Ok::<_, io::Error>(tmp)
        })?;
        buf[..data.len()].copy_from_slice(&data);
        Ok(data.len())
    }
}

impl Write for File {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let f = self.inner.clone();
        let data = buf.to_vec();
        blocking::run(move || (&*f).write(&data))
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Seek for File {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        let f = self.inner.clone();
        blocking::run(move || (&*f).seek(pos))
    }
}
