//! What a new user and an operator meet first: an unwritable home, the
//! queue's flags, a cold compile cache, the startup errors of common
//! mistakes, and arguments after APP.

use std::path::PathBuf;
use std::process::{Command, Output};

mod common;

use common::{guest, metric, spindle, Served};

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("spindle-first-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The HTTP status of a GET with curl (0 if none came).
fn status(url: &str) -> u16 {
    let out = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "--max-time",
            "20",
            "-w",
            "%{http_code}",
            url,
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).parse().unwrap_or(0)
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn an_unwritable_home_leaves_the_cache_off_with_a_warning_not_a_failure() {
    // Under /proc nothing can be created, even by root (CI's user).
    let mut cmd = spindle();
    cmd.env_remove("XDG_CACHE_HOME")
        .env("HOME", "/proc/no-such-home")
        .args(["serve", "--listen", "127.0.0.1:0"]);
    let served = Served::start(cmd);
    assert_eq!(status(&served.url), 200);
    let err = served.stop();
    assert!(err.contains("compiled-code cache off"), "{err}");

    // `--cache-dir off` compiles every time, without a word about it.
    let mut cmd = spindle();
    cmd.env("HOME", "/nonexistent/home").args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--cache-dir",
        "off",
    ]);
    let served = Served::start(cmd);
    assert_eq!(status(&served.url), 200);
    let err = served.stop();
    assert!(!err.contains("cache"), "{err}");
}

#[test]
fn past_the_slots_and_the_queue_requests_get_503_at_once() {
    let mut cmd = spindle();
    cmd.args([
        "serve",
        &guest("sleep"),
        "--listen",
        "127.0.0.1:0",
        "--max-concurrent",
        "2",
        "--max-queue",
        "2",
        "--queue-timeout",
        "30",
    ]);
    let served = Served::start(cmd);
    let url = format!("{}?ms=1500", served.url);
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || status(&url))
        })
        .collect();
    let mut statuses: Vec<u16> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    statuses.sort();
    // Two run, two wait for them; the other four are refused.
    assert_eq!(statuses, [200, 200, 200, 200, 503, 503, 503, 503]);
    served.stop();
}

#[test]
fn a_cold_compile_cache_is_not_called_a_deadlock() {
    let cache = temp_dir("cold-cache");
    let out = spindle()
        .args(["run", "--cache-dir"])
        .arg(&cache)
        .arg(guest("fetch-cmd"))
        .output()
        .unwrap();
    let all = text(&out);
    assert!(all.contains("usage: fetch-cmd URL"), "{all}");
    assert!(!all.contains("deadlock"), "{all}");
    assert!(!all.contains("blocked in"), "{all}");
}

