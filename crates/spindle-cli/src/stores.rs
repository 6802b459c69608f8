//! The key-value stores of a process: each defined once (by the
//! manifest's `[keyvalue]` table or `--keyvalue NAME=URL`, the command
//! line winning), opened once when first granted, and shared by every
//! component granted it. A store named `default` that nobody defined is
//! the embedded one under the data directory.

use std::collections::BTreeMap;
use std::path::PathBuf;

use spindle_wasm::{HostConfig, KeyValue};

/// The stores defined, and those opened so far.
pub(crate) struct Stores {
    urls: BTreeMap<String, String>,
    opened: BTreeMap<String, KeyValue>,
    data_dir: Option<PathBuf>,
}

impl Stores {
    /// The manifest's stores (`file:` paths already resolved against its
    /// directory), then the command line's on top.
    pub(crate) fn new(
        manifest: BTreeMap<String, String>,
        cli: &[(String, String)],
        data_dir: Option<PathBuf>,
    ) -> Stores {
        let mut urls = manifest;
        urls.extend(cli.iter().cloned());
        Stores {
            urls,
            opened: BTreeMap::new(),
            data_dir: data_dir.or_else(default_data_dir),
        }
    }

    /// Every store defined, with `default` (defined or not).
    pub(crate) fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.urls.keys().cloned().collect();
        if !self.urls.contains_key("default") {
            names.push("default".into());
        }
        names
    }

    /// `config` with the stores `names` granted, each opened if it was not.
    pub(crate) fn grant(
        &mut self,
        mut config: HostConfig,
        names: &[String],
    ) -> Result<HostConfig, String> {
        for name in names {
            config = config.keyvalue(name, self.open(name)?);
        }
        Ok(config)
    }

    fn open(&mut self, name: &str) -> Result<KeyValue, String> {
        if let Some(store) = self.opened.get(name) {
            return Ok(store.clone());
        }
        let url = match self.urls.get(name) {
            Some(url) => url.clone(),
            None if name == "default" => {
                let dir = self.data_dir.as_ref().ok_or(
                    "no data directory for the default key-value store: give --data-dir, or \
                     --keyvalue default=URL",
                )?;
                format!("file:{}", dir.join("default.redb").display())
            }
            None => return Err(format!("no key-value store named {name:?} is defined")),
        };
        let store = KeyValue::open(&url).map_err(|e| format!("key-value store {name:?}: {e}"))?;
        tracing::info!(store = name, url = %redacted(&url), "key-value store opened");
        self.opened.insert(name.to_string(), store.clone());
        Ok(store)
    }
}

/// `url` without a password (`redis://:secret@host` → `redis://:***@host`).
fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let user = &url[scheme + 3..at];
            match user.split_once(':') {
                Some((name, _)) => format!("{}{name}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

/// `$XDG_DATA_HOME/spindle`, else `$HOME/.local/share/spindle` (absolute
/// paths only, as the XDG base directory rules say).
fn default_data_dir() -> Option<PathBuf> {
    let absolute = |var: &str| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    let base =
        absolute("XDG_DATA_HOME").or_else(|| absolute("HOME").map(|h| h.join(".local/share")))?;
    Some(base.join("spindle"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_stay_out_of_the_log() {
        assert_eq!(redacted("redis://:pw@h:6379/0"), "redis://:***@h:6379/0");
        assert_eq!(redacted("redis://u:pw@h/1"), "redis://u:***@h/1");
        assert_eq!(redacted("redis://h:6379/0"), "redis://h:6379/0");
        assert_eq!(redacted("file:/a@b"), "file:/a@b");
    }

    #[test]
    fn the_command_line_wins_and_default_is_always_there() {
        let manifest = BTreeMap::from([("a".to_string(), "memory:".to_string())]);
        let cli = [("a".to_string(), "redis://x/0".to_string())];
        let s = Stores::new(manifest, &cli, Some("/nonexistent".into()));
        assert_eq!(s.urls["a"], "redis://x/0");
        assert_eq!(s.names(), ["a", "default"]);
    }
}
