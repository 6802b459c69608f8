//! The app manifest (`spindle serve --app spindle.toml`): components, the
//! routes each answers, and each one's limits, environment and outbound
//! grants; and the router that picks a component for a path.
//!
//! ```toml
//! [[component]]
//! name = "api"
//! path = "api.wasm"              # relative to the manifest's directory
//! routes = ["/api/..."]          # a prefix route: /api and /api/anything
//! max_concurrent = 200
//! max_queue = 50                 # then 503 at once
//! queue_timeout = 2              # seconds a queued request waits
//! timeout = 5                    # seconds
//! memory_limit = "64M"
//! allow_outbound = ["example.com:443"]
//! outbound_h2c = []              # plain upstreams spoken to in HTTP/2
//! env = { MODE = "production" }
//! max_instance_concurrency = 1   # WASI 0.3: never interleave requests
//! max_instance_reuse = 64
//! keyvalue = ["default", "cache"]  # the stores it may open (wasi:keyvalue)
//! config = { greeting = "hi" }     # its wasi:config variables
//!
//! [[component]]
//! name = "site"
//! path = "site.wasm"
//! routes = ["/", "/about"]       # exact routes
//!
//! [keyvalue]                       # the stores, by name (a table of its own)
//! default = "file:data/app.redb"   # embedded, relative to the manifest
//! cache = "redis://redis:6379/0"   # shared by every replica
//! ```
//!
//! A store named `default` need not be defined: it is then the embedded
//! one under the data directory (`--data-dir`).
//!
//! A path goes to the component whose route matches it most specifically:
//! the longest route wins, and an exact route beats a prefix route of the
//! same length. Keys a component leaves out take the command line's value.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

/// A parsed, validated manifest.
#[derive(Debug)]
pub struct Manifest {
    pub components: Vec<ComponentSpec>,
    /// The key-value stores, name to URL.
    pub keyvalue: std::collections::BTreeMap<String, String>,
}

/// One `[[component]]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComponentSpec {
    pub name: String,
    /// The component file (relative paths are resolved against the
    /// manifest's directory by `Manifest::load`), with where it is written.
    pub path: Spanned<PathBuf>,
    pub routes: Vec<Spanned<String>>,
    pub max_concurrent: Option<usize>,
    pub max_queue: Option<usize>,
    pub queue_timeout: Option<f64>,
    pub fuel_limit: Option<u64>,
    pub fuel_yield: Option<u64>,
    pub memory_limit: Option<String>,
    pub timeout: Option<f64>,
    pub max_instance_reuse: Option<usize>,
    pub max_instance_concurrency: Option<usize>,
    pub idle_instance_timeout: Option<f64>,
    #[serde(default)]
    pub allow_outbound: Vec<String>,
    #[serde(default)]
    pub outbound_h2c: Vec<String>,
    #[serde(default)]
    pub env: HashMap<String, String>,
    /// The key-value stores it may open, by name.
    #[serde(default)]
    pub keyvalue: Vec<Spanned<String>>,
    /// Its `wasi:config` variables.
    #[serde(default)]
    pub config: HashMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    component: Vec<ComponentSpec>,
    #[serde(default)]
    keyvalue: std::collections::BTreeMap<String, Spanned<String>>,
}

/// A route: an exact path, or a prefix (`/api/...`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Route {
    Exact(String),
    Prefix(String),
}

impl Route {
    /// Parses `"/x"` or `"/x/..."` (`"/..."` alone: every path).
    pub fn parse(text: &str) -> Result<Route, String> {
        if !text.starts_with('/') {
            return Err(format!("route {text:?} must start with '/'"));
        }
        if let Some(prefix) = text.strip_suffix("/...") {
            return Ok(Route::Prefix(prefix.to_string()));
        }
        if text.contains("...") {
            return Err(format!("route {text:?}: '...' only at the end, as '/...'"));
        }
        Ok(Route::Exact(text.to_string()))
    }

    /// How specifically this route matches `path`: `None` if it does not.
    fn score(&self, path: &str) -> Option<(usize, bool)> {
        match self {
            Route::Exact(p) => (p == path).then_some((p.len(), true)),
            Route::Prefix(p) => {
                let matches = path == p
                    || (path.starts_with(p.as_str())
                        && (p.is_empty() || path.as_bytes().get(p.len()) == Some(&b'/')));
                matches.then_some((p.len(), false))
            }
        }
    }
}

impl std::fmt::Display for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Route::Exact(p) => f.write_str(p),
            Route::Prefix(p) => write!(f, "{p}/..."),
        }
    }
}

/// Picks a component for a path.
#[derive(Debug)]
pub struct Router {
    /// (route, component index)
    routes: Vec<(Route, usize)>,
}

impl Router {
    /// A router over `(route, component index)` pairs (no route twice:
    /// `Manifest::parse` rejects that).
    pub fn new(routes: Vec<(Route, usize)>) -> Router {
        Router { routes }
    }

