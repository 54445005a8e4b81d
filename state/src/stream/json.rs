//! JSON mode bodies: RFC 8259 validation, removal of insignificant whitespace, and one level of
//! top-level array flattening, all in one pass that keeps every token's original text.
//!
//! A hand-written scanner rather than serde_json because the stored text must keep member order,
//! duplicate members, number spelling and escapes of unpaired surrogates exactly as sent, which a
//! parse-and-reserialize round trip does not.

/// Deepest message the server stores. A scalar has depth 0.
pub const MAX_DEPTH: usize = 127;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum JsonError {
    #[error("invalid JSON at byte {at}: {what}")]
    Syntax {
        at: usize,
        what: std::borrow::Cow<'static, str>,
    },
    #[error("JSON message nests deeper than {MAX_DEPTH} levels")]
    TooDeep,
    #[error("an append of an empty JSON array stores nothing")]
    EmptyArray,
}

/// The stored form of a JSON body: each message minified and followed by one LF.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Messages {
    pub text: Vec<u8>,
    pub count: usize,
}

/// Converts a body to stored messages. A top-level array yields one message per element.
/// `allow_empty_array`: a create may send `[]`, an append may not.
pub fn to_messages(body: &[u8], allow_empty_array: bool) -> Result<Messages, JsonError> {
    let mut p = Parser { src: body, pos: 0 };
    p.skip_ws();
    let mut out = Messages {
        text: Vec::with_capacity(body.len() + 1),
        count: 0,
    };
    if p.peek() == Some(b'[') {
        p.pos += 1;
        p.skip_ws();
        if p.peek() == Some(b']') {
            p.pos += 1;
        } else {
            loop {
                p.skip_ws();
                let depth = p.value(&mut out.text, 0)?;
                if depth > MAX_DEPTH {
                    return Err(JsonError::TooDeep);
                }
                out.text.push(b'\n');
                out.count += 1;
                p.skip_ws();
                match p.next() {
                    Some(b',') => continue,
                    Some(b']') => break,
                    _ => return Err(p.err("expected ',' or ']'")),
                }
            }
        }
    } else {
        let depth = p.value(&mut out.text, 0)?;
        if depth > MAX_DEPTH {
            return Err(JsonError::TooDeep);
        }
        out.text.push(b'\n');
        out.count = 1;
    }
    p.skip_ws();
    if p.pos != body.len() {
        return Err(p.err("trailing data after the JSON value"));
    }
    if out.count == 0 && !allow_empty_array {
        return Err(JsonError::EmptyArray);
    }
    Ok(out)
}

