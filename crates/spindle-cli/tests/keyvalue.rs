//! `spindle serve` with many components and key-value stores, as an
//! operator runs it: fifty components of one manifest in one process at
//! the default limits, and stores granted per component by the manifest.

mod common;

use common::{curl, guest, metric, spindle, temp_dir, Served};

#[test]
fn fifty_components_at_the_defaults_start_answer_and_report_their_memory() {
    let dir = temp_dir("fifty");
    let mut manifest = String::from("[keyvalue]\nshared = \"memory:\"\n");
    for i in 0..50 {
        // Both worlds, and a store for some.
        let (wasm, extra) = match i % 3 {
            0 => (guest("hello"), ""),
            1 => (guest("hello-p3"), "idle_instance_timeout = 60\n"),
            _ => (guest("kv"), "keyvalue = [\"shared\"]\n"),
        };
        manifest += &format!(
            "[[component]]\nname = \"c{i}\"\npath = \"{wasm}\"\nroutes = [\"/c{i}/...\"]\n{extra}\n"
        );
    }
    std::fs::write(dir.join("spindle.toml"), manifest).unwrap();
    let mut cmd = spindle();
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--admin",
        "127.0.0.1:0",
        "--app",
    ])
    .arg(dir.join("spindle.toml"));
    let s = Served::start(cmd);
    let admin = s.admin.clone().unwrap();
    for i in 0..50 {
        let (status, body) = match i % 3 {
            2 => curl(&format!("{}c{i}/count?store=shared", s.url), &[]),
            _ => curl(&format!("{}c{i}/", s.url), &[]),
        };
        assert_eq!(status, 200, "c{i}: {body}");
    }
    // The 16 kv components share one store: 16 increments so far.
    assert_eq!(
        curl(&format!("{}c2/count?store=shared", s.url), &[]),
        (200, "17".into())
    );
    // A WASI 0.3 instance stays alive (idle) with its memory counted; a
    // WASI 0.2 one is gone after its request, and its memory with it.
    let p3 = metric(&admin, "spindle_guest_memory_bytes", &[("component", "c1")]);
    assert!(p3 >= 65536.0, "c1 holds {p3} bytes");
    let p2 = metric(&admin, "spindle_guest_memory_bytes", &[("component", "c0")]);
    assert_eq!(p2, 0.0);
    s.stop();
}

#[test]
fn a_manifest_grants_stores_per_component_and_the_command_line_can_replace_them() {
    let dir = temp_dir("kv-manifest");
    let manifest = format!(
        "[keyvalue]\ncounter = \"file:data/counter.redb\"\n\n\
         [[component]]\nname = \"a\"\npath = \"{kv}\"\nroutes = [\"/a/...\"]\nkeyvalue = [\"counter\"]\n\n\
         [[component]]\nname = \"b\"\npath = \"{kv}\"\nroutes = [\"/b/...\"]\n",
        kv = guest("kv")
    );
    std::fs::write(dir.join("spindle.toml"), manifest).unwrap();
    let serve = |extra: &[&str]| {
        let mut cmd = spindle();
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--app"])
            .arg(dir.join("spindle.toml"))
            .args(extra);
        Served::start(cmd)
    };
    let s = serve(&[]);
    assert_eq!(
        curl(&format!("{}a/count?store=counter", s.url), &[]),
        (200, "1".into())
    );
    // `b` is granted nothing: the same store is refused to it.
    assert_eq!(
        curl(&format!("{}b/count?store=counter", s.url), &[]),
        (403, "access-denied".into())
    );
    s.stop();
    // The file is next to the manifest, and kept.
    assert!(dir.join("data/counter.redb").exists());
    let s = serve(&[]);
    assert_eq!(
        curl(&format!("{}a/count?store=counter", s.url), &[]),
        (200, "2".into())
    );
    s.stop();
    // An operator points the same name somewhere else.
    let s = serve(&["--keyvalue", "counter=memory:"]);
    assert_eq!(
        curl(&format!("{}a/count?store=counter", s.url), &[]),
        (200, "1".into())
    );
    s.stop();
}

