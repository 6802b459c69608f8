//! The access log: one line per request, from the `tracing` events of
//! target `access` that `serve` emits. A layer of its own rather than
//! tracing-subscriber's general formatter, which cost about 2 µs per line
//! (timestamp conversion, every field through `fmt::Debug`): this one
//! keeps the current second's timestamp text and writes the fields it
//! knows straight into the line (`bench/RESULTS.md`, the operator
//! features).
//!
//! Human format: `2026-12-01T16:31:12.123456Z access GET /path 200 13B
//! 0.022ms component=hello`; JSON: one object with the same fields.

use std::cell::RefCell;
use std::fmt::Write as _;
use std::io::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::Layer;

/// The layer (see the module docs).
pub struct AccessLog<W> {
    json: bool,
    writer: W,
}

impl<W> AccessLog<W> {
    pub fn new(json: bool, writer: W) -> AccessLog<W> {
        AccessLog { json, writer }
    }
}

/// The fields `serve` records.
#[derive(Default)]
struct Fields {
    component: String,
    method: String,
    path: String,
    status: u64,
    bytes: Option<u64>,
    duration_ms: f64,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "component" => self.component.push_str(value),
            "path" => self.path.push_str(value),
            "method" => self.method.push_str(value),
            _ => {}
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        match field.name() {
            "status" => self.status = value,
            "bytes" => self.bytes = Some(value),
            _ => {}
        }
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        if field.name() == "duration_ms" {
            self.duration_ms = value;
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "method" {
            let _ = write!(self.method, "{value:?}");
        }
    }
}

thread_local! {
    /// This thread's line buffer and fields, reused.
    static SCRATCH: RefCell<(String, Fields)> = RefCell::new((String::new(), Fields::default()));
    /// The current second and its text, `YYYY-MM-DDTHH:MM:SS`.
    static SECOND: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
}

impl<S, W> Layer<S> for AccessLog<W>
where
    S: Subscriber,
    W: for<'a> tracing_subscriber::fmt::MakeWriter<'a> + 'static,
{
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        if event.metadata().target() != "access" {
            return;
        }
        SCRATCH.with(|scratch| {
            let (line, fields) = &mut *scratch.borrow_mut();
            line.clear();
            fields.component.clear();
            fields.method.clear();
            fields.path.clear();
            fields.bytes = None;
            event.record(fields);
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            SECOND.with(|second| {
                let (at, text) = &mut *second.borrow_mut();
                if *at != now.as_secs() {
                    *at = now.as_secs();
                    text.clear();
                    civil_time(now.as_secs(), text);
                }
                if self.json {
                    line.push_str("{\"timestamp\":\"");
                }
                line.push_str(text);
            });
            let _ = write!(line, ".{:06}Z", now.subsec_micros());
            if self.json {
                line.push_str("\",\"level\":\"INFO\",\"target\":\"access\",\"method\":");
                json_str(line, &fields.method);
                line.push_str(",\"path\":");
                json_str(line, &fields.path);
                let _ = write!(line, ",\"status\":{}", fields.status);
                if let Some(b) = fields.bytes {
                    let _ = write!(line, ",\"bytes\":{b}");
                }
                let _ = write!(line, ",\"duration_ms\":{:.3}", fields.duration_ms);
                line.push_str(",\"component\":");
                json_str(line, &fields.component);
                line.push_str("}\n");
            } else {
                let _ = write!(
                    line,
                    " access {} {} {} ",
                    fields.method, fields.path, fields.status
                );
                match fields.bytes {
                    Some(b) => {
                        let _ = write!(line, "{b}B");
                    }
                    None => line.push_str("streamed"),
                }
                let _ = writeln!(
                    line,
                    " {:.3}ms component={}",
                    fields.duration_ms, fields.component
                );
            }
            let _ = self.writer.make_writer().write_all(line.as_bytes());
        });
    }
}

/// Appends `s` as a JSON string.
fn json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `YYYY-MM-DDTHH:MM:SS` (UTC) of `secs` since the epoch (the proleptic
/// Gregorian calendar, by days since 1970-03-01).
fn civil_time(secs: u64, out: &mut String) {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let _ = write!(
        out,
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_time_matches_known_instants() {
        for (secs, want) in [
            (0, "1970-01-01T00:00:00"),
            (951_782_400, "2000-02-29T00:00:00"),
            (1_796_136_672, "2026-12-01T14:51:12"),
            (4_107_542_399, "2100-02-28T23:59:59"),
        ] {
            let mut s = String::new();
            civil_time(secs, &mut s);
            assert_eq!(s, want);
        }
    }

    #[test]
    fn json_strings_are_escaped() {
        let mut s = String::new();
        json_str(&mut s, "a\"b\\c\nd");
        assert_eq!(s, r#""a\"b\\c\u000ad""#);
    }
}