#[test]
fn common_startup_mistakes_say_what_is_wrong_and_what_to_do() {
    let dir = temp_dir("mistakes");
    let not_wasm = dir.join("notes.wasm");
    std::fs::write(&not_wasm, "hello, world\n").unwrap();
    let serve = |args: &[&str]| -> (i32, String) {
        let out = spindle()
            .arg("serve")
            .args(args)
            .args(["--listen", "127.0.0.1:0"])
            .output()
            .unwrap();
        (out.status.code().unwrap_or(-1), text(&out))
    };

    let (code, err) = serve(&[not_wasm.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("not a WebAssembly binary"), "{err}");
    assert!(!err.contains("magic"), "{err}");

    let (code, err) = serve(&[&guest("fetch-cmd")]);
    assert_eq!(code, 2);
    assert!(
        err.contains("wasi:cli command") && err.contains("spindle run"),
        "{err}"
    );

    let (code, err) = serve(&["--memory-limit", "5G"]);
    assert_eq!(code, 2);
    assert!(err.contains("64K to 4G"), "{err}");
    assert!(!err.contains("reservation"), "{err}");

    let manifest = dir.join("spindle.toml");
    std::fs::write(
        &manifest,
        "[[component]]\nname = \"gone\"\n\npath = \"gone.wasm\"\nroutes = [\"/...\"]\n",
    )
    .unwrap();
    let (code, err) = serve(&["--app", manifest.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(
        err.contains("spindle.toml: line 4: component \"gone\""),
        "{err}"
    );

    // And the other way round: a wasi:http component given to `run`.
    let out = spindle().args(["run", &guest("hello")]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("serve it"), "{}", text(&out));
}

#[test]
fn everything_after_app_goes_to_the_guest() {
    // `--help` after APP is the guest's argument (its URL here), not a
    // request for spindle's help.
    let out = spindle()
        .args(["run", &guest("fetch-cmd"), "--help"])
        .output()
        .unwrap();
    let all = text(&out);
    assert!(!all.contains("Usage: spindle"), "{all}");
    assert!(all.contains("fetch failed"), "{all}");
    assert_eq!(out.status.code(), Some(1), "{all}");

    // `--env` after APP is the guest's too: spindle sets no variable.
    let out = spindle()
        .args(["run", &guest("fetch-cmd"), "--env", "GREETING=hi"])
        .output()
        .unwrap();
    let all = text(&out);
    assert!(!all.contains("greeting: hi"), "{all}");
    // Before APP it is spindle's.
    let out = spindle()
        .args(["run", "--env", "GREETING=hi", &guest("fetch-cmd"), "x"])
        .output()
        .unwrap();
    assert!(text(&out).contains("greeting: hi"), "{}", text(&out));
}

#[test]
fn a_component_on_the_command_line_wins_over_spindle_app_from_the_environment() {
    let dir = temp_dir("app-env");
    let manifest = dir.join("spindle.toml");
    std::fs::write(
        &manifest,
        "[[component]]\nname = \"sleepy\"\npath = \"missing.wasm\"\nroutes = [\"/...\"]\n",
    )
    .unwrap();
    let mut cmd = spindle();
    cmd.env("SPINDLE_APP", &manifest)
        .args(["serve", &guest("hello"), "--listen", "127.0.0.1:0"]);
    let served = Served::start(cmd);
    assert_eq!(status(&served.url), 200);
    served.stop();

    // Both on the command line: a usage error.
    let out = spindle()
        .args(["serve", &guest("hello"), "--app"])
        .arg(&manifest)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out).contains("cannot be used together"),
        "{}",
        text(&out)
    );
}

/// Clients that give up on slow requests stop their guests: the slots come
/// back at once (not when the guests would have finished), the requests
/// are counted as `client_closed`, and a drain does not wait for them —
/// in both worlds.
#[test]
fn a_client_that_leaves_frees_its_guest_and_its_slot() {
    for app in ["sleep", "sleep-p3"] {
        let admin_port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let admin = format!("http://127.0.0.1:{admin_port}/");
        let mut cmd = spindle();
        cmd.args(["serve", &guest(app), "--listen", "127.0.0.1:0"])
            .args(["--admin", &format!("127.0.0.1:{admin_port}")])
            .args(["--max-concurrent", "5", "--max-queue", "0"]);
        let served = Served::start(cmd);
        // Five clients that wait half a second for an 8 s answer.
        let started = std::time::Instant::now();
        let leavers: Vec<_> = (0..5)
            .map(|_| {
                let url = format!("{}?ms=8000", served.url);
                std::thread::spawn(move || {
                    Command::new("curl")
                        .args(["-s", "-o", "/dev/null", "-m", "0.5", &url])
                        .status()
                        .unwrap()
                })
            })
            .collect();
        for l in leavers {
            l.join().unwrap();
        }
        let running = || metric(&admin, "spindle_guest_requests_running", &[]);
        while running() > 0.0 {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(4),
                "{app}: guests still running after their clients left"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        // The slots are free: a request now is served, not refused.
        assert_eq!(status(&format!("{}?ms=1", served.url)), 200, "{app}");
        let closed = metric(
            &admin,
            "spindle_guest_outcomes_total",
            &[("outcome", "client_closed")],
        );
        assert_eq!(closed, 5.0, "{app}");
        let err = served.stop();
        assert!(err.contains("client closed the connection"), "{app}: {err}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(7),
            "{app}: the drain waited for abandoned guests"
        );
    }
}