#[test]
fn one_component_gets_the_default_store_under_the_data_directory() {
    let dir = temp_dir("kv-default");
    let mut cmd = spindle();
    cmd.args([
        "serve",
        &guest("kv"),
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
    ])
    .arg(&dir);
    let s = Served::start(cmd);
    assert_eq!(curl(&format!("{}count", s.url), &[]), (200, "1".into()));
    s.stop();
    assert!(dir.join("default.redb").exists());
    // A guest that does not use wasi:keyvalue makes no file.
    let empty = temp_dir("kv-none");
    let mut cmd = spindle();
    cmd.args([
        "serve",
        &guest("hello"),
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
    ])
    .arg(&empty);
    let s = Served::start(cmd);
    assert_eq!(curl(&s.url, &[]).0, 200);
    s.stop();
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0);
}

#[test]
fn a_bad_store_is_an_error_at_start_naming_it() {
    let mut cmd = spindle();
    cmd.args(["serve", &guest("kv"), "--listen", "127.0.0.1:0"])
        .args(["--keyvalue", "default=mysql://x"]);
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("\"default\"") && err.contains("mysql://x"),
        "{err}"
    );
}

#[test]
fn spindle_run_gives_a_command_its_stores_and_config() {
    let redis = common::Redis::start();
    redis.cli(&["SET", "atomics_key", "5"]);
    let program = |name: &str| {
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join(format!("../../guests/third-party/wasmtime-48/{name}.wasm"))
    };
    let out = spindle()
        .args(["run", "--keyvalue"])
        .arg(format!("default=redis://127.0.0.1:{}/0", redis.port))
        .arg(program("keyvalue_main"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(redis.cli(&["GET", "atomics_key"]), "6");
    let out = spindle()
        .args(["run", "--config", "hello=world"])
        .arg(program("config_get"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_second_process_on_the_same_embedded_store_is_refused_at_start() {
    let dir = temp_dir("kv-twice");
    let mut cmd = spindle();
    cmd.args([
        "serve",
        &guest("kv"),
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
    ])
    .arg(&dir);
    let first = Served::start(cmd);
    let out = spindle()
        .args([
            "serve",
            &guest("kv"),
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(&dir)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("default.redb"), "{err}");
    // The first still serves.
    assert_eq!(curl(&format!("{}count", first.url), &[]), (200, "1".into()));
    first.stop();
}

#[test]
fn each_component_reads_its_own_config_table_over_the_command_line() {
    let dir = temp_dir("config-tables");
    let program = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../guests/third-party/wasmtime-48/p2_cli_serve_config.wasm");
    let manifest = format!(
        "[[component]]\nname = \"a\"\npath = \"{p}\"\nroutes = [\"/a\"]\nconfig = {{ hello = \"from a\" }}\n\n\
         [[component]]\nname = \"b\"\npath = \"{p}\"\nroutes = [\"/b\"]\nconfig = {{ hello = \"from b\" }}\n\n\
         [[component]]\nname = \"c\"\npath = \"{p}\"\nroutes = [\"/c\"]\n",
        p = program.display()
    );
    std::fs::write(dir.join("spindle.toml"), manifest).unwrap();
    let mut cmd = spindle();
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--config",
        "hello=from the command line",
        "--app",
    ])
    .arg(dir.join("spindle.toml"));
    let s = Served::start(cmd);
    assert_eq!(curl(&format!("{}a", s.url), &[]), (200, "from a".into()));
    assert_eq!(curl(&format!("{}b", s.url), &[]), (200, "from b".into()));
    assert_eq!(
        curl(&format!("{}c", s.url), &[]),
        (200, "from the command line".into())
    );
    s.stop();
}
