//! How the reports go into `docs/benchmarks.md`: the document is split at its `## ` headings,
//! and a script replaces only the sections it writes, so the sections other scripts write and
//! the hand-written ones stay as they are.

/// `doc` split at its `## ` heading lines: the text before the first, and each section from
/// its heading line up to the next one.
fn sections(doc: &str) -> (&str, Vec<&str>) {
    let mut starts: Vec<usize> = doc.match_indices("\n## ").map(|(i, _)| i + 1).collect();
    if doc.starts_with("## ") {
        starts.insert(0, 0);
    }
    let head = &doc[..starts.first().copied().unwrap_or(doc.len())];
    let parts = starts
        .iter()
        .enumerate()
        .map(|(n, &at)| &doc[at..starts.get(n + 1).copied().unwrap_or(doc.len())])
        .collect();
    (head, parts)
}

fn heading(section: &str) -> &str {
    section.lines().next().unwrap_or_default()
}

/// Puts `section` (which starts with its `## ` heading) into `doc` in place of the section of
/// the same heading, or before `## SQLite extension` when there is none, or at the end.
pub fn splice(doc: &str, section: &str) -> String {
    let name = heading(section);
    let section = section.trim_end();
    let (head, parts) = sections(doc);
    let mut out = head.to_owned();
    let mut placed = false;
    for part in parts {
        let this = heading(part);
        if !placed && (this == name || this == "## SQLite extension") {
            out.push_str(section);
            out.push_str("\n\n");
            placed = true;
        }
        if this != name {
            out.push_str(part);
        }
    }
    if placed {
        out
    } else {
        format!("{}\n\n{section}\n", doc.trim_end())
    }
}

/// The report `md` written over `old`, the document it replaces: the report's head and its
/// own sections (its `## ` headings) take the place of theirs, and every other section of `old`
/// (other scripts' and hand-written ones) follows, as it was and in its order.
pub fn rewrite(old: Option<&str>, md: &str) -> String {
    let own: Vec<&str> = sections(md).1.into_iter().map(heading).collect();
    let mut out = md.trim_end().to_owned();
    out.push('\n');
    let Some(old) = old else { return out };
    for part in sections(old).1 {
        if !own.contains(&heading(part)) {
            out.push('\n');
            out.push_str(part.trim_end());
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splice_replaces_the_section_of_the_same_heading_and_keeps_the_rest() {
        let doc = "# B\n\n## One\nold\n\n## Speed x\nold speed\n\n## SQLite extension\nsql\n";
        let out = splice(doc, "## Speed x\nnew speed\n");
        assert_eq!(
            out,
            "# B\n\n## One\nold\n\n## Speed x\nnew speed\n\n## SQLite extension\nsql\n"
        );
        let fresh = splice(
            "# B\n\n## One\nx\n\n## SQLite extension\nsql\n",
            "## Speed x\ny\n",
        );
        assert_eq!(
            fresh,
            "# B\n\n## One\nx\n\n## Speed x\ny\n\n## SQLite extension\nsql\n"
        );
    }

    #[test]
    fn a_rewrite_replaces_the_reports_sections_and_keeps_every_other_in_its_order() {
        let old = "# Old title\n\nold preamble\n\n## Throughput and latency\n\nold table\n\n\
                   ## Speed against the machine's ceiling (issue 19)\n\nspeed table\n\n\
                   ## Details\n\nold details\n### a subsection\n\n\
                   ## Speed: what was tried (issue 19)\n\n- a bullet\n\n\
                   ## SQLite extension\n\nvfs table\n";
        let md = "# New title\n\nnew preamble\n\n## Throughput and latency\n\nnew table\n\n\
                  ## Details\n\nnew details\n";
        let doc = rewrite(Some(old), md);
        assert!(doc.starts_with("# New title\n\nnew preamble\n"), "{doc}");
        for gone in [
            "Old title",
            "old preamble",
            "old table",
            "old details",
            "a subsection",
        ] {
            assert!(!doc.contains(gone), "{gone} should be replaced: {doc}");
        }
        let order = [
            "new table",
            "new details",
            "## Speed against the machine's ceiling (issue 19)\n\nspeed table",
            "## Speed: what was tried (issue 19)\n\n- a bullet",
            "## SQLite extension\n\nvfs table",
        ];
        let at: Vec<usize> = order
            .iter()
            .map(|s| doc.find(s).unwrap_or_else(|| panic!("{s} missing: {doc}")))
            .collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "order {at:?}: {doc}");
        assert_eq!(doc.matches("## Details").count(), 1, "{doc}");
        assert_eq!(rewrite(None, md), md);
    }

    #[test]
    fn the_committed_document_rewritten_with_its_own_report_part_is_unchanged() {
        // The report's part is docs/benchmarks.md up to the first section another script owns.
        let doc = include_str!("../../docs/benchmarks.md");
        let head_end = doc
            .find("\n## Speed against the machine's ceiling")
            .expect("the speed section follows the report's")
            + 1;
        // Blank lines between sections may differ; nothing else may.
        let norm = |t: &str| {
            let mut t = t.trim_end().to_owned();
            while t.contains("\n\n\n") {
                t = t.replace("\n\n\n", "\n\n");
            }
            t
        };
        assert_eq!(norm(&rewrite(Some(doc), &doc[..head_end])), norm(doc));
        // So does splicing a section of it back in place.
        let speed = sections(doc)
            .1
            .into_iter()
            .find(|p| heading(p).starts_with("## Speed against the machine's ceiling"))
            .expect("the speed section");
        assert_eq!(norm(&splice(doc, speed)), norm(doc));
    }
}
