//! The shipped deployment, run the way a container runtime runs it.
//!
//! No cluster or base image is reachable here, but the part of a
//! deployment that breaks most (the command the container really runs) is
//! ours to run: the `Dockerfile`'s `ENTRYPOINT`, `CMD`, `ENV`, `USER` home
//! and `COPY`s, then the Deployment's `command`/`args`, `env` and volume
//! mounts, composed as Kubernetes composes them, over a read-only copy of
//! the image's files. Only the addresses change (127.0.0.1, free ports) and
//! the image's absolute paths move under a temporary root.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{curl, stderr, SPINDLE};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// What the image's last stage says about how it runs.
#[derive(Default, Debug)]
struct Image {
    entrypoint: Vec<String>,
    cmd: Vec<String>,
    env: Vec<(String, String)>,
    /// `COPY` sources (repository paths) and their destinations.
    files: Vec<(String, String)>,
    /// The home directory of the user the image runs as.
    home: Option<String>,
}

/// Reads the `Dockerfile`'s final stage (exec-form `ENTRYPOINT`/`CMD`,
/// `ENV` in `K=V` form, `COPY` from the build context, the `useradd
/// --home-dir` of its user).
fn image() -> Image {
    let text = std::fs::read_to_string(repo().join("Dockerfile")).unwrap();
    // Continuation lines joined, comments dropped.
    let mut lines = Vec::new();
    let mut cur = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with('#') {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(part) => cur.push_str(part),
            None => {
                cur.push_str(line);
                lines.push(std::mem::take(&mut cur));
            }
        }
    }
    let last_from = lines.iter().rposition(|l| l.starts_with("FROM ")).unwrap();
    let mut img = Image::default();
    let exec = |rest: &str| -> Vec<String> {
        serde_json::from_str(rest.trim()).unwrap_or_else(|e| panic!("not exec form {rest:?}: {e}"))
    };
    for line in &lines[last_from..] {
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        match word {
            "ENTRYPOINT" => img.entrypoint = exec(rest),
            "CMD" => img.cmd = exec(rest),
            "ENV" => {
                for kv in rest.split_whitespace() {
                    let (k, v) = kv.split_once('=').expect("ENV in K=V form");
                    img.env.push((k.to_string(), v.to_string()));
                }
            }
            "COPY" if !rest.starts_with("--") => {
                let parts: Vec<&str> = rest.split_whitespace().collect();
                img.files.push((parts[0].to_string(), parts[1].to_string()));
            }
            "RUN" if rest.contains("useradd") => {
                let words: Vec<&str> = rest.split_whitespace().collect();
                let at = words.iter().position(|w| *w == "--home-dir").unwrap();
                img.home = Some(words[at + 1].to_string());
            }
            _ => {}
        }
    }
    img
}

fn yaml(path: &str) -> serde_yaml::Value {
    let text = std::fs::read_to_string(repo().join(path)).unwrap();
    serde_yaml::from_str(&text).unwrap()
}

fn strings(v: &serde_yaml::Value) -> Option<Vec<String>> {
    v.as_sequence().map(|s| {
        s.iter()
            .map(|x| x.as_str().expect("a string").to_string())
            .collect()
    })
}

/// A CPU quantity (`"2"`, `500m`) in cores.
fn cores(q: &str) -> f64 {
    match q.strip_suffix('m') {
        Some(milli) => milli.parse::<f64>().unwrap() / 1000.0,
        None => q.parse().unwrap(),
    }
}

/// The command and environment of the Deployment's container over the
/// image, as Kubernetes composes them: `command` replaces `ENTRYPOINT` (and
/// drops `CMD`), `args` replaces `CMD`; the container's `env` is laid over
/// the image's.
fn compose(img: &Image, c: &serde_yaml::Value) -> (Vec<String>, BTreeMap<String, String>) {
    let command = strings(&c["command"]);
    let args = strings(&c["args"]);
    let argv = match (command, args) {
        (Some(cmd), Some(args)) => [cmd, args].concat(),
        (Some(cmd), None) => cmd,
        (None, Some(args)) => [img.entrypoint.clone(), args].concat(),
        (None, None) => [img.entrypoint.clone(), img.cmd.clone()].concat(),
    };
    let mut env: BTreeMap<String, String> = img.env.iter().cloned().collect();
    if let Some(home) = &img.home {
        env.insert("HOME".into(), home.clone());
    }
    for e in c["env"].as_sequence().into_iter().flatten() {
        let name = e["name"].as_str().unwrap().to_string();
        let value = if let Some(v) = e["value"].as_str() {
            v.to_string()
        } else {
            let field = &e["valueFrom"]["resourceFieldRef"];
            let resource = field["resource"].as_str().expect("a resourceFieldRef");
            let (kind, name) = resource.split_once('.').unwrap();
            let quantity = c["resources"][kind][name].as_str().unwrap();
            let divisor = field["divisor"].as_str().map_or(1.0, cores);
            // The kubelet rounds the quotient up.
            format!("{}", (cores(quantity) / divisor).ceil() as u64)
        };
        env.insert(name, value);
    }
    (argv, env)
}

/// Moves an absolute path of the image under `root`.
fn rooted(root: &Path, p: &str) -> String {
    root.join(p.trim_start_matches('/'))
        .to_string_lossy()
        .into_owned()
}

