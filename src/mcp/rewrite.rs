//! Answers rewritten message by message on their way to the client, by the [`Transform`]s a
//! response was given (a bridged answer converted to the client's revision, list answers
//! filtered by a route's policy), in the order they were given.
//!
//! A JSON body, or each event of a stream, is held whole up to the largest of the
//! transforms' limits and rewritten; every other byte passes as it came. A body or event
//! over the limit is passed on as it is (and rewriting resumes at the next event), unless a
//! transform says it must not be shown ([`Transform::oversized`]).

use bytes::Bytes;

use super::sse::{self, EventEnds, EventSkip};

/// What became of one message.
#[derive(Debug, PartialEq, Eq)]
pub enum Rewritten {
    Same,
    New(Vec<u8>),
    /// Not shown at all.
    Drop,
}

/// The rest of a body or event over the limit: passed as it is, or dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    Keep,
    /// Dropped (replaced, or not to be shown).
    Drop,
}

/// One rewrite of the messages of an answer.
pub trait Transform: Send + Sync {
    /// The largest body or event this transform must read whole.
    fn limit(&self) -> usize;
    /// One message: a JSON body, or the data of one event (its `data:` lines joined).
    fn message(&mut self, data: &[u8]) -> Rewritten;
    /// An event whose bytes are not UTF-8: passed as it is unless the transform says.
    fn undecodable(&mut self, _event: &[u8]) -> Rewritten {
        Rewritten::Same
    }
    /// A body or event over the limit (its first `held` bytes): what is written in its place
    /// goes into `out`, in the framing of the answer (`sse`).
    fn oversized(&mut self, _held: &[u8], _sse: bool, _out: &mut Vec<u8>) -> Pass {
        Pass::Keep
    }
}

/// The rewrite of one answer.
pub struct Rewrite {
    sse: bool,
    transforms: Vec<Box<dyn Transform>>,
    limit: usize,
    held: Vec<u8>,
    ends: EventEnds,
    /// Passing the rest of an oversized body or event.
    passing: Option<Pass>,
    skip: EventSkip,
}

impl std::fmt::Debug for Rewrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Rewrite(sse: {}, held: {})", self.sse, self.held.len())
    }
}

/// The most of one event held while it grows past what a large one needs.
const SHRINK_ABOVE: usize = 64 * 1024;

impl Rewrite {
    /// For an answer that is an event stream (`sse`) or a JSON body.
    pub fn new(sse: bool) -> Rewrite {
        Rewrite {
            sse,
            transforms: Vec::new(),
            limit: 0,
            held: Vec::new(),
            ends: EventEnds::default(),
            passing: None,
            skip: EventSkip::default(),
        }
    }

    /// Rewrite with `transform` too, after those given before.
    pub fn push(&mut self, transform: Box<dyn Transform>) {
        self.limit = self.limit.max(transform.limit());
        self.transforms.push(transform);
    }

    /// The memory held now (reserved in the memory budget as it grows and shrinks).
    pub fn held(&self) -> usize {
        self.held.capacity()
    }

    pub fn feed(&mut self, chunk: &[u8]) -> Bytes {
        let mut out = Vec::new();
        let mut rest = chunk;
        if let Some(pass) = self.passing {
            if !self.sse {
                return match pass {
                    Pass::Keep => Bytes::copy_from_slice(chunk),
                    Pass::Drop => Bytes::new(),
                };
            }
            match self.skip.end_in(rest) {
                Some(end) => {
                    if pass == Pass::Keep {
                        out.extend_from_slice(&rest[..end]);
                    }
                    rest = &rest[end..];
                    self.passing = None;
                }
                None if pass == Pass::Keep => return Bytes::copy_from_slice(chunk),
                None => return Bytes::new(),
            }
        }
        self.held.extend_from_slice(rest);
        if self.sse {
            while let Some(end) = self.ends.next(&self.held) {
                let event: Vec<u8> = self.held.drain(..end).collect();
                out.extend_from_slice(&self.rewrite_event(&event));
            }
            if self.held.capacity() > SHRINK_ABOVE && self.held.len() < self.held.capacity() / 4 {
                // A large event went: give its room back.
                self.held.shrink_to(self.held.len().max(4096));
            }
        }
        if self.held.len() > self.limit {
            self.pass_oversized(&mut out);
        }
        Bytes::from(out)
    }

    /// What is held is over the limit: it goes on as the transforms say, and the rest of its
    /// body or event with it.
    fn pass_oversized(&mut self, out: &mut Vec<u8>) {
        let held = std::mem::take(&mut self.held);
        self.ends.consumed();
        let sse = self.sse;
        let pass = self
            .transforms
            .iter_mut()
            .map(|t| t.oversized(&held, sse, out))
            .find(|p| *p == Pass::Drop)
            .unwrap_or(Pass::Keep);
        self.passing = Some(pass);
        if sse {
            // Follow the passed bytes to find where this event ends.
            self.skip = EventSkip::mid_line();
            if let Some(end) = self.skip.end_in(&held) {
                if pass == Pass::Keep {
                    out.extend_from_slice(&held[..end]);
                }
                self.passing = None;
                let tail = held[end..].to_vec();
                out.extend_from_slice(&self.feed(&tail));
                return;
            }
        }
        if pass == Pass::Keep {
            out.extend_from_slice(&held);
        }
    }

