//! The file names of `naming.rs` against the vectors of `tests/naming/`: `urls.json` holds the
//! URLs and `expected.json` what the WHATWG URL parser of Node.js gives for them
//! (`tests/naming/whatwg.mjs` writes it), so the `url` crate's reading of a URL is checked
//! against a second, independent implementation of the same standard.

use serde_json::Value;
use serde_json::json;
use sqlite_ursula_vfs::naming::name_stream;

fn vectors(file: &str) -> Value {
    let path = format!("{}/tests/naming/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn every_vector_names_the_file_the_whatwg_parser_of_node_names() {
    let urls = vectors("urls.json");
    let expected = vectors("expected.json");
    let want = expected["names"].as_array().expect("expected.json: names");
    let urls = urls["urls"].as_array().expect("urls.json: urls");
    assert_eq!(
        urls.len(),
        want.len(),
        "expected.json is stale: run tests/naming/whatwg.mjs"
    );
    let mut refusals = 0;
    for (url, want) in urls.iter().zip(want) {
        let url = url.as_str().expect("a URL is a string");
        let got = match name_stream(url) {
            Ok(n) => json!({
                "url": url, "identity": n.identity, "attach": n.url,
                "name": n.file_name(0), "ro3": n.file_name(3),
            }),
            Err(_) => {
                refusals += 1;
                json!({"url": url, "error": "invalid_url"})
            }
        };
        assert_eq!(&got, want, "{url}");
    }
    // Some vectors must be refusals and most names, or the comparison proves little.
    assert!(refusals >= 10, "{refusals} refusals");
    assert!(urls.len() - refusals >= 50);
}