/// Builds the container's filesystem under `root`: the image's `COPY`s,
/// then the volume mounts (a ConfigMap's key, an `emptyDir`); all but the
/// mounts read-only, as `readOnlyRootFilesystem` makes them.
fn filesystem(root: &Path, img: &Image, pod: &serde_yaml::Value, c: &serde_yaml::Value) {
    for (src, dst) in &img.files {
        let to = PathBuf::from(rooted(root, dst));
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(repo().join(src), &to).unwrap();
    }
    if let Some(home) = &img.home {
        std::fs::create_dir_all(rooted(root, home)).unwrap();
    }
    let configmap = yaml("deploy/kubernetes/configmap.yaml");
    let mut writable = Vec::new();
    for m in c["volumeMounts"].as_sequence().into_iter().flatten() {
        let name = m["name"].as_str().unwrap();
        let at = PathBuf::from(rooted(root, m["mountPath"].as_str().unwrap()));
        let volume = pod["volumes"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|v| v["name"].as_str() == Some(name))
            .unwrap_or_else(|| panic!("no volume {name}"));
        if volume["configMap"].is_mapping() {
            assert_eq!(
                volume["configMap"]["name"].as_str(),
                configmap["metadata"]["name"].as_str(),
                "the Deployment mounts the ConfigMap we ship"
            );
            let key = m["subPath"].as_str().expect("a subPath mount");
            std::fs::create_dir_all(at.parent().unwrap()).unwrap();
            let data = configmap["data"][key].as_str().unwrap();
            std::fs::write(&at, data).unwrap();
        } else if volume["emptyDir"].is_mapping() {
            std::fs::create_dir_all(&at).unwrap();
            writable.push(at);
        } else {
            panic!("volume {name}: only configMap and emptyDir are run here");
        }
    }
    if c["securityContext"]["readOnlyRootFilesystem"].as_bool() == Some(true) {
        read_only(root, &writable);
    }
}

/// Makes every directory under `dir` read-only except `keep`.
fn read_only(dir: &Path, keep: &[PathBuf]) {
    use std::os::unix::fs::PermissionsExt;
    if keep.iter().any(|k| k == dir) {
        return;
    }
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            read_only(&path, keep);
        }
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o555)).unwrap();
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_deployments_container_starts_serves_and_answers_its_probes() {
    let img = image();
    let deployment = yaml("deploy/kubernetes/deployment.yaml");
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let (argv, env) = compose(&img, container);
    assert_eq!(argv[0], "spindle", "the image runs the spindle binary");

    let root = std::env::temp_dir().join(format!("spindle-deploy-{}", std::process::id()));
    if root.exists() {
        read_only_undo(&root);
        std::fs::remove_dir_all(&root).unwrap();
    }
    std::fs::create_dir_all(&root).unwrap();
    filesystem(&root, &img, pod, container);

    // The container's ports, by name, from its declared containerPorts.
    let port_of = |name: &str| -> u16 {
        container["ports"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|p| p["name"].as_str() == Some(name))
            .and_then(|p| p["containerPort"].as_u64())
            .unwrap_or_else(|| panic!("no port {name}")) as u16
    };
    let (app_port, admin_port) = (port_of("http"), port_of("admin"));
    let (app_local, admin_local) = (free_port(), free_port());
    // The image's addresses on 127.0.0.1 and free ports; its absolute
    // paths under the temporary root.
    let localize = |v: &str| -> String {
        let v = v
            .replace(
                &format!("0.0.0.0:{app_port}"),
                &format!("127.0.0.1:{app_local}"),
            )
            .replace(
                &format!("0.0.0.0:{admin_port}"),
                &format!("127.0.0.1:{admin_local}"),
            );
        if v.starts_with('/') {
            rooted(&root, &v)
        } else {
            v
        }
    };
    let mut cmd = Command::new(SPINDLE);
    cmd.args(argv[1..].iter().map(|a| localize(a)));
    cmd.env_clear();
    cmd.env("PATH", std::env::var_os("PATH").unwrap_or_default());
    for (k, v) in &env {
        cmd.env(k, localize(v));
    }
    let mut child = Killed(
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // Kept open to the end: the server prints more lines (the admin
    // address), and a closed pipe would fail its writes.
    let mut out = BufReader::new(child.0.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    if first.is_empty() {
        let _ = child.0.wait();
        let err = stderr(&mut child.0);
        panic!("the container's command exited at start: {argv:?}\n{env:?}\n{err}");
    }

    let probe = |p: &serde_yaml::Value| -> String {
        let get = &p["httpGet"];
        let port = match &get["port"] {
            serde_yaml::Value::String(name) => port_of(name),
            n => n.as_u64().unwrap() as u16,
        };
        assert_eq!(port, admin_port, "the probes ask the admin listener");
        format!(
            "http://127.0.0.1:{admin_local}{}",
            get["path"].as_str().unwrap()
        )
    };
    let readiness = probe(&container["readinessProbe"]);
    let liveness = probe(&container["livenessProbe"]);
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        if curl(&readiness, &[]).0 == 200 {
            break;
        }
        assert!(Instant::now() < until, "never ready at {readiness}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(curl(&liveness, &[]).0, 200, "{liveness}");
    let (status, body) = curl(&format!("http://127.0.0.1:{app_local}/"), &[]);
    assert_eq!((status, body.trim()), (200, "Hello, World!"));

    drop(child);
    drop(out);
    read_only_undo(&root);
    let _ = std::fs::remove_dir_all(&root);
}

/// Makes the tree writable again, to remove it.
fn read_only_undo(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755));
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.path().is_dir() {
                read_only_undo(&entry.path());
            }
        }
    }
}