    pub fn finish(&mut self) -> Bytes {
        let held = std::mem::take(&mut self.held);
        if self.passing.is_some() || held.is_empty() {
            return Bytes::from(held);
        }
        if self.sse {
            // A last event the stream did not end with a blank line.
            return Bytes::from(self.rewrite_event(&held));
        }
        match self.rewrite_message(&held) {
            Rewritten::Same => Bytes::from(held),
            Rewritten::New(bytes) => Bytes::from(bytes),
            Rewritten::Drop => Bytes::new(),
        }
    }

    /// One message through every transform, each given what the one before made of it.
    fn rewrite_message(&mut self, data: &[u8]) -> Rewritten {
        let mut rewritten: Option<Vec<u8>> = None;
        for t in &mut self.transforms {
            match t.message(rewritten.as_deref().unwrap_or(data)) {
                Rewritten::Same => {}
                Rewritten::New(bytes) => rewritten = Some(bytes),
                Rewritten::Drop => return Rewritten::Drop,
            }
        }
        rewritten.map_or(Rewritten::Same, Rewritten::New)
    }

    /// One event with its data rewritten, as it came, or dropped.
    fn rewrite_event(&mut self, event: &[u8]) -> Vec<u8> {
        let Ok(text) = std::str::from_utf8(event) else {
            let said = self
                .transforms
                .iter_mut()
                .map(|t| t.undecodable(event))
                .find(|r| *r != Rewritten::Same);
            return match said {
                Some(Rewritten::New(bytes)) => bytes,
                Some(_) => Vec::new(),
                None => event.to_vec(),
            };
        };
        let lines = sse::lines(text);
        let Some(data) = sse::data(&lines) else {
            return event.to_vec();
        };
        match self.rewrite_message(data.as_bytes()) {
            Rewritten::Same => event.to_vec(),
            Rewritten::Drop => Vec::new(),
            Rewritten::New(bytes) => {
                sse::with_data(&lines, &String::from_utf8_lossy(&bytes), event.len())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Uppercases every message; drops one that says "drop"; an oversized body is replaced.
    struct Upper(usize);

    impl Transform for Upper {
        fn limit(&self) -> usize {
            self.0
        }
        fn message(&mut self, data: &[u8]) -> Rewritten {
            if data == b"drop" {
                return Rewritten::Drop;
            }
            Rewritten::New(data.to_ascii_uppercase())
        }
        fn oversized(&mut self, held: &[u8], _sse: bool, out: &mut Vec<u8>) -> Pass {
            if held.starts_with(b"data: secret") {
                out.extend_from_slice(b"data: REPLACED\n\n");
                return Pass::Drop;
            }
            Pass::Keep
        }
    }

    fn run(r: &mut Rewrite, input: &[u8], step: usize) -> String {
        let mut out = Vec::new();
        for chunk in input.chunks(step) {
            out.extend_from_slice(&r.feed(chunk));
        }
        out.extend_from_slice(&r.finish());
        String::from_utf8(out).unwrap()
    }

    fn stream(limit: usize) -> Rewrite {
        let mut r = Rewrite::new(true);
        r.push(Box::new(Upper(limit)));
        r
    }

    #[test]
    fn events_are_rewritten_whatever_the_chunks() {
        let input =
            "event: message\r\ndata: a\r\ndata: b\r\n\r\n: keep\n\ndata: drop\n\ndata: last";
        for step in 1..=input.len() {
            assert_eq!(
                run(&mut stream(1024), input.as_bytes(), step),
                "event: message\r\ndata: A\r\ndata: B\r\n\r\n: keep\n\ndata: LAST\n",
                "step {step}"
            );
        }
    }

    #[test]
    fn an_oversized_event_passes_or_is_replaced_and_the_next_is_rewritten() {
        let big = format!("data: {}\n\n", "x".repeat(100));
        let secret = format!("data: secret{}\n\n", "y".repeat(100));
        let input = format!("{big}{secret}data: after\n\n");
        // Held past the limit, as small chunks make it: passed as it is, or replaced.
        for step in [1, 7, 31] {
            let out = run(&mut stream(32), input.as_bytes(), step);
            assert_eq!(
                out,
                format!("{big}data: REPLACED\n\ndata: AFTER\n\n"),
                "step {step}"
            );
        }
        // Events that arrive whole in one chunk are never held: each is rewritten.
        let out = run(&mut stream(32), input.as_bytes(), input.len());
        assert_eq!(out, input.to_ascii_uppercase().replace("DATA:", "data:"));
        let mut json = Rewrite::new(false);
        json.push(Box::new(Upper(4)));
        assert_eq!(
            run(&mut json, b"abcdefgh", 3),
            "abcdefgh",
            "a large body passes as it is"
        );
        let mut json = Rewrite::new(false);
        json.push(Box::new(Upper(64)));
        assert_eq!(run(&mut json, b"{\"a\":1}", 2), "{\"A\":1}");
    }
}