    /// The index (in [`routes`](Self::routes)) of the route that matches
    /// `path` most specifically, if any.
    pub fn pick(&self, path: &str) -> Option<usize> {
        self.routes
            .iter()
            .enumerate()
            .filter_map(|(i, (r, _))| r.score(path).map(|s| (s, i)))
            .max_by_key(|(s, _)| *s)
            .map(|(_, i)| i)
    }

    /// Every (route, component index).
    pub fn routes(&self) -> &[(Route, usize)] {
        &self.routes
    }
}

/// The line (from 1) of byte `offset` of `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].lines().count().max(1)
}

impl Manifest {
    /// Reads and validates `path`: every error names the file and, where
    /// it can, the line.
    pub fn load(path: &Path) -> Result<Manifest, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut m = Manifest::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        for url in m.keyvalue.values_mut() {
            if let Some(file) = url
                .strip_prefix("file:")
                .filter(|f| Path::new(f).is_relative())
            {
                *url = format!("file:{}", base.join(file).display());
            }
        }
        for c in &mut m.components {
            let span = c.path.span();
            let file = c.path.get_mut();
            if file.is_relative() {
                *file = base.join(&*file);
            }
            // A component that is not there is the manifest's mistake:
            // named with its line, as the manifest's other errors are.
            if let Err(e) = std::fs::metadata(&*file) {
                return Err(format!(
                    "{}: line {}: component {:?}: {}: {e}",
                    path.display(),
                    line_of(&text, span.start),
                    c.name,
                    file.display()
                ));
            }
        }
        Ok(m)
    }

    /// Parses manifest text (paths left as written).
    pub fn parse(text: &str) -> Result<Manifest, String> {
        let file: File = toml::from_str(text).map_err(|e| e.to_string().trim_end().to_string())?;
        let line_of = |offset: usize| line_of(text, offset);
        if file.component.is_empty() {
            return Err("no [[component]]".into());
        }
        let mut names = HashMap::new();
        for c in &file.component {
            if names.insert(c.name.clone(), ()).is_some() {
                return Err(format!("component name {:?} is used twice", c.name));
            }
            if c.routes.is_empty() {
                return Err(format!("component {:?} has no routes", c.name));
            }
            for r in &c.routes {
                Route::parse(r.get_ref())
                    .map_err(|e| format!("line {}: {e}", line_of(r.span().start)))?;
            }
        }
        let mut keyvalue = std::collections::BTreeMap::new();
        for (name, url) in file.keyvalue {
            let known = ["file:", "redis://", "rediss://", "memory:"];
            if !known.iter().any(|k| url.get_ref().starts_with(k)) || url.get_ref() == "file:" {
                return Err(format!(
                    "line {}: key-value store {name:?}: {:?} is not file:PATH, \
                     redis://HOST:PORT/DB or memory:",
                    line_of(url.span().start),
                    url.get_ref()
                ));
            }
            keyvalue.insert(name, url.into_inner());
        }
        for c in &file.component {
            for grant in &c.keyvalue {
                let name = grant.get_ref();
                if name != "default" && !keyvalue.contains_key(name) {
                    return Err(format!(
                        "line {}: component {:?} is granted the key-value store {name:?}, \
                         which [keyvalue] does not define",
                        line_of(grant.span().start),
                        c.name
                    ));
                }
            }
        }
        let m = Manifest {
            components: file.component,
            keyvalue,
        };
        // Conflicts, named with the line of the second claim.
        let names: Vec<String> = m.components.iter().map(|c| c.name.clone()).collect();
        let mut seen: HashMap<Route, usize> = HashMap::new();
        for (i, c) in m.components.iter().enumerate() {
            for r in &c.routes {
                let route = Route::parse(r.get_ref()).expect("checked above");
                if let Some(other) = seen.insert(route.clone(), i) {
                    return Err(format!(
                        "line {}: route {route} is claimed by both {:?} and {:?}",
                        line_of(r.span().start),
                        names[other],
                        names[i]
                    ));
                }
            }
        }
        Ok(m)
    }

    /// The router over every component's routes.
    pub fn router(&self) -> Router {
        let routes = self
            .components
            .iter()
            .enumerate()
            .flat_map(|(i, c)| {
                c.routes
                    .iter()
                    .map(move |r| (Route::parse(r.get_ref()).expect("validated"), i))
            })
            .collect();
        Router::new(routes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &str = r#"
[[component]]
name = "api"
path = "api.wasm"
routes = ["/api/...", "/api/special"]

[[component]]
name = "site"
path = "site.wasm"
routes = ["/", "/api/special/deep", "/..."]
"#;

    #[test]
    fn the_longest_route_wins_and_exact_beats_prefix() {
        let m = Manifest::parse(TWO).unwrap();
        let r = m.router();
        let pick = |p: &str| {
            r.pick(p).map(|i| {
                let (route, c) = &r.routes()[i];
                (*c, route.to_string())
            })
        };
        assert_eq!(pick("/api"), Some((0, "/api/...".into())));
        assert_eq!(pick("/api/users/7"), Some((0, "/api/...".into())));
        assert_eq!(pick("/api/special"), Some((0, "/api/special".into())));
        assert_eq!(
            pick("/api/special/deep"),
            Some((1, "/api/special/deep".into()))
        );
        assert_eq!(
            pick("/apix"),
            Some((1, "/...".into())),
            "a prefix ends at a '/'"
        );
        assert_eq!(pick("/"), Some((1, "/".into())));
        assert_eq!(pick("/about"), Some((1, "/...".into())));
    }

    #[test]
    fn without_a_catch_all_an_unmatched_path_has_no_component() {
        let m = Manifest::parse(
            "[[component]]\nname = \"a\"\npath = \"a.wasm\"\nroutes = [\"/a\", \"/b/...\"]\n",
        )
        .unwrap();
        let r = m.router();
        assert!(r.pick("/c").is_none());
        assert!(r.pick("/a/x").is_none(), "an exact route is exact");
        assert!(r.pick("/b/x").is_some());
    }

    #[test]
    fn conflicts_bad_routes_and_unknown_keys_are_errors_with_the_line() {
        let conflict = "[[component]]\nname = \"a\"\npath = \"a.wasm\"\nroutes = [\"/x\"]\n\n[[component]]\nname = \"b\"\npath = \"b.wasm\"\nroutes = [\"/y\",\n  \"/x\"]\n";
        let e = Manifest::parse(conflict).unwrap_err();
        assert!(
            e.contains("line 10") && e.contains("\"a\"") && e.contains("\"b\""),
            "{e}"
        );
        let bad = "[[component]]\nname = \"a\"\npath = \"a.wasm\"\nroutes = [\"x\"]\n";
        let e = Manifest::parse(bad).unwrap_err();
        assert!(e.contains("line 4") && e.contains("must start with"), "{e}");
        let unknown =
            "[[component]]\nname = \"a\"\npath = \"a.wasm\"\nroutes = [\"/\"]\nfuel = 3\n";
        let e = Manifest::parse(unknown).unwrap_err();
        assert!(e.contains("line 5") && e.contains("fuel"), "{e}");
        let e = Manifest::parse("[[component]]\nname = 3\n").unwrap_err();
        assert!(e.contains("line 2"), "{e}");
        let dup = "[[component]]\nname = \"a\"\npath = \"a\"\nroutes = [\"/\"]\n[[component]]\nname = \"a\"\npath = \"b\"\nroutes = [\"/b\"]\n";
        assert!(Manifest::parse(dup).unwrap_err().contains("used twice"));
        assert!(Manifest::parse("").unwrap_err().contains("component"));
    }

    #[test]
    fn stores_are_defined_once_and_granted_by_name() {
        let ok = "[keyvalue]\ncache = \"redis://r:6379/0\"\n\n[[component]]\nname = \"a\"\npath = \"a.wasm\"\nroutes = [\"/\"]\nkeyvalue = [\"default\", \"cache\"]\nconfig = { k = \"v\" }\n";
        let m = Manifest::parse(ok).unwrap();
        assert_eq!(m.keyvalue["cache"], "redis://r:6379/0");
        assert_eq!(m.components[0].keyvalue.len(), 2);
        assert_eq!(m.components[0].config["k"], "v");
        let undefined = ok.replace("\"default\", \"cache\"", "\"nope\"");
        let e = Manifest::parse(&undefined).unwrap_err();
        assert!(e.contains("line 8") && e.contains("\"nope\""), "{e}");
        let bad_url = ok.replace("redis://r:6379/0", "mysql://x");
        let e = Manifest::parse(&bad_url).unwrap_err();
        assert!(e.contains("line 2") && e.contains("mysql"), "{e}");
    }

    #[test]
    fn the_shipped_manifests_parse() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let image = std::fs::read_to_string(root.join("deploy/app/spindle.toml")).unwrap();
        Manifest::parse(&image).unwrap();
        // The ConfigMaps' copies: the block under `spindle.toml: |`.
        let block = |file: &str| -> String {
            let cm = std::fs::read_to_string(root.join(file)).unwrap();
            cm.lines()
                .skip_while(|l| !l.trim_start().starts_with("spindle.toml: |"))
                .skip(1)
                .map(|l| format!("{}\n", l.trim_start()))
                .collect()
        };
        let m = Manifest::parse(&block("deploy/kubernetes/configmap.yaml")).unwrap();
        assert_eq!(m.components[0].name, "hello");
        let m = Manifest::parse(&block("deploy/kubernetes/keyvalue/configmap.yaml")).unwrap();
        assert_eq!(m.keyvalue["default"], "redis://redis:6379/0");
        assert_eq!(m.components[1].keyvalue[0].get_ref(), "default");
    }
}
