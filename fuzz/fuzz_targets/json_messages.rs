//! JSON-mode append and create bodies (`state/src/stream/json.rs`): the hand-written scanner
//! that validates, minifies and flattens a body into stored messages.
//!
//! Beyond "no panic": every stored message is one line of minified, valid JSON (serde_json
//! agrees), the count matches the lines, storing the messages again as an array gives the
//! same messages (the stored form is a fixed point), and every body serde_json accepts as a
//! value the scanner accepts too (it is at least as permissive as RFC 8259 requires).

#![no_main]

use libfuzzer_sys::fuzz_target;
use ursula_state::stream::json::JsonError;
use ursula_state::stream::json::MAX_DEPTH;
use ursula_state::stream::json::to_messages;

fuzz_target!(|data: &[u8]| {
    let create = to_messages(data, true);
    let append = to_messages(data, false);
    match (&create, &append) {
        (Ok(c), Ok(a)) => assert_eq!(c, a),
        (Ok(c), Err(JsonError::EmptyArray)) => assert_eq!(c.count, 0),
        (Err(c), Err(a)) => assert_eq!(c, a),
        _ => panic!("create {create:?} and append {append:?} disagree"),
    }
    let Ok(stored) = create else {
        // serde_json nests at most 128 levels, the scanner 127 per message: below that, any
        // value serde_json reads (a lone surrogate escape is refused by it, not by the
        // scanner, so only the scanner's acceptance is implied) must be accepted.
        if nesting(data) < MAX_DEPTH && serde_json::from_slice::<serde_json::Value>(data).is_ok() {
            panic!("serde_json reads a body the scanner refused: {create:?}");
        }
        return;
    };
    // Capacity planned from the body: the text is never more than the body and its LFs.
    assert!(stored.text.len() <= data.len() + stored.count.max(1));
    let lines: Vec<&[u8]> = stored
        .text
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(lines.len(), stored.count);
    assert!(stored.count == 0 || stored.text.ends_with(b"\n"));
    for line in &lines {
        assert!(
            serde_json::from_slice::<serde::de::IgnoredAny>(line).is_ok(),
            "a stored message is not JSON: {:?}",
            String::from_utf8_lossy(line)
        );
        assert!(std::str::from_utf8(line).is_ok(), "stored text is UTF-8");
        assert!(
            !has_insignificant_space(line),
            "stored messages are minified"
        );
    }
    // The messages as one array body store as themselves.
    let mut again = b"[".to_vec();
    again.extend_from_slice(&lines.join(&b","[..]));
    again.push(b']');
    assert_eq!(to_messages(&again, true).as_ref(), Ok(&stored));
});

/// The deepest bracket nesting of `data`, outside strings.
fn nesting(data: &[u8]) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    for b in outside_strings(data) {
        match b {
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Whether `line` has whitespace outside its strings.
fn has_insignificant_space(line: &[u8]) -> bool {
    outside_strings(line).any(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
}

/// The bytes of `data` outside its JSON strings, the strings' quotes left out too.
fn outside_strings(data: &[u8]) -> impl Iterator<Item = u8> + '_ {
    let (mut in_string, mut escaped) = (false, false);
    data.iter().copied().filter(move |&b| {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            false
        } else if b == b'"' {
            in_string = true;
            false
        } else {
            true
        }
    })
}
