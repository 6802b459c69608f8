//! Replays the fuzz targets' seed corpus (`fuzz/corpus/`) on stable, so CI
//! runs every input the fuzzers were seeded with or have found, without
//! nightly.
//!
//! A file's name says what the codec must make of it: `ok-<n>-…` reads `n`
//! messages and refuses nothing; `refused-<n>-…` reads `n` messages and
//! then refuses the next (a 400 for a request). Any other name (an input a
//! fuzz run found) must only not panic.

use std::path::Path;

use spindle_http::fuzzing::{self, Outcome};

fn replay(target: &str, run: fn(&[u8]) -> Outcome) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no corpus in {}", dir.display());
    for path in files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let input = std::fs::read(&path).unwrap();
        let got = run(&input);
        let mut parts = name.splitn(3, '-');
        let (kind, count) = (
            parts.next(),
            parts.next().and_then(|n| n.parse::<usize>().ok()),
        );
        match (kind, count) {
            (Some("ok"), Some(n)) => assert!(
                got.messages == n && got.refused.is_none(),
                "{target}/{name}: expected {n} messages, got {got:?}"
            ),
            (Some("refused"), Some(n)) => assert!(
                got.messages == n && got.refused.is_some(),
                "{target}/{name}: expected {n} messages then a refusal, got {got:?}"
            ),
            _ => {} // found by a fuzz run: not panicking is the check
        }
    }
}

#[test]
fn the_request_corpus_parses_as_its_names_say() {
    replay("request_head", fuzzing::request);
}

#[test]
fn the_response_corpus_parses_as_its_names_say() {
    replay("response_head", fuzzing::response);
}

#[test]
fn the_chunked_corpus_decodes_as_its_names_say() {
    replay("chunked_body", fuzzing::chunked);
}
