//! The access log's writer: the request path hands each line to a bounded queue and never
//! waits; one thread writes the queue out every 20 ms in one batch (one `write`, not one per
//! line, and no wake-up call from the request path).
//! When the sink is slower than the traffic the queue fills and further lines are dropped and
//! counted (`mcp_edge_access_log_dropped_total`), so a slow disk or a stuck log collector can
//! cost log lines but never requests.
//!
//! One writer per process (started by the first [`start`]); the line format is in
//! `proxy/access_log.rs`.

use std::fs::OpenOptions;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

/// Where lines go (`access_log.output`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    Stderr,
    Stdout,
    /// A file, opened for appending (created if missing).
    File(PathBuf),
}

impl Output {
    /// `"stderr"`, `"stdout"` or a file path.
    pub fn parse(s: &str) -> Output {
        match s {
            "stderr" => Output::Stderr,
            "stdout" => Output::Stdout,
            path => Output::File(PathBuf::from(path)),
        }
    }
}

/// A line as the request path leaves it: when the request ended, and a JSON object.
struct Line {
    at: SystemTime,
    json: Vec<u8>,
}

struct Writer {
    queue: SyncSender<Line>,
    /// Lines accepted into the queue, and lines written out (for [`flush`]).
    accepted: AtomicU64,
    written: std::sync::Arc<AtomicU64>,
}

static WRITER: OnceLock<Writer> = OnceLock::new();

/// The writer's buffer: a batch larger than this goes out in several writes.
const BUFFER_BYTES: usize = 128 * 1024;
/// How often the writer takes what is queued: a line appears at most this late, and the
/// queue must hold this long's worth of lines (16,384 lines: 0.8 s at 20,000 requests/s).
const FLUSH_EVERY: Duration = Duration::from_millis(20);
/// At most one "write failed" message per this long.
const COMPLAIN_EVERY: Duration = Duration::from_secs(60);

/// Start the process's writer (the first call wins; later calls, such as a second edge in
/// the same test process, share it). `queue_lines` bounds the lines waiting to be written.
pub fn start(output: &Output, queue_lines: usize) -> io::Result<()> {
    if WRITER.get().is_some() {
        return Ok(());
    }
    let sink = Sink::open(output)?;
    let (tx, rx) = mpsc::sync_channel(queue_lines);
    let written = std::sync::Arc::new(AtomicU64::new(0));
    let writer = Writer {
        queue: tx,
        accepted: AtomicU64::new(0),
        written: written.clone(),
    };
    if WRITER.set(writer).is_ok() {
        std::thread::Builder::new()
            .name("access-log".into())
            .spawn(move || write_out(rx, sink, &written))?;
    }
    Ok(())
}

/// Queue one line (a serialized JSON object). Never blocks: a full queue (or no writer)
/// drops the line and counts it.
pub fn submit(json: Vec<u8>) {
    let line = Line {
        at: SystemTime::now(),
        json,
    };
    let Some(w) = WRITER.get() else {
        crate::metrics::get().access_log_dropped.inc();
        return;
    };
    match w.queue.try_send(line) {
        Ok(()) => {
            w.accepted.fetch_add(1, Ordering::Relaxed);
        }
        Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
            crate::metrics::get().access_log_dropped.inc();
        }
    }
}

/// Wait (up to `patience`) until every line queued so far is written: at shutdown, so the
/// last requests' lines are not lost with the process.
pub fn flush(patience: Duration) {
    let Some(w) = WRITER.get() else { return };
    let target = w.accepted.load(Ordering::Relaxed);
    let deadline = Instant::now() + patience;
    while w.written.load(Ordering::Acquire) < target && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn write_out(rx: Receiver<Line>, sink: Sink, written: &AtomicU64) {
    let mut out = BufWriter::with_capacity(BUFFER_BYTES, sink);
    let mut last_complaint: Option<Instant> = None;
    loop {
        // The writer wakes on its own clock rather than per line: a request thread queueing
        // a line never has to wake it (no syscall on the request path), and each wake-up
        // writes everything that arrived since the last one.
        std::thread::sleep(FLUSH_EVERY);
        let mut n = 0;
        loop {
            match rx.try_recv() {
                Ok(line) => {
                    put(&mut out, &line);
                    n += 1;
                }
                Err(TryRecvError::Empty) => break,
                // Every sender is gone: never for the process-wide writer.
                Err(TryRecvError::Disconnected) => return,
            }
        }
        if n == 0 {
            continue;
        }
        if let Err(e) = out.flush() {
            // The batch is lost: count it, and say so at most once a minute (stderr may be
            // the very sink that fails).
            crate::metrics::get().access_log_dropped.inc_by(n);
            if last_complaint.is_none_or(|t| t.elapsed() >= COMPLAIN_EVERY) {
                eprintln!("mcp-edge: access log write failed, lines dropped: {e}");
                last_complaint = Some(Instant::now());
            }
            // Start the next batch clean rather than retrying a half-written one.
            out = BufWriter::with_capacity(BUFFER_BYTES, out.into_parts().0);
        }
        written.fetch_add(n, Ordering::Release);
    }
}

/// `{"ts":"<RFC 3339, ms>",` + the line without its opening brace + newline.
fn put(out: &mut impl Write, line: &Line) {
    let ts = jiff::Timestamp::try_from(line.at).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    let rest = line.json.strip_prefix(b"{").unwrap_or(&line.json);
    let sep = if rest.first() == Some(&b'}') { "" } else { "," };
    // Writes into the BufWriter only fail when a flush does, reported by `write_out`.
    let _ = write!(out, "{{\"ts\":\"{ts:.3}\"{sep}");
    let _ = out.write_all(rest);
    let _ = out.write_all(b"\n");
}

/// The destination; stderr and stdout are locked per batch so batches never interleave with
/// other writers in the process.
enum Sink {
    Stderr,
    Stdout,
    File(std::fs::File),
}

impl Sink {
    fn open(output: &Output) -> io::Result<Sink> {
        Ok(match output {
            Output::Stderr => Sink::Stderr,
            Output::Stdout => Sink::Stdout,
            Output::File(path) => Sink::File(
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?,
            ),
        })
    }
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sink::Stderr => io::stderr().lock().write(buf),
            Sink::Stdout => io::stdout().lock().write(buf),
            Sink::File(f) => f.write(buf),
        }
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            Sink::Stderr => io::stderr().lock().write_all(buf),
            Sink::Stdout => io::stdout().lock().write_all(buf),
            Sink::File(f) => f.write_all(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Sink::Stderr => io::stderr().flush(),
            Sink::Stdout => io::stdout().flush(),
            Sink::File(f) => f.flush(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_gets_its_timestamp_first_and_stays_one_json_object() {
        let mut out = Vec::new();
        let at = SystemTime::UNIX_EPOCH + Duration::from_millis(1_764_540_000_123);
        put(
            &mut out,
            &Line {
                at,
                json: br#"{"route":"/mcp","status":200}"#.to_vec(),
            },
        );
        put(
            &mut out,
            &Line {
                at,
                json: b"{}".to_vec(),
            },
        );
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            r#"{"ts":"2025-11-30T22:00:00.123Z","route":"/mcp","status":200}"#
        );
        assert_eq!(lines[1], r#"{"ts":"2025-11-30T22:00:00.123Z"}"#);
    }
}
