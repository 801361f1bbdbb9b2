//! What the commands print: tables and JSON with hidden characters escaped, all through
//! [`line`] (the [`out!`] macro), which ends the command quietly once the reader is gone.

use std::fmt;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};

use agentnet_did::text;

/// `println!` for the commands: one line on standard output through [`line`], `?` to stop
/// when the reader is gone.
macro_rules! out {
    () => {
        $crate::cli::output::line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::cli::output::line(format_args!($($arg)*))
    };
}

/// `eprintln!` for the commands: one line on standard error through [`say_line`], which never
/// panics (`eprintln!` does when standard error is closed) and never fails the command.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::cli::output::say_line(format_args!($($arg)*))
    };
}

/// Write `args` and a newline to standard error; a closed or full standard error loses the
/// line, not the command.
pub(crate) fn say_line(args: fmt::Arguments<'_>) {
    let mut stderr = std::io::stderr().lock();
    let _ = stderr
        .write_fmt(args)
        .and_then(|()| stderr.write_all(b"\n"));
}

/// Set once standard output found its reader gone; later lines are not written.
static READER_GONE: AtomicBool = AtomicBool::new(false);

/// Standard output's reader is gone (`agentnet … | head -1` once `head` has its line): not a
/// failure, the command stops and exits 0. SIGPIPE stays ignored, as Rust sets it, so the
/// node's sockets keep getting `EPIPE` rather than killing the process.
#[derive(Debug, thiserror::Error)]
#[error("standard output is closed")]
pub(crate) struct ReaderGone;

/// Write `args` and a newline to standard output. A closed pipe is [`ReaderGone`] (and every
/// later call too); `println!` would panic there.
pub(crate) fn line(args: fmt::Arguments<'_>) -> anyhow::Result<()> {
    if READER_GONE.load(Ordering::Relaxed) {
        return Err(ReaderGone.into());
    }
    let mut stdout = std::io::stdout().lock();
    let written = stdout
        .write_fmt(args)
        .and_then(|()| stdout.write_all(b"\n"))
        .and_then(|()| stdout.flush());
    match written {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            READER_GONE.store(true, Ordering::Relaxed);
            Err(ReaderGone.into())
        }
        Err(e) => Err(anyhow::anyhow!("writing to standard output: {e}")),
    }
}

/// Whether `error` is [`ReaderGone`].
pub(crate) fn is_reader_gone(error: &anyhow::Error) -> bool {
    error.downcast_ref::<ReaderGone>().is_some()
}

pub(super) fn print_table<const N: usize>(
    header: [&str; N],
    rows: &[[String; N]],
) -> anyhow::Result<()> {
    let mut width = header.map(str::len);
    for r in rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    // Cells come from the network (DIDs, tags, addresses): escape what a terminal would obey.
    let rows: Vec<[String; N]> = rows
        .iter()
        .map(|r| std::array::from_fn(|i| text::sanitize(&r[i]).into_owned()))
        .collect();
    let rows = &rows[..];
    let row = |cells: [&str; N]| {
        let mut out = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == N {
                out.push_str(c);
            } else {
                out.push_str(&format!("{c:<w$}  ", w = width[i]));
            }
        }
        out!("{out}")
    };
    row(header)?;
    for r in rows {
        row(std::array::from_fn(|i| r[i].as_str()))?;
    }
    Ok(())
}

/// `value` as JSON for standard output, with every character a terminal would act on or hide
/// (controls, bidi overrides, zero-width characters: [`text::is_hidden`]) written as a `\u`
/// escape. serde_json escapes only C0 controls; the value read back is the same.
pub(super) fn json_text<T: serde::Serialize>(value: &T) -> anyhow::Result<String> {
    escape_hidden(serde_json::to_string_pretty(value)?)
}

/// [`json_text`] on one line.
pub(super) fn json_line<T: serde::Serialize>(value: &T) -> anyhow::Result<String> {
    escape_hidden(serde_json::to_string(value)?)
}

