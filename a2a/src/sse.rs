//! A bounded Server-Sent Events decoder (the WHATWG event-stream format).
//!
//! Lines end in LF, CR or CRLF; `data:` lines of one event are joined with LF; `event:` sets
//! the event type; comments (`:` lines, the server's keep-alives) and `id:`/`retry:` are
//! skipped; a blank line dispatches the event. A line over `max_line` bytes or an event whose
//! data is over `max_event` bytes is an error, so a server that never sends a newline cannot
//! make the client buffer without end.

use std::collections::VecDeque;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, empty when absent (the default type "message").
    pub event: String,
    /// The data lines joined with LF.
    pub data: String,
}

/// The stream broke a bound or is not UTF-8.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SseError {
    /// A line longer than the limit.
    #[error("SSE line over {0} bytes")]
    LineTooLong(usize),
    /// An event's data over the limit.
    #[error("SSE event over {0} bytes")]
    EventTooLarge(usize),
    /// A line that is not UTF-8.
    #[error("SSE line is not UTF-8")]
    NotUtf8,
}

/// The decoder's state between chunks.
#[derive(Debug)]
pub struct Decoder {
    max_line: usize,
    max_event: usize,
    line: Vec<u8>,
    skip_lf: bool,
    event: String,
    data: String,
    has_data: bool,
}

impl Decoder {
    /// A decoder with these bounds.
    pub fn new(max_line: usize, max_event: usize) -> Self {
        Decoder {
            max_line,
            max_event,
            line: Vec::new(),
            skip_lf: false,
            event: String::new(),
            data: String::new(),
            has_data: false,
        }
    }

    /// Feed a chunk; completed events are appended to `out`.
    pub fn push(&mut self, chunk: &[u8], out: &mut VecDeque<SseEvent>) -> Result<(), SseError> {
        for &b in chunk {
            if self.skip_lf {
                self.skip_lf = false;
                if b == b'\n' {
                    continue;
                }
            }
            match b {
                b'\n' | b'\r' => {
                    self.skip_lf = b == b'\r';
                    let line = std::mem::take(&mut self.line);
                    self.line_done(&line, out)?;
                }
                _ => {
                    if self.line.len() >= self.max_line {
                        return Err(SseError::LineTooLong(self.max_line));
                    }
                    self.line.push(b);
                }
            }
        }
        Ok(())
    }

    fn line_done(&mut self, line: &[u8], out: &mut VecDeque<SseEvent>) -> Result<(), SseError> {
        if line.is_empty() {
            if self.has_data {
                let mut data = std::mem::take(&mut self.data);
                if data.ends_with('\n') {
                    data.pop();
                }
                out.push_back(SseEvent {
                    event: std::mem::take(&mut self.event),
                    data,
                });
            }
            self.event.clear();
            self.has_data = false;
            return Ok(());
        }
        let line = std::str::from_utf8(line).map_err(|_| SseError::NotUtf8)?;
        if line.starts_with(':') {
            return Ok(());
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "data" => {
                if self.data.len() + value.len() + 1 > self.max_event {
                    return Err(SseError::EventTooLarge(self.max_event));
                }
                self.data.push_str(value);
                self.data.push('\n');
                self.has_data = true;
            }
            "event" => {
                self.event = value.chars().take(64).collect();
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(chunks: &[&[u8]]) -> Result<Vec<SseEvent>, SseError> {
        let mut d = Decoder::new(64, 128);
        let mut out = VecDeque::new();
        for c in chunks {
            d.push(c, &mut out)?;
        }
        Ok(out.into_iter().collect())
    }

    #[test]
    fn events_across_chunks_and_line_endings() {
        let evs = decode(&[
            b": keep-alive\n\nda",
            b"ta: {\"a\":1}\r",
            b"\n\r\nevent: error\ndata: x\ndata: y\n\n",
        ])
        .unwrap();
        assert_eq!(evs.len(), 2);
        assert_eq!(evs[0].data, "{\"a\":1}");
        assert_eq!(evs[1].event, "error");
        assert_eq!(evs[1].data, "x\ny");
    }

    #[test]
    fn bounds() {
        assert_eq!(decode(&[&[b'a'; 65]]), Err(SseError::LineTooLong(64)));
        let mut many = Vec::new();
        for _ in 0..5 {
            many.extend_from_slice(b"data: 0123456789012345678901234567890123456789\n");
        }
        assert_eq!(decode(&[&many]), Err(SseError::EventTooLarge(128)));
    }
}