struct Parser<'a> {
    src: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.src.get(self.pos).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.pos += 1;
        Some(b)
    }

    fn err(&self, what: &'static str) -> JsonError {
        JsonError::Syntax {
            at: self.pos,
            what: what.into(),
        }
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    /// Copies one value to `out`; returns its depth. `level` bounds recursion on hostile input.
    fn value(&mut self, out: &mut Vec<u8>, level: usize) -> Result<usize, JsonError> {
        if level > MAX_DEPTH + 1 {
            return Err(JsonError::TooDeep);
        }
        match self.peek() {
            Some(b'{') => self.container(out, level, b'{', b'}', true),
            Some(b'[') => self.container(out, level, b'[', b']', false),
            Some(b'"') => self.string(out).map(|_| 0),
            Some(b't') => self.literal(out, b"true"),
            Some(b'f') => self.literal(out, b"false"),
            Some(b'n') => self.literal(out, b"null"),
            Some(b'-' | b'0'..=b'9') => self.number(out),
            Some(_) => Err(self.err("unexpected character")),
            None => Err(self.err("unexpected end of input")),
        }
    }

    fn container(
        &mut self,
        out: &mut Vec<u8>,
        level: usize,
        open: u8,
        close: u8,
        object: bool,
    ) -> Result<usize, JsonError> {
        self.pos += 1;
        out.push(open);
        self.skip_ws();
        let mut deepest = 0;
        if self.peek() == Some(close) {
            self.pos += 1;
            out.push(close);
            return Ok(1);
        }
        loop {
            self.skip_ws();
            if object {
                if self.peek() != Some(b'"') {
                    return Err(self.err("expected a member name"));
                }
                self.string(out)?;
                self.skip_ws();
                if self.next() != Some(b':') {
                    return Err(self.err("expected ':'"));
                }
                out.push(b':');
                self.skip_ws();
            }
            deepest = deepest.max(self.value(out, level + 1)?);
            self.skip_ws();
            match self.next() {
                Some(b',') => out.push(b','),
                Some(b) if b == close => {
                    out.push(close);
                    return Ok(deepest + 1);
                }
                _ => return Err(self.err("expected ',' or the end of the container")),
            }
        }
    }

    fn literal(&mut self, out: &mut Vec<u8>, word: &'static [u8]) -> Result<usize, JsonError> {
        if self.src.get(self.pos..self.pos + word.len()) != Some(word) {
            return Err(self.err("invalid literal"));
        }
        self.pos += word.len();
        out.extend_from_slice(word);
        Ok(0)
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
        self.pos - start
    }

    fn number(&mut self, out: &mut Vec<u8>) -> Result<usize, JsonError> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(self.err("invalid number")),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if self.digits() == 0 {
                return Err(self.err("invalid fraction"));
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return Err(self.err("invalid exponent"));
            }
        }
        out.extend_from_slice(&self.src[start..self.pos]);
        Ok(0)
    }

    fn string(&mut self, out: &mut Vec<u8>) -> Result<(), JsonError> {
        let start = self.pos;
        self.pos += 1;
        loop {
            let Some(b) = self.next() else {
                return Err(self.err("unterminated string"));
            };
            match b {
                b'"' => break,
                b'\\' => match self.next() {
                    Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => {}
                    Some(b'u') => {
                        let hex = self.src.get(self.pos..self.pos + 4);
                        if !hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                            return Err(self.err("invalid \\u escape"));
                        }
                        self.pos += 4;
                    }
                    _ => return Err(self.err("invalid escape")),
                },
                0x00..=0x1f => return Err(self.err("control character in string")),
                0x80..=0xff => {
                    // Validate one UTF-8 sequence starting at this byte.
                    let rest = &self.src[self.pos - 1..];
                    let width = utf8_width(b);
                    let seq = rest.get(..width).ok_or_else(|| self.err("invalid UTF-8"))?;
                    if width == 0 || std::str::from_utf8(seq).is_err() {
                        return Err(self.err("invalid UTF-8"));
                    }
                    self.pos += width - 1;
                }
                _ => {}
            }
        }
        out.extend_from_slice(&self.src[start..self.pos]);
        Ok(())
    }
}

fn utf8_width(first: u8) -> usize {
    match first {
        0xc2..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xf4 => 4,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(body: &str) -> String {
        String::from_utf8(to_messages(body.as_bytes(), false).expect("valid").text).expect("utf8")
    }

    #[test]
    fn whitespace_goes_and_text_stays() {
        assert_eq!(
            stored(" { \"b\" : 1 , \"a\" : [ 1.50e3 , \"x y\" ] } "),
            "{\"b\":1,\"a\":[1.50e3,\"x y\"]}\n"
        );
        assert_eq!(stored("{\"a\":1,\"a\":2}"), "{\"a\":1,\"a\":2}\n");
        assert_eq!(stored("\"\\ud800\""), "\"\\ud800\"\n");
        assert_eq!(stored("1e400"), "1e400\n");
    }

    #[test]
    fn top_level_arrays_flatten_one_level() {
        assert_eq!(stored("[{\"a\":1},{\"b\":2}]"), "{\"a\":1}\n{\"b\":2}\n");
        assert_eq!(stored("[[1,2],[3,4]]"), "[1,2]\n[3,4]\n");
        assert_eq!(stored("[[[1,2,3]]]"), "[[1,2,3]]\n");
        assert_eq!(to_messages(b"[]", true).map(|m| m.count), Ok(0));
        assert_eq!(to_messages(b"[]", false), Err(JsonError::EmptyArray));
    }

    #[test]
    fn invalid_bodies_are_refused() {
        for bad in [
            "{} {}",
            "{",
            "[1,]",
            "01",
            "\"\u{1}\"",
            "nul",
            "{\"a\" 1}",
            "",
            "1.",
            "-",
        ] {
            assert!(to_messages(bad.as_bytes(), false).is_err(), "{bad:?}");
        }
        assert!(to_messages(b"\"\xff\"", false).is_err());
    }

    #[test]
    fn depth_is_counted_per_message() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(to_messages(deep(127).as_bytes(), false).is_ok());
        // 128 levels as one body is an array of one 127-deep message.
        assert!(to_messages(deep(128).as_bytes(), false).is_ok());
        assert_eq!(
            to_messages(format!("{{\"a\":{}}}", deep(127)).as_bytes(), false),
            Err(JsonError::TooDeep)
        );
        assert_eq!(
            to_messages(deep(100_000).as_bytes(), false),
            Err(JsonError::TooDeep)
        );
    }
}