fn escape_hidden(raw: String) -> anyhow::Result<String> {
    // serde_json escapes every C0 control inside strings, so a raw newline or tab in its output
    // is layout between tokens, and stays.
    let hidden = |c: char| !matches!(c, '\n' | '\t' | '\r') && text::is_hidden(c);
    if !raw.chars().any(hidden) {
        return Ok(raw);
    }
    let mut out = String::with_capacity(raw.len() + 16);
    for c in raw.chars() {
        if hidden(c) {
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{u:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

/// Unix seconds (a JSON number) as RFC 3339 UTC, or an empty string.
pub(super) fn rfc3339(secs: &serde_json::Value) -> String {
    secs.as_u64().map(unix_time).unwrap_or_default()
}

/// Unix seconds as RFC 3339 UTC (`2026-12-01T16:02:35Z`).
pub(super) fn unix_time(secs: u64) -> String {
    i64::try_from(secs)
        .ok()
        .and_then(|s| chrono::DateTime::from_timestamp(s, 0))
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_default()
}

/// `secs` for people: `42 s`, `59 min`, `3 h 5 min`, `2 days 4 h`.
pub(super) fn duration(secs: u64) -> String {
    match secs {
        0..60 => format!("{secs} s"),
        60..3600 => format!("{} min", secs / 60),
        3600..86400 => match secs % 3600 / 60 {
            0 => format!("{} h", secs / 3600),
            m => format!("{} h {m} min", secs / 3600),
        },
        _ => {
            let days = match secs / 86400 {
                1 => "1 day".to_owned(),
                d => format!("{d} days"),
            };
            match secs % 86400 / 3600 {
                0 => days,
                h => format!("{days} {h} h"),
            }
        }
    }
}

/// When something expiring at Unix second `at` expires, seen at `now`: `in 59 min`, or
/// `expired`.
pub(super) fn expires_in(at: u64, now: u64) -> String {
    if at > now {
        format!("in {}", duration(at - now))
    } else {
        "expired".into()
    }
}

/// `word` as a POSIX shell reads it back: as is when it is only safe characters, else in
/// single quotes.
pub(super) fn shell_word(word: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c);
    if !word.is_empty() && word.chars().all(safe) {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod output_tests {
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn shell_words_read_back_as_given() {
        assert_eq!(shell_word("did:key:z6Mk"), "did:key:z6Mk");
        assert_eq!(shell_word("#x"), "'#x'");
        assert_eq!(shell_word("your answer"), "'your answer'");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
        assert_eq!(shell_word(""), "''");
    }

    #[test]
    fn times_for_people() {
        assert_eq!(duration(59 * 60 + 30), "59 min");
        assert_eq!(duration(5), "5 s");
        assert_eq!(duration(3 * 3600 + 300), "3 h 5 min");
        assert_eq!(duration(2 * 86400 + 4 * 3600), "2 days 4 h");
        assert_eq!(duration(3600), "1 h");
        assert_eq!(duration(86400 + 60), "1 day");
        assert_eq!(expires_in(100, 40), "in 1 min");
        assert_eq!(expires_in(100, 100), "expired");
        assert_eq!(unix_time(1_796_083_200), "2026-12-01T00:00:00Z");
        assert_eq!(rfc3339(&json!("x")), "");
    }

    #[test]
    fn json_output_escapes_what_a_terminal_would_obey_and_reads_back_the_same() {
        // An Agent Card from the network may carry terminal escapes, a right-to-left override,
        // zero-width and tag characters (U+E0001 is outside the BMP: a surrogate pair).
        let v = json!({
            "name": "pay\u{1b}[2J\u{202e}lapyap\u{200b}\u{e0001}\u{85}\u{2028}",
            "ok": "plain é 漢字 ✓"
        });
        for out in [json_text(&v).unwrap(), json_line(&v).unwrap()] {
            assert!(
                !out.chars().any(|c| c != '\n' && text::is_hidden(c)),
                "{out:?}"
            );
            assert!(
                out.contains("\\u202e") && out.contains("\\udb40\\udc01"),
                "{out}"
            );
            assert!(
                out.contains("plain é 漢字 ✓"),
                "visible text is left alone: {out}"
            );
            let back: Value = serde_json::from_str(&out).unwrap();
            assert_eq!(back, v);
        }
    }
}
