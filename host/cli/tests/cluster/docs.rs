//! Reading the command blocks of the README and `docs/*.md`, for the tests
//! that run them as written.

/// The commands of the first ```sh block after the line containing
/// `marker`: one per line.
pub fn block_after(text: &str, marker: &str) -> Vec<String> {
    let from = text.find(marker).unwrap_or_else(|| panic!("no {marker:?} in the document"));
    let rest = &text[from..];
    let start = rest.find("```sh\n").unwrap_or_else(|| panic!("no sh block after {marker:?}")) + "```sh\n".len();
    let end = rest[start..].find("```").unwrap() + start;
    rest[start..end].lines().filter(|l| !l.trim().is_empty()).map(str::to_string).collect()
}

/// Every ```sh block of `text`, each as its lines (continuations joined).
pub fn sh_blocks(text: &str) -> Vec<Vec<String>> {
    let mut blocks = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("```sh\n") {
        let body = &rest[start + "```sh\n".len()..];
        let end = body.find("```").expect("an unterminated sh block");
        let mut lines: Vec<String> = Vec::new();
        let mut continued = false;
        for line in body[..end].lines().filter(|l| !l.trim().is_empty()) {
            if continued {
                let last = lines.last_mut().unwrap();
                last.truncate(last.trim_end().trim_end_matches('\\').trim_end().len());
                last.push(' ');
                last.push_str(line.trim());
            } else {
                lines.push(line.to_string());
            }
            continued = line.trim_end().ends_with('\\');
        }
        blocks.push(lines);
        rest = &body[end + 3..];
    }
    blocks
}

/// Splits `cmd   # comment` at the comment.
pub fn split_comment(line: &str) -> (&str, Option<&str>) {
    match line.find("  #") {
        Some(i) => (line[..i].trim(), Some(line[i..].trim_start().trim_start_matches('#').trim())),
        None => (line.trim(), None),
    }
}

/// The output a comment promises: its first word, when that word is all of
/// it but a parenthesis (`OK`, `1 (keys deleted)`).
pub fn promised(comment: &str) -> Option<&str> {
    let head = comment.split(" (").next().unwrap().trim();
    (!head.is_empty() && !head.contains(' ')).then_some(head)
}
